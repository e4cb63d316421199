import { compare } from './compare.js';
import { definitionChecks } from './definition.js';
import { asForced } from './forced.js';
import type { TokenSequence } from './parse/tokenfile.js';
import type { Comparison, ParsedResponse, Thresholds, TokenStep } from './types.js';

/**
 * A trainer's token logprobs against an engine's for the same tokens (docs/training.md): the
 * sequences lined up position by position (sampled, non-greedy sequences are fine: both sides
 * score the same tokens, so every position is comparable), compared like teacher-forced
 * positions, with the importance ratio RL engineers truncate on. Pure.
 */

/** The importance-ratio bounds reported (`exp(lp_train − lp_infer)` outside them is usually clipped or masked). */
export const RATIO_BOUNDS = Object.freeze([0.8, 1.25] as const);

/** the documented `training` block of a token-file comparison. */
export interface TrainingBlock {
  /** Which side of the comparison is the trainer (`candidate`): the token-logprob file, else the first input. */
  train: 'candidate';
  infer: 'baseline';
  /** Positions lined up. */
  positions: number;
  /** How the two were lined up (by ids, by text, by position) and where. */
  alignment: string;
  /** `r = exp(lp_train − lp_infer)` over positions where both logprobs are known. */
  ratio: {
    mean: number | null;
    min: number | null;
    max: number | null;
    n: number;
    outside: number;
    outsideShare: number | null;
    bounds: readonly [number, number];
  };
  /** `mean(r − 1 − log r)`: an estimate of KL(infer ‖ train) from the tokens themselves, unbiased when they were sampled from the inference side. */
  klSampled: number | null;
  /** Up to ten positions with the largest |lp_train − lp_infer|. */
  worst: Array<{ i: number; token: string; train: number | null; infer: number | null; ratio: number | null }>;
}

/** A comparison of two scored sequences, with its training block. */
export type TrainingComparison = Comparison & { training: TrainingBlock; id?: string };

type Lined = { train: TokenStep[]; infer: TokenStep[]; alignment: string };

const hasIds = (s: TokenSequence) => !s.chosenUnknown && s.steps.length > 0 && s.steps.every((x) => x.id !== undefined);
const hasTexts = (s: TokenSequence) =>
  !s.chosenUnknown && s.steps.length > 0 && s.steps.every((x) => x.token !== '' && !/^token_id:\d+$/.test(x.token));

/** A token's text with byte-level BPE and SentencePiece markers read as what they stand for (Ġ and ▁ a space, Ċ a newline). */
function spelled(t: string): string {
  return t
    .replace(/[\u0120\u2581]/g, ' ')
    .replace(/\u010a/g, '\n')
    .replace(/\u0109/g, '\t');
}

/** Offsets where `short` sits inside `long` by `same`, last first (a response is the end of the sequence). */
function offsets(nShort: number, nLong: number, same: (i: number, o: number) => boolean): number[] {
  const out: number[] = [];
  for (let o = nLong - nShort; o >= 0; o--) {
    let ok = true;
    for (let i = 0; i < nShort && ok; i++) ok = same(i, o);
    if (ok) out.push(o);
  }
  return out;
}

/** The first index at which two equal-length sequences differ by `same`, or -1. */
function firstDiff(n: number, same: (i: number) => boolean): number {
  for (let i = 0; i < n; i++) if (!same(i)) return i;
  return -1;
}

/** The chosen token of a distribution-only side (prompt_logprobs without ids), taken from the other side's ids. */
function withChosen(step: TokenStep, id: number, text: string): TokenStep | null {
  const j = step.topIds?.indexOf(id) ?? -1;
  if (j < 0) return null;
  return {
    ...step,
    id,
    token: step.top[j]![0].startsWith('token_id:') ? text : step.top[j]![0],
    logprob: Number.isFinite(step.top[j]![1]) ? step.top[j]![1] : null,
  };
}

/** Lines up a side that names no chosen token with the other side's ids, each checked against that position's entries. */
function alignByDistribution(
  train: TokenSequence,
  infer: TokenSequence,
  unknown: 'train' | 'infer',
): Lined | { error: string } {
  const a = train.steps;
  const b = infer.steps;
  const known = unknown === 'train' ? infer : train;
  const dist = unknown === 'train' ? a : b;
  if (!hasIds(known))
    return {
      error: `the ${unknown === 'train' ? 'trainer' : 'engine'}'s side names no scored token (prompt_logprobs without prompt_token_ids) and the other side names no token ids to take them from`,
    };
  const ks = known.steps;
  if (ks.length > dist.length)
    return { error: `the side with token ids has ${ks.length} positions, the distributions only ${dist.length}` };
  const found = offsets(ks.length, dist.length, (i, o) => (dist[o + i]!.topIds ?? []).includes(ks[i]!.id!));
  if (found.length === 0)
    return {
      error: `the token ids are not among the other side's entries at any offset: not the same tokens (or the engine was asked for the wrong prompt)`,
    };
  const o = found[0]!;
  const filled = ks.map((s, i) => withChosen(dist[o + i]!, s.id!, s.token)!);
  const lined =
    unknown === 'train'
      ? { train: filled, infer: ks.map((s) => ({ ...s })) }
      : { train: ks.map((s) => ({ ...s })), infer: filled };
  return {
    ...lined,
    alignment: `by token ids: the ${ks.length} ids of the ${unknown === 'train' ? 'engine' : 'trainer'} found among the ${unknown === 'train' ? 'trainer' : 'engine'}'s entries at offset ${o} of ${dist.length}`,
  };
}

/** Lines up two sequences that both name ids (`byIds`) or both spell their tokens, the shorter found inside the longer. */
function alignByKey(train: TokenSequence, infer: TokenSequence, byIds: boolean): Lined | { error: string } {
  const a = train.steps;
  const b = infer.steps;
  const byText = !byIds;
  const key = (s: TokenStep) => (byIds ? s.id : spelled(s.token));
  const how = byIds ? 'token ids' : 'token texts';
  const [short, long, shortIsTrain] = a.length <= b.length ? [a, b, true] : [b, a, false];
  if (a.length === b.length) {
    const d = firstDiff(a.length, (i) => key(a[i]!) === key(b[i]!));
    // Texts from two tokenizer APIs may spell the same ids differently (a trainer's convert_ids_to_tokens, an engine's decoded pieces).
    if (d >= 0 && byText && (hasIds(train) || hasIds(infer)))
      return {
        train: a,
        infer: b,
        alignment: `by position (${a.length}): the token texts differ (first at ${d}: ${JSON.stringify(a[d]!.token)} and ${JSON.stringify(b[d]!.token)}) and only one side names ids, so the tokens are not verified`,
      };
    if (d >= 0)
      return {
        error: `not the same tokens: by ${how}, position ${d} is ${JSON.stringify(a[d]!.token)} (${a[d]!.id ?? '?'}) for the trainer and ${JSON.stringify(b[d]!.token)} (${b[d]!.id ?? '?'}) for the engine`,
      };
    return { train: a, infer: b, alignment: `by ${how}, ${a.length} positions` };
  }
  const found = offsets(short.length, long.length, (i, o) => key(short[i]!) === key(long[o + i]!));
  if (found.length === 0)
    return {
      error: `not the same tokens: by ${how}, the ${short.length} positions of the ${shortIsTrain ? 'trainer' : 'engine'} are nowhere in the ${long.length} of the ${shortIsTrain ? 'engine' : 'trainer'}`,
    };
  const o = found[0]!;
  const part = long.slice(o, o + short.length);
  return {
    ...(shortIsTrain ? { train: short, infer: part } : { train: part, infer: short }),
    alignment: `by ${how}: the ${short.length} positions of the ${shortIsTrain ? 'trainer' : 'engine'} at offset ${o} of the ${shortIsTrain ? 'engine' : 'trainer'}'s ${long.length}`,
  };
}

/**
 * Lines two sequences up: by token ids when both name them (the shorter found inside the longer,
 * its last occurrence: a trainer often dumps the response only, an engine's prompt logprobs cover
 * prompt and response), by text when both spell their tokens, else position by position when the
 * lengths agree. A side that names no chosen token (vLLM `prompt_logprobs` alone) takes the other
 * side's ids, each checked against that position's entries. Returns why not, when they do not line up.
 */
export function alignSequences(train: TokenSequence, infer: TokenSequence): Lined | { error: string } {
  const a = train.steps;
  const b = infer.steps;
  if (a.length === 0 || b.length === 0)
    return { error: `a sequence with no positions (train ${a.length}, infer ${b.length})` };
  const unknown = train.chosenUnknown ? 'train' : infer.chosenUnknown ? 'infer' : null;
  if (unknown) return alignByDistribution(train, infer, unknown);
  const byIds = hasIds(train) && hasIds(infer);
  const byText = !byIds && hasTexts(train) && hasTexts(infer);
  if (byIds || byText) return alignByKey(train, infer, byIds);
  if (a.length !== b.length)
    return {
      error: `the sides name their tokens differently (ids on one, texts on the other) and their lengths differ (${a.length} and ${b.length}): cannot line them up`,
    };
  return {
    train: a,
    infer: b,
    alignment: `by position (${a.length}): one side names ids, the other texts, so the tokens are not verified`,
  };
}

const PLACEHOLDER = /^token_id:(\d+)$/;

/** Whether every top entry of the steps has an id, or every one a real text: the key space their alternatives can be matched in. */
function keySpace(steps: readonly TokenStep[]): { ids: boolean; texts: boolean } {
  let ids = true;
  let texts = true;
  for (const s of steps) {
    if (s.top.length === 0) continue;
    if (!s.topIds) ids = false;
    if (s.top.some((e) => PLACEHOLDER.test(e[0]) || e[0] === '')) texts = false;
  }
  return { ids, texts };
}

/**
 * Makes the two sides' alternatives comparable: both keyed by id, or both by text. A side keyed by
 * ids alone (a trainer's `{"<id>": lp}`) against one keyed by text (an OpenAI-shaped response) gets
 * its ids spelled from what both sides reveal (each position's chosen id and text, entries that
 * carry both); when some cannot be spelled, the alternatives are not compared at all (only the
 * chosen tokens are) rather than compared as if different tokens. Returns a note when it changed something.
 */
function reconcileTops(c: TokenStep[], b: TokenStep[]): string | null {
  const kc = keySpace(c);
  const kb = keySpace(b);
  if ((kc.ids && kb.ids) || (kc.texts && kb.texts)) return null;
  const spell = new Map<number, string>();
  for (const s of [...c, ...b]) {
    if (s.id !== undefined && s.token !== '' && !PLACEHOLDER.test(s.token)) spell.set(s.id, s.token);
    s.top.forEach((e, j) => {
      const id = s.topIds?.[j];
      if (id !== undefined && e[0] !== '' && !PLACEHOLDER.test(e[0])) spell.set(id, e[0]);
    });
  }
  const fix = (steps: TokenStep[]) => {
    for (const s of steps) {
      s.top = s.top.map(([t, v], j) => {
        const m = PLACEHOLDER.exec(t);
        const id = m ? Number(m[1]) : s.topIds?.[j];
        return [m && id !== undefined && spell.has(id) ? spell.get(id)! : t, v];
      });
    }
  };
  fix(c);
  fix(b);
  if (keySpace(c).texts && keySpace(b).texts)
    return 'alternatives keyed by token ids on one side were spelled from the tokens both sides name, and matched by text';
  for (const s of [...c, ...b]) {
    s.top = [];
    delete s.topIds;
  }
  return 'top lists not compared: one side keys its alternatives by token id and the other by text, and not every id could be spelled — KL and the top-list figures are over the chosen tokens only';
}

/** Both sides with the same chosen token at each position, so that `compare` sees no divergence. */
function sameChosen(train: TokenStep[], infer: TokenStep[]): [TokenStep[], TokenStep[]] {
  const c: TokenStep[] = [];
  const b: TokenStep[] = [];
  for (let i = 0; i < train.length; i++) {
    const x = train[i]!;
    const y = infer[i]!;
    const text = !/^token_id:\d+$/.test(x.token) && x.token !== '' ? x.token : y.token;
    const id = x.id ?? y.id;
    const cx: TokenStep = { ...x, token: text };
    const cy: TokenStep = { ...y, token: text };
    if (id !== undefined) {
      cx.id = id;
      cy.id = id;
    }
    c.push(cx);
    b.push(cy);
  }
  return [c, b];
}

/** The training block of a comparison whose candidate is the trainer. */
function trainingBlock(c: Comparison, alignment: string): TrainingBlock {
  let sum = 0;
  let k3 = 0;
  let n = 0;
  let min = Infinity;
  let max = -Infinity;
  let outside = 0;
  const [lo, hi] = RATIO_BOUNDS;
  const rows: TrainingBlock['worst'] = [];
  for (const p of c.positions) {
    const d = p.candidate !== null && p.baseline !== null ? p.candidate - p.baseline : null;
    const r = d === null ? null : Math.exp(d);
    if (r !== null && d !== null) {
      sum += r;
      k3 += Math.expm1(d) - d;
      n++;
      if (r < min) min = r;
      if (r > max) max = r;
      if (r < lo || r > hi) outside++;
    }
    rows.push({ i: p.i, token: p.token, train: p.candidate, infer: p.baseline, ratio: r });
  }
  const worst = rows
    .filter((w) => w.ratio !== null)
    .sort((x, y) => Math.abs(Math.log(y.ratio!)) - Math.abs(Math.log(x.ratio!)))
    .slice(0, 10);
  return {
    train: 'candidate',
    infer: 'baseline',
    positions: c.positions.length,
    alignment,
    ratio: {
      mean: n ? sum / n : null,
      min: n ? min : null,
      max: n ? max : null,
      n,
      outside,
      outsideShare: n ? outside / n : null,
      bounds: RATIO_BOUNDS,
    },
    klSampled: n ? Math.max(0, k3 / n) : null,
    worst,
  };
}

/**
 * Compares a trainer's sequence (the candidate) with an engine's (the baseline): lined up, every
 * position compared (`compare` on the forced steps: shift, KL, health, definition checks), and
 * the training block.
 */
export function compareTraining(
  train: TokenSequence,
  infer: TokenSequence,
  t: Thresholds,
): TrainingComparison | { error: string } {
  const r = trainingPair(train, infer, t);
  return 'error' in r ? r : r.comparison;
}

/** {@link compareTraining}, with both sides' lined-up steps as parsed responses (for the report's token strips). */
export function trainingPair(
  train: TokenSequence,
  infer: TokenSequence,
  t: Thresholds,
): { comparison: TrainingComparison; candidate: ParsedResponse; baseline: ParsedResponse } | { error: string } {
  const lined = alignSequences(train, infer);
  if ('error' in lined) return lined;
  const [c, b] = sameChosen(lined.train, lined.infer);
  // Each side's own numbers are checked before their alternatives are made comparable (which may drop them).
  const definition = definitionChecks(
    c,
    b,
    c.length,
    c.every((x) => x.topIds !== undefined) && b.every((x) => x.topIds !== undefined),
  );
  const note = reconcileTops(c, b);
  const candidate = asForced(c);
  const baseline = asForced(b);
  const cmp = compare(candidate, baseline, t);
  if (note) cmp.notes.push(note);
  if (note) cmp.definition = definition;
  if (cmp.verdict === 'incomparable') return { error: cmp.notes[0] ?? 'incomparable' };
  const health = cmp.health ? { ...cmp.health, over: 'scored' as const } : undefined;
  const out: TrainingComparison = {
    ...cmp,
    ...(health ? { health } : {}),
    training: trainingBlock(cmp, lined.alignment),
  };
  const id = train.id ?? infer.id;
  if (id !== undefined) out.id = id;
  return { comparison: out, candidate, baseline };
}

/**
 * Pairs the sequences of two files: by `id` when every sequence on both sides has one, else in
 * order (the counts must agree). Returns why not.
 */
export function pairSequences(
  train: readonly TokenSequence[],
  infer: readonly TokenSequence[],
): Array<[TokenSequence, TokenSequence]> | { error: string } {
  if (train.length === 0 || infer.length === 0)
    return { error: `no sequence on ${train.length === 0 ? 'the trainer' : 'the engine'}'s side` };
  const ided = train.every((s) => s.id !== undefined) && infer.every((s) => s.id !== undefined);
  if (ided) {
    const byId = new Map(infer.map((s) => [s.id!, s] as const));
    const missing = train.filter((s) => !byId.has(s.id!)).map((s) => s.id!);
    if (missing.length === 0) return train.map((s) => [s, byId.get(s.id!)!]);
    if (train.length !== infer.length)
      return {
        error: `sequence ids ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ', …' : ''} have no counterpart on the other side`,
      };
  }
  if (train.length !== infer.length)
    return {
      error: `${train.length} sequences on one side and ${infer.length} on the other (pair them by "id", or give the same number in the same order)`,
    };
  return train.map((s, i) => [s, infer[i]!]);
}

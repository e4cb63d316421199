import { compare } from './compare.js';
import { explain, formatNats } from './explain.js';
import { chooseVerdict } from './verdict.js';
import type { Comparison, ParsedResponse, Thresholds, TokenStep } from './types.js';

/**
 * Past the first divergence (docs/engines.md): the baseline's token sequence scored under both
 * backends with the same prompt (teacher forcing), so every position is comparable, and the
 * prompt's own positions compared where the engines return prompt-token logprobs. Pure: the
 * steps come from src/scoring, which talks to the engines.
 */

/** How a backend scored a fixed sequence: one prefill pass, or one position at a time over its cache. */
export type ScoringMode = 'prefill' | 'incremental';

/** What one backend returned for the forced sequence. */
export interface ScoredSide {
  /** Distributions predicting prompt tokens (entry k predicts the prompt token at `promptStart + k`); empty when the engine gives none. */
  prompt: TokenStep[];
  /** One distribution per forced continuation token, the forced token as the chosen one. */
  continuation: TokenStep[];
}

/** Both sides' scoring of the same forced sequence, and how it was obtained. */
export interface ScoredPair {
  candidate: ScoredSide;
  baseline: ScoredSide;
  /** The engine API used, e.g. `vllm prompt_logprobs`, `llamacpp /completion per position`. */
  method: string;
  mode: ScoringMode;
  /** Index of the first prompt token the prompt block predicts. */
  promptStart: number;
}

/** Why a pair carries no scored positions. */
export type ScoringOutcome = 'ok' | 'unsupported' | 'skipped' | 'failed';

/** Statistics of one set of teacher-forced positions (the `scored` or the `prompt` block). */
export interface ForcedStats {
  /** Positions scored on both sides. */
  positions: number;
  /** Positions with a shift known on both sides. */
  comparable: number;
  /** Positions whose shift is above the noise floor. */
  shifted: number;
  maxShift: number | null;
  meanShift: number | null;
  /** shifted / comparable. */
  shiftedFraction: number | null;
  /** Each position's shift (`null` where unknown), in order: what reports draw and `analyze` re-counts. */
  shifts: Array<number | null>;
}

/** the documented `scored` block: the teacher-forced continuation, or why there is none. */
export interface ScoredBlock extends Partial<ForcedStats> {
  outcome: ScoringOutcome;
  /** The engine API used (outcome `ok`), or the one that was tried. */
  method?: string;
  mode?: ScoringMode;
  /** Whether the scoring read the engine's prefix cache (absent: not said, or a capture written before the field existed). */
  readsCache?: boolean;
  /** Why not scored (`unsupported`, `skipped`, `failed`), or a note on a partial scoring. */
  reason?: string;
}

/** the documented `prompt` block: the prompt's own positions compared. */
export type PromptBlock = ForcedStats & {
  /** Index of the prompt token `shifts[0]` predicts. */
  start: number;
};

/**
 * Where the difference lives, measured: `compute` (the prompt's positions already moved: the
 * model computes differently on any input), `decode_state` (the prompt agrees and the
 * continuation moves: the state carried into decode), `unknown` (not enough to tell).
 */
export type Locus = 'compute' | 'decode_state' | 'unknown';

/** Statistics of forced positions: the chosen tokens are the same on both sides by construction. */
export function forcedStats(
  candidate: readonly TokenStep[],
  baseline: readonly TokenStep[],
  t: Thresholds,
): ForcedStats {
  const n = Math.min(candidate.length, baseline.length);
  if (n === 0)
    return {
      positions: 0,
      comparable: 0,
      shifted: 0,
      maxShift: null,
      meanShift: null,
      shiftedFraction: null,
      shifts: [],
    };
  const c = compare(asResponse(candidate.slice(0, n)), asResponse(baseline.slice(0, n)), t);
  const shifts = c.positions.map((p) => p.shift);
  const known = shifts.filter((s): s is number => s !== null);
  return {
    positions: n,
    comparable: known.length,
    shifted: known.filter((s) => s > t.noiseFloor).length,
    maxShift: known.length > 0 ? Math.max(...known) : null,
    meanShift: known.length > 0 ? known.reduce((a, b) => a + b, 0) / known.length : null,
    shiftedFraction: known.length > 0 ? known.filter((s) => s > t.noiseFloor).length / known.length : null,
    shifts,
  };
}

/** Re-counts stored shifts against other thresholds (`analyze` with a new floor). */
export function recount(shifts: ReadonlyArray<number | null>, t: Pick<Thresholds, 'noiseFloor'>): ForcedStats {
  const known = shifts.filter((s): s is number => s !== null);
  const shifted = known.filter((s) => s > t.noiseFloor).length;
  return {
    positions: shifts.length,
    comparable: known.length,
    shifted,
    maxShift: known.length > 0 ? Math.max(...known) : null,
    meanShift: known.length > 0 ? known.reduce((a, b) => a + b, 0) / known.length : null,
    shiftedFraction: known.length > 0 ? shifted / known.length : null,
    shifts: [...shifts],
  };
}

function asResponse(steps: TokenStep[]): ParsedResponse {
  return { format: 'completions', stream: false, steps, text: steps.map((s) => s.token).join(''), flags: [] };
}

/** The comparison with the scoring folded in: `scored`, `prompt`, `locus`, and the verdict they support. */
export type ScoredComparison = Comparison & { scored: ScoredBlock; prompt: PromptBlock | null; locus: Locus | null };

/**
 * Folds teacher-forced scoring into a free-running comparison. The free-running fields stay as
 * they are; `verdict` and `explanation` are taken over the scored positions when there are any:
 *
 * - verdicts that scoring cannot change stay (`incomparable`, `tokenizer_mismatch`, `identical`);
 * - scored positions shifted: `global_shift` when their shifted share reaches `globalFraction`,
 *   else `local_shift`; none shifted (and no systematic flip): `noise` — unless the free-running
 *   positions did shift and the scoring was one prefill pass: then the same tokens agree when
 *   computed together and move when generated one by one, the signature of the state carried
 *   into decode, and the free-running verdict stands (with that locus);
 * - not scored: the free-running verdict (an `early_shift` stays one) and the reason.
 *
 * `locus`: `compute` when prompt positions shifted; `decode_state` when the prompt agrees (or was
 * not compared, with a prefill scoring that agrees) and the continuation moved; `unknown` when
 * something moved and nothing says where; `null` when nothing moved.
 */
export function withScoring(
  free: Comparison,
  scored: ScoredBlock,
  prompt: PromptBlock | null,
  t: Thresholds,
): ScoredComparison {
  const fixed =
    free.verdict === 'incomparable' ||
    free.verdict === 'prompt_mismatch' ||
    free.verdict === 'tokenizer_mismatch' ||
    free.verdict === 'identical';
  const hasScored = scored.outcome === 'ok' && (scored.comparable ?? 0) > 0;
  const scoredShifted = hasScored ? (scored.shifted ?? 0) : 0;
  const freeShifted = free.shifted > 0 || free.flip?.class === 'systematic';
  const decodePathOnly = prefillAgreesOnly(free, scored);

  let verdict = free.verdict;
  if (!fixed && hasScored && !decodePathOnly) {
    verdict = chooseVerdict(
      {
        incomparable: false,
        tokenizerMismatch: false,
        identical: false,
        comparable: scored.comparable ?? 0,
        shifted: scoredShifted,
        flipClass: free.flip?.class ?? null,
      },
      // Every position is comparable once scored: minAligned is about free-running alignment.
      { ...t, minAligned: 1 },
    );
  }

  const anyShift = scoredShifted > 0 || freeShifted || (prompt !== null && prompt.shifted > 0);
  let locus: Locus | null = null;
  if (!fixed && anyShift) {
    if (prompt !== null && prompt.comparable > 0) locus = locusOfShares(prompt, continuationShare(free, scored));
    else locus = decodePathOnly ? 'decode_state' : 'unknown';
  }

  let explanation = free.explanation;
  if (!fixed && hasScored && !decodePathOnly) {
    const shiftedAt = (scored.shifts ?? []).flatMap((s, i) => (s !== null && s > t.noiseFloor ? [i] : []));
    explanation = `${explain({ verdict, comparable: scored.comparable ?? 0, shifted: scoredShifted, maxShift: scored.maxShift ?? null, flip: free.flip, shiftedAt, locus, over: 'teacher-forced' }, t)} (Over ${scored.comparable} teacher-forced positions: the baseline's tokens scored on both backends, ${scored.method}.)`;
  } else if (!fixed && scored.outcome !== 'ok' && scored.reason) {
    explanation = `${free.explanation} Not scored past the divergence: ${scored.reason}.`;
  }
  const where = locusSentence(locus, prompt, scored, decodePathOnly);
  if (where) explanation = `${explanation} ${where}`;
  return { ...free, verdict, explanation, scored, prompt, locus };
}

/**
 * The shifted share of the continuation's positions: the teacher-forced ones when scored, else the
 * free-running ones (what moved while generating).
 */
function continuationShare(free: Comparison, scored: ScoredBlock): number {
  if (scored.outcome === 'ok' && (scored.comparable ?? 0) > 0 && !prefillAgreesOnly(free, scored))
    return (scored.shifted ?? 0) / (scored.comparable ?? 1);
  return free.comparable > 0 ? free.shifted / free.comparable : 0;
}

/**
 * Where the difference lives, from the share of positions that moved on each side — never from
 * one position's maximum: `decode_state` when the continuation moved broadly (at least half its
 * positions) while the prompt moved at most a quarter as often; `compute` when the prompt's
 * positions moved otherwise; `unknown` when neither says (a few continuation positions above the
 * floor and a prompt that stayed under it: one position cannot tell the state from the weights).
 */
export function locusOfShares(prompt: Pick<PromptBlock, 'shifted' | 'comparable'>, continuation: number): Locus {
  const p = prompt.comparable > 0 ? prompt.shifted / prompt.comparable : 0;
  if (continuation >= 0.5 && p <= continuation / 4) return 'decode_state';
  if (p > 0) return 'compute';
  return 'unknown';
}

function locusSentence(
  locus: Locus | null,
  prompt: PromptBlock | null,
  scored: ScoredBlock,
  decodePathOnly: boolean,
): string {
  const promptPart = prompt
    ? `${prompt.shifted} of ${prompt.comparable} prompt positions shifted (max ${formatNats(prompt.maxShift)})`
    : '';
  switch (locus) {
    case 'compute':
      return `Locus: compute — ${promptPart}: the model computes differently on any input (weights, kernels, a layer, the cache's number format); compare the computation, not the cache medium.`;
    case 'decode_state':
      return decodePathOnly
        ? `Locus: decode state — ${prompt ? `${promptPart}, and ` : ''}the same tokens scored in one prefill pass (${scored.method}) agree while generating them step by step moved: the state carried into decode (KV cache written, evicted, restored; recurrent state) or decode-only kernels; next, the three-way check of the state: where it is written, in the medium, where it is read back.`
        : `Locus: decode state — ${promptPart}, the continuation moved: the state carried into decode (KV cache written, evicted, restored; recurrent state) or decode-only kernels; next, the three-way check of the state: where it is written, in the medium, where it is read back.`;
    case 'unknown':
      return prompt
        ? `Locus: unknown — ${promptPart}, and too few continuation positions moved to tell the state carried into decode from the computation.`
        : 'Locus: unknown — no prompt positions to compare (the engine returns no prompt-token logprobs).';
    default:
      return '';
  }
}

/**
 * The scoring was one prefill pass, agrees everywhere, and the free-running positions moved: the
 * same tokens agree when computed together and move when generated one by one.
 */
function prefillAgreesOnly(free: Comparison, scored: ScoredBlock | undefined): boolean {
  return (
    scored?.outcome === 'ok' &&
    (scored.comparable ?? 0) > 0 &&
    scored.mode === 'prefill' &&
    (scored.shifted ?? 0) === 0 &&
    (free.shifted > 0 || free.flip?.class === 'systematic')
  );
}

/**
 * What the detectors count for a pair (online and offline alike): the teacher-forced positions
 * when they were scored (every position of the baseline's sequence is comparable), else the
 * free-running ones, and the largest shift of either. When only a prefill scoring agrees while
 * the generated tokens moved, the free-running positions count: they are the ones that moved.
 */
export function detectorEvidence(c: Comparison): { shifted: number; comparable: number; maxShift: number | null } {
  const s = c.scored;
  if (!s || s.outcome !== 'ok' || (s.comparable ?? 0) === 0 || prefillAgreesOnly(c, s))
    return { shifted: c.shifted, comparable: c.comparable, maxShift: c.maxShift };
  const maxShift = Math.max(c.maxShift ?? -1, s.maxShift ?? -1);
  return { shifted: s.shifted ?? 0, comparable: s.comparable ?? 0, maxShift: maxShift >= 0 ? maxShift : null };
}

/** A `scored` block for a pair that was not scored. */
export function notScored(outcome: Exclude<ScoringOutcome, 'ok'>, reason: string): ScoredBlock {
  return { outcome, reason };
}

/** The `scored` and `prompt` blocks of a scored pair. */
export function scoredBlocks(pair: ScoredPair, t: Thresholds): { scored: ScoredBlock; prompt: PromptBlock | null } {
  const cont = forcedStats(pair.candidate.continuation, pair.baseline.continuation, t);
  const promptStats = forcedStats(pair.candidate.prompt, pair.baseline.prompt, t);
  const scored: ScoredBlock = { outcome: 'ok', method: pair.method, mode: pair.mode, ...cont };
  if (pair.candidate.continuation.length !== pair.baseline.continuation.length) {
    scored.reason = `the backends scored ${pair.candidate.continuation.length} and ${pair.baseline.continuation.length} positions: the common ${cont.positions} compared`;
  }
  return { scored, prompt: promptStats.positions > 0 ? { ...promptStats, start: pair.promptStart } : null };
}

import { mulberry32 } from '../core/random.js';
import type { Comparison, FlipClass, ParsedResponse, TopEntry, Verdict } from '../core/index.js';

/** One comparable position of a token strip (short keys: the HTML report embeds thousands). */
export interface StripToken {
  /** The shared token (at the divergence: the baseline's). */
  t: string;
  /** At the divergence only: the candidate's token. */
  c?: string;
  /** shift_i, nats. */
  s: number | null;
  /** diff_i = lp_c − lp_b of the chosen token, nats (before the divergence). */
  d: number | null;
  /** The candidate's and the baseline's top-k, `[token, logprob]` (a sentinel as null). */
  tc: Array<[string, number | null]>;
  tb: Array<[string, number | null]>;
}

/** A pair as the report shows it: the figures, the flip, the explanation and the token strip. */
export interface Strip {
  /** 1-based position of the pair in the input. */
  n: number;
  id: string;
  /** `file:line` of the record. */
  at: string;
  route: string;
  verdict: Verdict;
  /** The free-running positions (up to the divergence): largest shift, shifted, comparable. */
  maxShift: number | null;
  shifted: number;
  comparable: number;
  /** The teacher-forced positions (the baseline's sequence scored on both), when the pair was scored: the figures its verdict is taken over. */
  forced?: { comparable: number; shifted: number; maxShift: number | null };
  noiseFloor: number;
  flip: {
    index: number;
    baselineToken: string;
    candidateToken: string;
    gap: number | null;
    lowerBound: boolean;
    class: FlipClass;
  } | null;
  explanation: string;
  /** Generated tokens after the compared ones (after the divergence, or the longer side's tail). */
  after: number;
  /** Positions beyond {@link MAX_STRIP_TOKENS} are left out; how many. */
  cut: number;
  tokens: StripToken[];
  /** The baseline's tokens past the divergence, teacher-forced on both backends: each with its scored shift. */
  scored?: Array<{ t: string; s: number | null }>;
  /** Where the difference lives, when scoring or the prompt said. */
  locus?: string;
  /** The prompt's own positions: compared, shifted, largest shift. */
  prompt?: { comparable: number; shifted: number; maxShift: number | null };
  /** The request's prompt as text (at most {@link MAX_PROMPT_CHARS}; `cut` more not shown), or that it was hashed. */
  input?: { text: string; cut: number } | { hashed: true };
  /** Other pairs with the same prompt on the same route (the worst of them has the strip), when there are any. */
  similar?: number;
}

/** Characters of a strip's prompt text: enough to recognise it, bounded for 10,000-pair pages. */
export const MAX_PROMPT_CHARS = 400;

/**
 * A mirrored request's prompt as one text: a completion's `prompt` (token ids said as such), or a
 * chat's `messages` as `role: content` lines. Null when the body has neither.
 */
export function promptText(body: unknown): string | null {
  if (body === null || typeof body !== 'object') return null;
  const b = body as { prompt?: unknown; messages?: unknown };
  const asText = (p: unknown): string =>
    typeof p === 'string'
      ? p
      : Array.isArray(p) && p.every((x) => typeof x === 'number')
        ? `[${p.length} token ids]`
        : JSON.stringify(p);
  if (b.prompt !== undefined)
    return Array.isArray(b.prompt) && b.prompt.some((x) => typeof x !== 'number')
      ? b.prompt.map(asText).join('\n')
      : asText(b.prompt);
  if (!Array.isArray(b.messages)) return null;
  return b.messages
    .map((m: unknown) => {
      const { role, content } = (m ?? {}) as { role?: unknown; content?: unknown };
      const text =
        typeof content === 'string'
          ? content
          : Array.isArray(content)
            ? content
                .map((c) => (typeof (c as { text?: unknown })?.text === 'string' ? (c as { text: string }).text : ''))
                .join('')
            : JSON.stringify(content ?? null);
      return `${typeof role === 'string' ? role : '?'}: ${text}`;
    })
    .join('\n');
}

/** A strip's `input` from a mirrored request: bounded text, or the note that prompts were hashed. */
export function stripInput(body: unknown, hashed: boolean | undefined): Strip['input'] | undefined {
  if (hashed) return { hashed: true };
  const text = promptText(body);
  if (text === null) return undefined;
  const chars = [...text];
  return { text: chars.slice(0, MAX_PROMPT_CHARS).join(''), cut: Math.max(0, chars.length - MAX_PROMPT_CHARS) };
}

/**
 * The key under which repeated prompts are grouped: the route and the whole prompt (a hashed
 * one's hash), folded to 64 bits (FNV-1a, twice 32): pairs with equal keys asked the same thing.
 */
export function promptKey(route: string, body: unknown): string | null {
  const text = promptText(body);
  if (text === null) return null;
  const s = `${route}\u0000${text}`;
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193) >>> 0;
    b = Math.imul(b ^ c, 0x01000193 + 2 * i) >>> 0;
  }
  return `${a.toString(16)}${b.toString(16)}`;
}

/** Prompt groups whose pairs are counted (beyond, a new prompt's pairs go uncounted: bounded memory). */
const MAX_GROUPS = 100_000;

/** Positions per strip; mirrored copies are capped at `mirror.maxTokens` (64 by default) anyway. */
export const MAX_STRIP_TOKENS = 256;
const TOP_K = 5;

const round = (x: number | null): number | null =>
  x === null || !Number.isFinite(x) ? null : Number(x.toPrecision(5));
/** A figure a report prints (max shift, flip gap): kept whole, so that its one rounding (formatNats) gives the number every other surface prints. */
const figure = (x: number | null | undefined): number | null =>
  x === null || x === undefined || !Number.isFinite(x) ? null : x;
const top = (entries: readonly TopEntry[] | undefined): Array<[string, number | null]> =>
  (entries ?? []).slice(0, TOP_K).map(([tok, lp]) => [tok, round(lp)]);

/** Builds a pair's strip from its comparison and the parsed bodies. */
export function buildStrip(
  meta: { n: number; id: string; at: string; route: string; noiseFloor: number; input?: Strip['input'] },
  c: Comparison,
  cand: ParsedResponse,
  base: ParsedResponse,
): Strip {
  const shown = c.positions.slice(0, MAX_STRIP_TOKENS);
  const f = c.flip;
  return {
    ...meta,
    verdict: c.verdict,
    maxShift: figure(c.maxShift),
    shifted: c.shifted,
    comparable: c.comparable,
    flip: f
      ? {
          index: f.index,
          baselineToken: f.baselineToken,
          candidateToken: f.candidateToken,
          gap: figure(f.gap),
          lowerBound: f.lowerBound,
          class: f.class,
        }
      : null,
    explanation: c.explanation,
    after: Math.max(cand.steps.length, base.steps.length) - c.comparable,
    cut: c.positions.length - shown.length,
    tokens: shown.map((p) => ({
      t: p.token,
      ...(p.candidateToken !== undefined ? { c: p.candidateToken } : {}),
      s: round(p.shift),
      d: round(p.diff),
      tc: top(cand.steps[p.i]?.top),
      tb: top(base.steps[p.i]?.top),
    })),
    ...scoredTail(c, base, shown.length),
  };
}

/** The teacher-forced positions past the compared ones, the locus and the prompt block, for the strip. */
function scoredTail(
  c: Comparison,
  base: ParsedResponse,
  from: number,
): Pick<Strip, 'scored' | 'locus' | 'prompt' | 'forced'> {
  const out: Pick<Strip, 'scored' | 'locus' | 'prompt' | 'forced'> = {};
  const sc = c.scored;
  if (sc?.outcome === 'ok' && (sc.comparable ?? 0) > 0)
    out.forced = { comparable: sc.comparable ?? 0, shifted: sc.shifted ?? 0, maxShift: figure(sc.maxShift) };
  const shifts = c.scored?.outcome === 'ok' ? (c.scored.shifts ?? []) : [];
  if (shifts.length > from) {
    out.scored = shifts
      .slice(from, MAX_STRIP_TOKENS)
      .map((s, k) => ({ t: base.steps[from + k]?.token ?? '', s: round(s) }));
  }
  if (c.locus) out.locus = c.locus;
  if (c.prompt)
    out.prompt = { comparable: c.prompt.comparable, shifted: c.prompt.shifted, maxShift: figure(c.prompt.maxShift) };
  return out;
}

/** How bad a verdict is, for ordering the worst pairs: shifts first, then mismatches, then noise. */
const SEVERITY: Record<Verdict, number> = {
  global_shift: 6,
  early_shift: 5,
  local_shift: 4,
  prompt_mismatch: 3,
  tokenizer_mismatch: 3,
  noise: 2,
  identical: 1,
  incomparable: 0,
};

/** The ordering key of a pair: severity, then the largest shift, then the flip gap. */
export function badness(c: Comparison): [number, number, number] {
  return [SEVERITY[c.verdict], c.maxShift ?? -1, c.flip?.gap ?? -1];
}

function worse(a: readonly number[], b: readonly number[]): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! > b[i]!;
  return false;
}

/**
 * Chooses which pairs get a token strip, in bounded memory: the `worst` pairs by {@link badness}
 * plus a uniform random sample (reservoir, seeded) of `sample` pairs. A strip is built only when
 * its pair is kept.
 */
export class StripSelector {
  private readonly worstList: Array<{ key: [number, number, number]; strip: Strip; group: string | null }> = [];
  private readonly reservoir: Array<{ strip: Strip; group: string | null }> = [];
  /** Pairs seen per prompt group (at most {@link MAX_GROUPS} groups are counted). */
  private readonly groups = new Map<string, number>();
  private seen = 0;
  private readonly random: () => number;

  constructor(
    readonly worstN: number,
    readonly sampleN: number,
    seed = 1,
  ) {
    this.random = mulberry32(seed);
  }

  /**
   * `group` (see {@link promptKey}): pairs of one group share a single place among the worst —
   * the worst of them — so that a prompt repeated by the traffic does not fill the list.
   */
  consider(key: [number, number, number], make: () => Strip, group: string | null = null): void {
    let strip: Strip | null = null;
    const get = () => (strip ??= make());
    if (group !== null && (this.groups.has(group) || this.groups.size < MAX_GROUPS))
      this.groups.set(group, (this.groups.get(group) ?? 0) + 1);
    const same = group === null ? -1 : this.worstList.findIndex((w) => w.group === group);
    const last = this.worstList[this.worstList.length - 1];
    if (same >= 0) {
      if (worse(key, this.worstList[same]!.key)) {
        this.worstList.splice(same, 1);
        this.insertWorst(key, get(), group);
      }
    } else if (
      this.worstN > 0 &&
      (this.worstList.length < this.worstN || (last !== undefined && worse(key, last.key)))
    ) {
      this.insertWorst(key, get(), group);
      if (this.worstList.length > this.worstN) this.worstList.pop();
    }
    this.seen++;
    if (this.reservoir.length < this.sampleN) this.reservoir.push({ strip: get(), group });
    else if (this.sampleN > 0) {
      const j = Math.floor(this.random() * this.seen);
      if (j < this.sampleN) this.reservoir[j] = { strip: get(), group };
    }
  }

  private insertWorst(key: [number, number, number], strip: Strip, group: string | null): void {
    let i = this.worstList.length;
    while (i > 0 && worse(key, this.worstList[i - 1]!.key)) i--;
    this.worstList.splice(i, 0, { key, strip, group });
  }

  /** A strip with the count of the other pairs of its group, when there are any. */
  private counted(strip: Strip, group: string | null): Strip {
    const others = group === null ? 0 : (this.groups.get(group) ?? 1) - 1;
    return others > 0 ? { ...strip, similar: others } : strip;
  }

  /** The worst pairs, worst first, one per prompt. */
  worst(): Strip[] {
    return this.worstList.map((w) => this.counted(w.strip, w.group));
  }

  /** How many pairs the uniform sample drew (some may also be among the worst). */
  get drawn(): number {
    return this.reservoir.length;
  }

  /** The sampled pairs whose prompt is not already among the worst (nor drawn twice), in input order. */
  sampled(): Strip[] {
    const shown = new Set(this.worstList.map((w) => w.group ?? `#${w.strip.n}`));
    const out: Strip[] = [];
    for (const r of [...this.reservoir].sort((a, b) => a.strip.n - b.strip.n)) {
      const g = r.group ?? `#${r.strip.n}`;
      if (shown.has(g)) continue;
      shown.add(g);
      out.push(this.counted(r.strip, r.group));
    }
    return out;
  }
}

import type { FlipClass, Thresholds, TokenStep, Verdict } from './types.js';

/**
 * The class of a flip gap: `ambiguous` below `gapAmbiguous`, `systematic` above `gapSystematic`,
 * `gray` between them (both bounds inclusive) and when the gap is unknown.
 */
export function flipClass(gap: number | null, t: Thresholds): FlipClass {
  if (gap === null) return 'gray';
  if (gap < t.gapAmbiguous) return 'ambiguous';
  if (gap > t.gapSystematic) return 'systematic';
  return 'gray';
}

/** What {@link chooseVerdict} needs to know about a pair. */
export interface VerdictInput {
  /** A side has no usable logprobs. */
  incomparable: boolean;
  /** Same text, different token boundaries (see {@link boundariesDiffer}). */
  tokenizerMismatch: boolean;
  /** No divergence, same lengths, every logprob and top entry exactly equal. */
  identical: boolean;
  /** Comparable positions. */
  comparable: number;
  /** Comparable positions whose shift is above the floor. */
  shifted: number;
  /** The flip's class, or `null` without a flip. */
  flipClass: FlipClass | null;
}

/**
 * the documented verdict, first match: incomparable · tokenizer_mismatch · identical · noise (no
 * position shifted and no systematic flip) · early_shift (fewer than `minAligned` comparable
 * positions) · global_shift (shifted share ≥ `globalFraction`) · local_shift.
 */
export function chooseVerdict(v: VerdictInput, t: Thresholds): Verdict {
  if (v.incomparable) return 'incomparable';
  if (v.tokenizerMismatch) return 'tokenizer_mismatch';
  if (v.identical) return 'identical';
  if (v.shifted === 0 && v.flipClass !== 'systematic') return 'noise';
  if (v.comparable < t.minAligned) return 'early_shift';
  if (v.comparable > 0 && v.shifted / v.comparable >= t.globalFraction) return 'global_shift';
  return 'local_shift';
}

/**
 * True when two token sequences that diverge spell the same text with different token boundaries.
 *
 * Rule: there is a divergence `d` within the common length, the concatenated texts are non-empty,
 * and either they are equal (the documented definition), or the shorter text is a prefix of the
 * longer one and came from at least as many tokens — the `max_tokens` cap cut the side with more,
 * smaller tokens before it finished the text — with non-empty tokens at `d` (so an empty special
 * token is not taken for a boundary). Texts are compared as strings and, when every step on both
 * sides carries bytes, as bytes (a multi-byte character split across byte tokens still matches).
 * With vLLM `token_id:N` placeholders the strings say nothing, so only bytes can decide. A genuine
 * flip to a shorter token at the very last position of a capped response reads as a split too.
 */
export function boundariesDiffer(c: readonly TokenStep[], b: readonly TokenStep[], d: number): boolean {
  const sc = c[d];
  const sb = b[d];
  if (!sc || !sb) return false;
  if (!hasPlaceholder(c) && !hasPlaceholder(b)) {
    const cut = sc.token !== '' && sb.token !== '';
    if (sameOrCut(join(c), c.length, join(b), b.length, cut)) return true;
  }
  const bc = allBytes(c);
  const bb = allBytes(b);
  if (bc === null || bb === null) return false;
  return sameOrCut(bc, c.length, bb, b.length, sc.bytes!.length > 0 && sb.bytes!.length > 0);
}

/**
 * Equal and non-empty; or, when `cutOk`, the shorter a non-empty prefix of the longer, spelled
 * with at least as many tokens (`nx`, `ny`) as the longer.
 */
function sameOrCut<T extends string | readonly number[]>(x: T, nx: number, y: T, ny: number, cutOk: boolean): boolean {
  if (x.length === 0 || y.length === 0) return false;
  if (x.length !== y.length) {
    if (!cutOk) return false;
    if (x.length < y.length ? nx < ny : ny < nx) return false;
  }
  const n = Math.min(x.length, y.length);
  for (let i = 0; i < n; i++) if (x[i] !== y[i]) return false;
  return true;
}

function join(steps: readonly TokenStep[]): string {
  let s = '';
  for (const step of steps) s += step.token;
  return s;
}

function hasPlaceholder(steps: readonly TokenStep[]): boolean {
  return steps.some((s) => s.flags !== undefined && s.flags.includes('tokenIdPlaceholder'));
}

function allBytes(steps: readonly TokenStep[]): number[] | null {
  const out: number[] = [];
  for (const s of steps) {
    if (!s.bytes) return null;
    for (const x of s.bytes) out.push(x);
  }
  return out;
}

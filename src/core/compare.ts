import { definitionFrom, GapSum, SideTally } from './definition.js';
import { explain } from './explain.js';
import { FigureSum, LOGITS_TOP, LogitsSum, relativeError, smallest, type Health } from './health.js';
import { klAtMatchedPosition } from './kl.js';
import { matchPosition, scratch, topSums } from './match.js';
import { parseResponse } from './parse/index.js';
import { boundariesDiffer, chooseVerdict, flipClass } from './verdict.js';
import {
  DEFAULT_THRESHOLDS,
  type Comparison,
  type Flip,
  type ParsedResponse,
  type PositionRow,
  type Thresholds,
  type TokenStep,
} from './types.js';

/**
 * Compares a candidate's response with a baseline's for the same greedy request (docs/format.md, "The
 * comparison"). Pure and total: any input gives a {@link Comparison}, never an exception.
 *
 * Each side is a {@link ParsedResponse} or anything {@link parseResponse} accepts. Tokens are
 * matched by id when both sides carry ids on every step (and on every top entry, for the top
 * lists), else by text.
 *
 * - *Alignment*: `d` is the first position whose chosen tokens differ. Comparable positions are
 *   `0..d`, or `0..min(n_c, n_b)−1` without a divergence (when the lengths differ, the common part
 *   is compared, there is no flip, and a note says so).
 * - `shift_i` = max |lp_c(t) − lp_b(t)| over tokens both sides report at i (chosen + top-k); at
 *   `d` that includes A and B wherever a side has them. Sentinels and nulls never enter a number.
 * - `diff_i` = lp_c(t_i) − lp_b(t_i) for i < d.
 * - The flip at `d`: A = baseline's token, B = candidate's, gap = lp_b(A) − lp_b(B); when B is
 *   not in the baseline's top-k, lp_b(B) is bounded by the baseline's smallest reported value and
 *   the gap is a lower bound. `crossPathDiff` = lp_c(A) − lp_b(A) when the candidate reports A.
 * - The verdict follows {@link chooseVerdict}; each row also carries a KL estimate (not used by
 *   the verdict).
 *
 * Long on purpose: one pass over the positions matches each once and feeds the shift, the KL,
 * the health and the definition figures from that match's locals (with the checks in separate
 * passes the core takes 2–4× as long); split, the parts would re-match or pass a dozen locals. test/core-fused.unit.test.ts holds the fused figures equal to the separate ones.
 */
// eslint-disable-next-line max-lines-per-function -- the one pass over the positions (see above)
export function compare(
  candidate: unknown,
  baseline: unknown,
  thresholds: Thresholds = DEFAULT_THRESHOLDS,
): Comparison {
  const t = thresholds;
  const c = asParsed(candidate);
  const b = asParsed(baseline);
  const unusable = unusableReason(c, 'candidate') ?? unusableReason(b, 'baseline');
  if (unusable !== undefined) return incomparable(unusable, t);

  const cs = c.steps;
  const bs = b.steps;
  const n = Math.min(cs.length, bs.length);
  const alignById = allHaveIds(cs) && allHaveIds(bs);
  const topById = alignById && allHaveTopIds(cs) && allHaveTopIds(bs);
  let d = -1;
  for (let i = 0; i < n; i++) {
    const ci = cs[i]!;
    const bi = bs[i]!;
    if (alignById ? ci.id !== bi.id : ci.token !== bi.token) {
      d = i;
      break;
    }
  }
  const comparable = d >= 0 ? d + 1 : n;
  const floor = t.noiseFloor;

  const positions: PositionRow[] = new Array<PositionRow>(comparable);
  const shiftedAt: number[] = [];
  let identical = d < 0 && cs.length === bs.length;
  let maxAbsDiff = -1;
  let sumAbsDiff = 0;
  let diffs = 0;
  let maxShift = -1;
  let sumShift = 0;
  let shifts = 0;
  let flip: Flip | null = null;
  // The health and definition figures are fed from this one pass: each position is matched once,
  // and the exponentials the matching took serve the KL estimate and the top lists' sums alike.
  const klSum = new FigureSum();
  const relSum = new FigureSum();
  const logits = new LogitsSum('free');
  const gaps = new GapSum();
  const tc = new SideTally();
  const tb = new SideTally();

  for (let i = 0; i < comparable; i++) {
    const ci = cs[i]!;
    const bi = bs[i]!;
    matchPosition(ci, bi, topById);
    // (Read after the match: it may have grown the scratch's arrays.)
    const { vc, vb, mc, nc } = S;
    const kc = ci.top.length;
    const kb = bi.top.length;
    // The shift over every pair both sides list, and in the same loop the candidate's side of the
    // logits figure (its top-10 entries against the baseline, in list order: LogitsSum.add).
    const topC = kb === 0 ? 0 : kc < LOGITS_TOP ? kc : LOGITS_TOP;
    const topB = kb < LOGITS_TOP ? kb : LOGITS_TOP;
    let paired = 0; // candidate top-10 entries paired with a baseline top-10 entry
    let s = -1;
    let here = -1;
    let bound = false;
    let minB = Number.NaN;
    for (let j = 0; j < nc; j++) {
      const l = mc[j]!;
      const x = vc[j]!;
      if (l >= 0) {
        const y = vb[l]!;
        const dx = x - y;
        const ax = dx < 0 ? -dx : dx;
        if (ax > s) s = ax; // NaN (an unknown side) never compares greater
        if (j < topC) {
          if (l < topB) paired++;
          if (ax > here) {
            here = x > y ? x - y : y - x;
            bound = false;
          }
        }
      } else if (j < topC && x === x) {
        // Not listed by the baseline: there it is at most its smallest listed value.
        if (minB !== minB) minB = smallest(vb, kb);
        if (minB !== Infinity) {
          const lb = x > minB ? x - minB : 0;
          if (lb > here) {
            here = lb;
            bound = true;
          }
        }
      }
    }
    logits.addMeasured(i, kc, kb, here, bound, paired === topB);
    const shift = s >= 0 ? s : null;
    if (shift !== null) {
      sumShift += shift;
      shifts++;
      if (shift > maxShift) maxShift = shift;
      if (shift > floor) shiftedAt.push(i);
    }
    let diff: number | null = null;
    if (i !== d && ci.logprob !== null && bi.logprob !== null) {
      diff = ci.logprob - bi.logprob;
      const ad = diff < 0 ? -diff : diff;
      sumAbsDiff += ad;
      diffs++;
      if (ad > maxAbsDiff) maxAbsDiff = ad;
      relSum.add(relativeError(diff));
    }
    if (identical && !sameStep(ci, bi)) identical = false;
    const kl = klAtMatchedPosition();
    klSum.add(kl);
    gaps.add(kc, kb);
    tc.chosen(ci);
    tc.top(ci, topSums.c);
    tb.chosen(bi);
    tb.top(bi, topSums.b);
    const row: PositionRow = {
      i,
      token: bi.token,
      candidate: ci.logprob,
      baseline: bi.logprob,
      diff,
      shift,
      gap: topGap(bi),
      kl,
    };
    if (i === d) {
      row.candidateToken = ci.token;
      flip = flipAt(d, ci, bi, t);
    }
    positions[i] = row;
  }
  // The definition checks read every step of each side, past the comparable ones too.
  for (let i = comparable; i < cs.length; i++) {
    tc.chosen(cs[i]!);
    tc.top(cs[i]!);
  }
  for (let i = comparable; i < bs.length; i++) {
    tb.chosen(bs[i]!);
    tb.top(bs[i]!);
  }

  const shifted = shiftedAt.length;
  const tokenizerMismatch = d >= 0 && boundariesDiffer(cs, bs, d);
  const verdict = chooseVerdict(
    { incomparable: false, tokenizerMismatch, identical, comparable, shifted, flipClass: flip ? flip.class : null },
    t,
  );
  const maxShiftOut = maxShift >= 0 ? maxShift : null;
  const shiftedFraction = comparable > 0 ? shifted / comparable : null;
  const health: Health = {
    over: 'free',
    positions: comparable,
    kl: klSum.figure(),
    relErr: relSum.figure(),
    logits: logits.figure(),
  };
  return {
    verdict,
    aligned: d >= 0 ? d : n,
    comparable,
    shifted,
    firstDivergence: d >= 0 ? d : null,
    maxAbsDiff: diffs > 0 ? maxAbsDiff : null,
    meanAbsDiff: diffs > 0 ? sumAbsDiff / diffs : null,
    maxShift: maxShiftOut,
    meanShift: shifts > 0 ? sumShift / shifts : null,
    shiftedFraction,
    flip,
    explanation: explain({ verdict, comparable, shifted, maxShift: maxShiftOut, flip, shiftedAt }, t),
    notes: notesFor(c, b, d, topById),
    positions,
    health,
    definition: definitionFrom(tc, tb, gaps, cs, bs, comparable),
  };
}

/** The scratch object itself (its fields change, the object never does). */
const S = scratch;

/** Reads the flip at `d` off the scratch of the position just matched. */
function flipAt(d: number, ci: TokenStep, bi: TokenStep, t: Thresholds): Flip {
  const { vc, vb, mc, mb, nb, ic, ib } = scratch;
  // lp_b(A): the baseline's own logprob (or its top entry for A when that was a sentinel).
  const lpA = vb[ib]!;
  const hitB = mc[ic]!;
  const lpB = hitB >= 0 ? vb[hitB]! : Number.NaN;
  let gap: number | null = null;
  let lowerBound = false;
  if (lpA === lpA && !(hitB >= 0 && lpB !== lpB)) {
    // (B listed by the baseline with a placeholder (−9999, float lowest): its value is unknown and
    // not bounded by the listed ones, so there is no gap.)
    if (lpB === lpB) {
      gap = lpA - lpB;
    } else {
      // B is not among the baseline's reported tokens: lp_b(B) ≤ the smallest reported value.
      let lowest = lpA;
      for (let l = 0; l < nb; l++) {
        const v = vb[l]!;
        if (v === v && v < lowest) lowest = v;
      }
      gap = lpA - lowest;
      lowerBound = true;
    }
  }
  const hitA = mb[ib]!;
  const lpcA = hitA >= 0 ? vc[hitA]! : Number.NaN;
  return {
    index: d,
    baselineToken: bi.token,
    candidateToken: ci.token,
    gap,
    lowerBound,
    class: flipClass(gap, t),
    crossPathDiff: lpcA === lpcA && lpA === lpA ? lpcA - lpA : null,
  };
}

/** The baseline's top-1 − top-2 gap, when it reports two finite values. */
function topGap(s: TokenStep): number | null {
  const top = s.top;
  if (top.length < 2) return null;
  const g = top[0]![1] - top[1]![1];
  return g - g === 0 ? g : null; // finite
}

/** Exactly equal chosen token, logprob and top list (order, texts, values, ids). */
function sameStep(c: TokenStep, b: TokenStep): boolean {
  if (c.token !== b.token || c.logprob !== b.logprob || c.top.length !== b.top.length) return false;
  for (let j = 0; j < c.top.length; j++) {
    const x = c.top[j]!;
    const y = b.top[j]!;
    if (x[0] !== y[0] || x[1] !== y[1]) return false;
    if (c.topIds && b.topIds && c.topIds[j] !== b.topIds[j]) return false;
  }
  return true;
}

function allHaveIds(steps: readonly TokenStep[]): boolean {
  for (const s of steps) if (s.id === undefined) return false;
  return true;
}

function allHaveTopIds(steps: readonly TokenStep[]): boolean {
  for (const s of steps) if (s.top.length > 0 && s.topIds === undefined) return false;
  return true;
}

function isParsed(x: unknown): x is ParsedResponse {
  if (typeof x !== 'object' || x === null) return false;
  const p = x as Partial<ParsedResponse>;
  return Array.isArray(p.steps) && typeof p.format === 'string' && Array.isArray(p.flags);
}

function asParsed(x: unknown): ParsedResponse {
  return isParsed(x) ? x : parseResponse(x);
}

/** Why a side cannot be compared, or `undefined` when it can. */
function unusableReason(p: ParsedResponse, side: string): string | undefined {
  if (p.steps.length === 0) return `the ${side} has no logprobs (${p.error ?? 'no tokens'})`;
  for (const s of p.steps) {
    if (s.logprob !== null) return undefined;
    for (const e of s.top) if (e[1] !== -Infinity) return undefined;
  }
  return `the ${side} has no usable logprob values (all null or sentinels)`;
}

function incomparable(reason: string, t: Thresholds): Comparison {
  const explanation = explain(
    { verdict: 'incomparable', reason, comparable: 0, shifted: 0, maxShift: null, flip: null, shiftedAt: [] },
    t,
  );
  return {
    verdict: 'incomparable',
    aligned: 0,
    comparable: 0,
    shifted: 0,
    firstDivergence: null,
    maxAbsDiff: null,
    meanAbsDiff: null,
    maxShift: null,
    meanShift: null,
    shiftedFraction: null,
    flip: null,
    explanation,
    notes: [reason],
    positions: [],
  };
}

function notesFor(c: ParsedResponse, b: ParsedResponse, d: number, topById: boolean): string[] {
  const notes: string[] = [];
  const nc = c.steps.length;
  const nb = b.steps.length;
  if (d < 0 && nc !== nb) {
    notes.push(
      `lengths differ (candidate ${nc} tokens, baseline ${nb}) with no divergence in the common ${Math.min(nc, nb)}: compared those, no flip`,
    );
  }
  if (topById) notes.push('tokens matched by id');
  if (c.flags.length > 0) notes.push(`candidate: ${c.flags.join(', ')}`);
  if (b.flags.length > 0) notes.push(`baseline: ${b.flags.join(', ')}`);
  return notes;
}

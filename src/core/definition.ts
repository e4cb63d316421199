import { matchPosition, scratch, type TopSums } from './match.js';
import type { TokenStep } from './types.js';

/**
 * Definition checks (docs/format.md, `definition`): before two sides' numbers are compared, say
 * when they cannot both be raw full-vocabulary logprobs — most "drift" between a trainer and an
 * engine is two different quantities compared. Each check reads only the numbers; none changes a
 * verdict. Pure.
 *
 * - `renormalised_subset`: a side's top-k probabilities sum above 1, or hold the whole mass while
 *   the list has not decayed (a renormalised subset: top-p/top-k applied before the logprobs were
 *   taken, masked tokens at −inf);
 * - `single_survivor`: a chosen logprob of exactly 0 on many positions (one token left after truncation);
 * - `temperature_scaled`: a systematic ratio between the two sides' logprobs (logits divided by a temperature on one side);
 * - `probabilities`: values in [0, 1] that are probabilities, not logprobs.
 */

export const DEFINITION_CHECKS = [
  'renormalised_subset',
  'single_survivor',
  'temperature_scaled',
  'probabilities',
] as const;
export type DefinitionCheck = (typeof DEFINITION_CHECKS)[number];

/** One warning: which check, which side (`both` for a relation between the sides), and what was seen, said as the difference in definition ("normalisation domain differs: …"). */
export interface DefinitionWarning {
  check: DefinitionCheck;
  side: 'candidate' | 'baseline' | 'both';
  detail: string;
}

/** A top list's probabilities above this sum are not one distribution (bf16/fp16 rounding stays far below). */
const SUM_ABOVE = 1.01;
/** "The whole mass": a tail below this… */
const NO_TAIL = 1e-4;
/** …while the list's smallest finite entry still holds this much (a full softmax has not run out of tail there). */
const UNDECAYED = 1e-3;
/** A pairwise gap ratio off 1 by more than this, fitting far better than 1, is a temperature. */
const RATIO_OFF = 0.05;

const pct = (n: number, of: number) => `${Math.round((100 * n) / of)}%`;

/**
 * What the one-side checks count over a side's steps, fed one step at a time ({@link SideTally.chosen}
 * and {@link SideTally.top}), so that `compare` can feed it from the pass that matches each position
 * (the top lists' exponentials are the ones the matching already took).
 */
export class SideTally {
  /** Chosen logprobs known, negative, above 0 (the probabilities check), exactly 0 (single survivor). */
  known = 0;
  negative = 0;
  positive = 0;
  zeros = 0;
  /** Top lists of two entries or more; those summing above 1; holding the whole mass undecayed; with the rest at -inf. */
  listed = 0;
  over = 0;
  whole = 0;
  masked = 0;
  maxSum = 0;

  /** Counts a step's chosen logprob. */
  chosen(s: TokenStep): void {
    const lp = s.logprob;
    if (lp === null) return;
    this.known++;
    if (lp < 0) this.negative++;
    else if (lp > 1e-6) this.positive++;
    if (lp === 0) this.zeros++;
  }

  /**
   * Counts a step's top list; `sums`, when given, are its sums as `matchPosition` took them
   * (`topSums`), else they are computed here.
   */
  top(s: TokenStep, sums?: TopSums): void {
    const top = s.top;
    const k = top.length;
    if (k < 2) return;
    this.listed++;
    let sum = 0;
    let finite = 0;
    if (sums !== undefined) {
      sum = sums.sum;
      finite = sums.finite;
    } else {
      for (let j = 0; j < k; j++) {
        const lp = top[j]![1];
        if (lp === -Infinity) continue;
        sum += Math.exp(lp);
        finite++;
      }
    }
    if (sum > this.maxSum) this.maxSum = sum;
    if (sum > SUM_ABOVE) this.over++;
    else if (sum >= 1 - NO_TAIL) {
      // (Rare: the list holds the whole mass. Only then does its smallest entry matter.)
      if (finite >= 2 && smallestP(top, sums) >= UNDECAYED) this.whole++;
      else if (k - finite > 0 && finite >= 1) this.masked++;
    }
  }
}

/** The smallest probability of a top list's entries that are not −∞ (Infinity when none), from `sums`' exponentials when given. */
function smallestP(top: TokenStep['top'], sums?: TopSums): number {
  let smallest = Infinity;
  for (let j = 0; j < top.length; j++) {
    const lp = top[j]![1];
    if (lp === -Infinity) continue;
    const p = sums !== undefined && j !== sums.replaced ? sums.e[j]! : Math.exp(lp);
    if (p < smallest) smallest = p;
  }
  return smallest;
}

/** The checks of one side's steps alone (`renormalised_subset`, `single_survivor`, `probabilities`). */
export function sideChecks(
  steps: readonly TokenStep[],
  side: DefinitionWarning['side'],
  other?: readonly TokenStep[],
): DefinitionWarning[] {
  const t = new SideTally();
  for (const s of steps) {
    t.chosen(s);
    t.top(s);
  }
  return sideWarnings(t, steps, side, other, other?.length ?? 0);
}

/** The one-side warnings of a tally of `steps`; `other` (its first `otherN` steps) is the other side at the same contexts. */
function sideWarnings(
  t: SideTally,
  steps: readonly TokenStep[],
  side: DefinitionWarning['side'],
  other: readonly TokenStep[] | undefined,
  otherN: number,
): DefinitionWarning[] {
  const out: DefinitionWarning[] = [];
  if (steps.length === 0) return out;
  const { known, negative, positive, over, whole, masked, listed, maxSum } = t;

  // probabilities: every value in [0, 1] and a real share of them positive (no logprob is).
  if (known >= 2 && negative === 0 && positive >= Math.max(1, known / 4)) {
    out.push({
      check: 'probabilities',
      side,
      detail: `the ${side}'s values are probabilities, not logprobs: all ${known} chosen values lie in [0, 1] and ${positive} are above 0 (a logprob is never positive) — take the log (log_softmax, not softmax), or the engine's logprobs rather than its probabilities`,
    });
    return out; // the other checks read logprobs
  }

  // renormalised_subset
  if (over > 0) {
    out.push({
      check: 'renormalised_subset',
      side,
      detail: `normalisation domain differs: full vocabulary vs a truncated subset — the ${side}'s top-k probabilities sum above 1 (up to ${maxSum.toFixed(3)}) at ${over} of ${listed} positions: a renormalised subset (top-p/top-k applied), not one full-vocabulary distribution`,
    });
  } else if (whole + masked >= 2 && whole + masked >= 0.2 * listed) {
    out.push({
      check: 'renormalised_subset',
      side,
      detail: `normalisation domain differs: full vocabulary vs a truncated subset — at ${whole + masked} of ${listed} positions the ${side}'s listed tokens hold the whole probability mass (no tail${masked > 0 ? `, the rest at -inf` : ''}) although the list has not decayed: a renormalised subset (top-p/top-k applied before the logprobs were taken)`,
    });
  }

  // single_survivor: exactly 0 where a full softmax would leave something to the other tokens.
  const zeros = t.zeros;
  if (zeros < 3) return out;
  let otherMass = 0;
  let otherSeen = 0;
  if (other !== undefined) {
    const m = Math.min(steps.length, otherN);
    for (let i = 0; i < m; i++) {
      const s = steps[i]!;
      if (s.logprob !== 0) continue;
      const o = other[i];
      if (o && o.logprob !== null && (o.id !== undefined && s.id !== undefined ? o.id === s.id : o.token === s.token)) {
        otherMass += Math.exp(o.logprob);
        otherSeen++;
      }
    }
  }
  const otherMean = otherSeen > 0 ? otherMass / otherSeen : null;
  if (zeros >= 0.5 * known || (otherMean !== null && otherSeen >= 3 && otherMean < 0.99)) {
    out.push({
      check: 'single_survivor',
      side,
      detail: `normalisation domain differs: full vocabulary vs a truncated subset — the ${side}'s chosen logprob is exactly 0 (probability 1) at ${zeros} of ${known} positions (${pct(zeros, known)})${otherMean !== null ? `, where the other side gives the same token ${otherMean.toFixed(3)} on average` : ''}: a single survivor after top-k/top-p truncation`,
    });
  }
  return out;
}

/**
 * The temperature check between two sides at the same contexts (`n` positions): with top lists,
 * the gaps between two tokens' logprobs at a position (the normaliser cancels) — a temperature T
 * divides every logit, so one side's gaps are the other's times 1/T; without, the chosen
 * logprobs themselves. Flagged when one ratio fits far better than 1 and differs from it.
 */
export function temperatureCheck(
  cs: readonly TokenStep[],
  bs: readonly TokenStep[],
  n: number,
  byId: boolean,
): DefinitionWarning | null {
  const sum = new GapSum();
  for (let i = 0; i < n; i++) {
    const c = cs[i]!;
    const b = bs[i]!;
    const kc = c.top.length;
    const kb = b.top.length;
    if (kc < 2 || kb < 2) continue;
    // Gaps to the baseline's top-1, over the tokens both list (matched without allocating, as compare does).
    matchPosition(c, b, byId && c.topIds !== undefined && b.topIds !== undefined);
    sum.add(kc, kb);
  }
  return temperatureWarning(sum, cs, bs, n);
}

/** The scratch object itself (its fields change, the object never does). */
const S = scratch;

/**
 * The temperature check's sums over positions, each read off the scratch just filled by
 * `matchPosition` (so that `compare` matches a position once for all its figures).
 */
export class GapSum {
  sxy = 0;
  sxx = 0;
  syy = 0;
  points = 0;

  /** The position just matched; `kc`, `kb` are the two top-list lengths (below 2 on a side: skipped). */
  add(kc: number, kb: number): void {
    if (kc < 2 || kb < 2) return;
    const { vc, vb, mb } = S;
    const j0 = mb[0]!;
    const b0 = vb[0]!;
    if (j0 < 0 || b0 !== b0 || vc[j0]! !== vc[j0]!) return;
    const c0 = vc[j0]!;
    let sxy = this.sxy;
    let sxx = this.sxx;
    let syy = this.syy;
    let points = this.points;
    for (let l = 1; l < kb; l++) {
      const j = mb[l]!;
      if (j < 0 || j >= kc) continue;
      const y0 = vb[l]!;
      const x0 = vc[j]!;
      if (y0 !== y0 || x0 !== x0) continue;
      const x = y0 - b0; // baseline gap (≤ 0)
      const y = x0 - c0; // candidate gap
      sxy += x * y;
      sxx += x * x;
      syy += y * y;
      points++;
    }
    this.sxy = sxy;
    this.sxx = sxx;
    this.syy = syy;
    this.points = points;
  }
}

/** The temperature warning of a pair's gap sums, or of its chosen logprobs when there are too few gaps. */
function temperatureWarning(
  g: GapSum,
  cs: readonly TokenStep[],
  bs: readonly TokenStep[],
  n: number,
): DefinitionWarning | null {
  const { sxy, sxx, syy, points } = g;
  if (points >= 8 && sxx > 0) {
    const s = sxy / sxx;
    const sse = (r: number) => syy - 2 * r * sxy + r * r * sxx;
    if (!(Math.abs(s - 1) > RATIO_OFF && Math.max(sse(s), 0) < 0.1 * sse(1))) return null;
    // s = candidate gaps / baseline gaps = T_b / T_c: the candidate is the baseline at temperature 1/s.
    return {
      check: 'temperature_scaled',
      side: 'both',
      detail: `temperature differs: the candidate's top-k gaps are the baseline's × ${s.toFixed(3)} over ${points} token pairs — the candidate looks like the baseline's logits divided by T ≈ ${(1 / s).toFixed(2)} (or the baseline like the candidate's at T ≈ ${s.toFixed(2)}): a temperature-scaled distribution (logits/T) compared with raw logprobs`,
    };
  }
  return chosenRatio(cs, bs, n);
}

/**
 * Without top lists: the chosen logprobs of sampled tokens under a temperature follow an affine
 * law `lp_c ≈ a + s·lp_b` with `s ≈ 1/T` (the normaliser moves little from one position to the
 * next), which float noise and real bugs do not. Greedy top-1 tokens carry little of the scale,
 * so this finds a temperature mainly in sampled sequences (a trainer against its rollout).
 */
function chosenRatio(cs: readonly TokenStep[], bs: readonly TokenStep[], n: number): DefinitionWarning | null {
  const xs: number[] = [];
  const ys: number[] = [];
  for (let i = 0; i < n; i++) {
    const x = bs[i]!.logprob;
    const y = cs[i]!.logprob;
    if (x === null || y === null) continue;
    xs.push(x);
    ys.push(y);
  }
  const m = xs.length;
  if (m < 12) return null;
  const mx = xs.reduce((a, b) => a + b, 0) / m;
  const my = ys.reduce((a, b) => a + b, 0) / m;
  let sxy = 0;
  let sxx = 0;
  for (let i = 0; i < m; i++) {
    sxy += (xs[i]! - mx) * (ys[i]! - my);
    sxx += (xs[i]! - mx) ** 2;
  }
  if (sxx <= 0) return null;
  const s = sxy / sxx;
  const a = my - s * mx;
  let fit = 0;
  let identity = 0;
  for (let i = 0; i < m; i++) {
    fit += (ys[i]! - a - s * xs[i]!) ** 2;
    identity += (ys[i]! - xs[i]!) ** 2;
  }
  if (!(Math.abs(s - 1) > 0.08 && fit < 0.4 * identity)) return null;
  return {
    check: 'temperature_scaled',
    side: 'both',
    detail: `temperature differs: the candidate's chosen logprobs follow the baseline's × ${s.toFixed(2)} (an affine fit over ${m} positions explains ${Math.round(100 * (1 - fit / identity))}% of their difference) — consistent with logits divided by T ≈ ${(1 / s).toFixed(2)} on one side: a temperature-scaled distribution (logits/T) compared with raw logprobs`,
  };
}

/** Every check of a pair: each side alone over all its steps, then the two sides over the `n` positions they share a context at. */
export function definitionChecks(
  cs: readonly TokenStep[],
  bs: readonly TokenStep[],
  n: number,
  byId: boolean,
): DefinitionWarning[] {
  const out = [...sideChecks(cs, 'candidate', bs.slice(0, n)), ...sideChecks(bs, 'baseline', cs.slice(0, n))];
  if (!out.some((w) => w.check === 'probabilities')) {
    const t = temperatureCheck(cs, bs, n, byId);
    if (t) out.push(t);
  }
  return out;
}

/**
 * {@link definitionChecks} from tallies fed during `compare`'s pass over the positions (`tc`, `tb`
 * over every step of each side, `gaps` over the `n` shared positions): the same warnings, in the
 * same order, without a second pass.
 */
export function definitionFrom(
  tc: SideTally,
  tb: SideTally,
  gaps: GapSum,
  cs: readonly TokenStep[],
  bs: readonly TokenStep[],
  n: number,
): DefinitionWarning[] {
  const out = sideWarnings(tc, cs, 'candidate', bs, n);
  const ob = sideWarnings(tb, bs, 'baseline', cs, n);
  for (const w of ob) out.push(w);
  for (const w of out) if (w.check === 'probabilities') return out;
  const t = temperatureWarning(gaps, cs, bs, n);
  if (t) out.push(t);
  return out;
}

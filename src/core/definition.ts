import { matchPosition, scratch } from './match.js';
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

export const DEFINITION_CHECKS = ['renormalised_subset', 'single_survivor', 'temperature_scaled', 'probabilities'] as const;
export type DefinitionCheck = (typeof DEFINITION_CHECKS)[number];

/** One warning: which check, which side (`both` for a relation between the sides), and what was seen, in the seeds' terms. */
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

/** The checks of one side's steps alone (`renormalised_subset`, `single_survivor`, `probabilities`). */
export function sideChecks(steps: readonly TokenStep[], side: DefinitionWarning['side'], other?: readonly TokenStep[]): DefinitionWarning[] {
  if (steps.length === 0) return [];
  const p = probabilitiesCheck(steps, side);
  // The other checks read logprobs.
  if ('check' in p) return [p];
  const out: DefinitionWarning[] = [];
  const r = renormalisedCheck(steps, side);
  if (r) out.push(r);
  const s = singleSurvivorCheck(steps, side, p.known, other);
  if (s) out.push(s);
  return out;
}

/** probabilities: every value in [0, 1] and a real share of them positive (no logprob is); else how many chosen values are known. */
function probabilitiesCheck(steps: readonly TokenStep[], side: DefinitionWarning['side']): DefinitionWarning | { known: number } {
  let known = 0;
  let negative = 0;
  let positive = 0;
  for (const s of steps) {
    if (s.logprob === null) continue;
    known++;
    if (s.logprob < 0) negative++;
    else if (s.logprob > 1e-6) positive++;
  }
  if (known >= 2 && negative === 0 && positive >= Math.max(1, known / 4)) {
    return {
      check: 'probabilities',
      side,
      detail: `the ${side}'s values are probabilities, not logprobs: all ${known} chosen values lie in [0, 1] and ${positive} are above 0 (a logprob is never positive) — take the log (log_softmax, not softmax), or the engine's logprobs rather than its probabilities`,
    };
  }
  return { known };
}

/** renormalised_subset: top lists that sum above 1, or hold the whole mass although they have not decayed. */
function renormalisedCheck(steps: readonly TokenStep[], side: DefinitionWarning['side']): DefinitionWarning | null {
  let over = 0;
  let whole = 0;
  let masked = 0;
  let listed = 0;
  let maxSum = 0;
  for (const s of steps) {
    if (s.top.length < 2) continue;
    listed++;
    let sum = 0;
    let finite = 0;
    let smallest = Infinity;
    let minusInf = 0;
    for (const [, lp] of s.top) {
      if (lp === -Infinity) {
        minusInf++;
        continue;
      }
      const p = Math.exp(lp);
      sum += p;
      finite++;
      if (p < smallest) smallest = p;
    }
    if (sum > maxSum) maxSum = sum;
    if (sum > SUM_ABOVE) over++;
    else if (finite >= 2 && sum >= 1 - NO_TAIL && smallest >= UNDECAYED) whole++;
    else if (minusInf > 0 && finite >= 1 && sum >= 1 - NO_TAIL) masked++;
  }
  if (over > 0) {
    return {
      check: 'renormalised_subset',
      side,
      detail: `normalisation domain differs: full vocabulary vs a truncated subset — the ${side}'s top-k probabilities sum above 1 (up to ${maxSum.toFixed(3)}) at ${over} of ${listed} positions: a renormalised subset (top-p/top-k applied), not one full-vocabulary distribution`,
    };
  }
  if (whole + masked >= 2 && whole + masked >= 0.2 * listed) {
    return {
      check: 'renormalised_subset',
      side,
      detail: `normalisation domain differs: full vocabulary vs a truncated subset — at ${whole + masked} of ${listed} positions the ${side}'s listed tokens hold the whole probability mass (no tail${masked > 0 ? `, the rest at -inf` : ''}) although the list has not decayed: a renormalised subset (top-p/top-k applied before the logprobs were taken)`,
    };
  }
  return null;
}

/** single_survivor: exactly 0 where a full softmax would leave something to the other tokens. */
function singleSurvivorCheck(steps: readonly TokenStep[], side: DefinitionWarning['side'], known: number, other?: readonly TokenStep[]): DefinitionWarning | null {
  const n = steps.length;
  let zeros = 0;
  let otherMass = 0;
  let otherSeen = 0;
  for (let i = 0; i < n; i++) {
    const s = steps[i]!;
    if (s.logprob !== 0) continue;
    zeros++;
    const o = other?.[i];
    if (o && o.logprob !== null && (o.id !== undefined && s.id !== undefined ? o.id === s.id : o.token === s.token)) {
      otherMass += Math.exp(o.logprob);
      otherSeen++;
    }
  }
  const otherMean = otherSeen > 0 ? otherMass / otherSeen : null;
  if (zeros >= 3 && (zeros >= 0.5 * known || (otherMean !== null && otherSeen >= 3 && otherMean < 0.99))) {
    return {
      check: 'single_survivor',
      side,
      detail: `normalisation domain differs: full vocabulary vs a truncated subset — the ${side}'s chosen logprob is exactly 0 (probability 1) at ${zeros} of ${known} positions (${pct(zeros, known)})${otherMean !== null ? `, where the other side gives the same token ${otherMean.toFixed(3)} on average` : ''}: a single survivor after top-k/top-p truncation`,
    };
  }
  return null;
}

/**
 * The temperature check between two sides at the same contexts (`n` positions): with top lists,
 * the gaps between two tokens' logprobs at a position (the normaliser cancels) — a temperature T
 * divides every logit, so one side's gaps are the other's times 1/T; without, the chosen
 * logprobs themselves. Flagged when one ratio fits far better than 1 and differs from it.
 */
export function temperatureCheck(cs: readonly TokenStep[], bs: readonly TokenStep[], n: number, byId: boolean): DefinitionWarning | null {
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  let points = 0;
  for (let i = 0; i < n; i++) {
    const c = cs[i]!;
    const b = bs[i]!;
    if (c.top.length < 2 || b.top.length < 2) continue;
    // Gaps to the baseline's top-1, over the tokens both list (matched without allocating, as compare does).
    matchPosition(c, b, byId && c.topIds !== undefined && b.topIds !== undefined);
    const { vc, vb, mb } = scratch;
    const j0 = mb[0]!;
    const b0 = vb[0]!;
    if (j0 < 0 || b0 !== b0 || vc[j0]! !== vc[j0]!) continue;
    const c0 = vc[j0]!;
    const kb = b.top.length;
    for (let l = 1; l < kb; l++) {
      const j = mb[l]!;
      if (j < 0 || j >= c.top.length) continue;
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
  }
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
export function definitionChecks(cs: readonly TokenStep[], bs: readonly TokenStep[], n: number, byId: boolean): DefinitionWarning[] {
  const out = [...sideChecks(cs, 'candidate', bs.slice(0, n)), ...sideChecks(bs, 'baseline', cs.slice(0, n))];
  if (!out.some((w) => w.check === 'probabilities')) {
    const t = temperatureCheck(cs, bs, n, byId);
    if (t) out.push(t);
  }
  return out;
}

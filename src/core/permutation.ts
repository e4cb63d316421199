import { mulberry32 } from './random.js';
import type { Comparison } from './types.js';

/**
 * A permutation test beside the alerts, with an exact false-positive rate (after Log Probability
 * Tracking, Chauvin et al., arXiv 2512.03816: a two-sample permutation test of logprobs). Over the
 * last `window` comparable pairs, each pair contributes the candidate's and the baseline's
 * logprobs of the same greedy tokens (the aligned positions before a divergence); the statistic
 * is |Σᵢ dᵢ|, dᵢ = the pair's mean lp_c − lp_b. Under the null hypothesis — candidate and
 * baseline are the same engine up to noise — the two labels of a pair are exchangeable, so
 * swapping them (flipping the sign of dᵢ) leaves the statistic's distribution unchanged; the
 * p-value is (1 + #{T_perm ≥ T_obs}) / (1 + B) over B random swaps of every pair, which gives
 * P(p ≤ α) ≤ α exactly for any α, at any window size, whatever the noise's shape (Phipson & Smyth
 * 2010, "Permutation P-values should never be zero"). Pure and deterministic: the swaps come from
 * a seeded generator started afresh at each evaluation (src/core/random.ts).
 */

/** The pair's mean lp_c − lp_b over aligned positions where both logprobs are known, or null. */
export function pairDifference(c: Comparison): number | null {
  let sum = 0;
  let n = 0;
  for (const p of c.positions) {
    if (p.diff === null || !Number.isFinite(p.diff)) continue;
    sum += p.diff;
    n++;
  }
  return n > 0 ? sum / n : null;
}

/**
 * The p-value of the sign-flip permutation test of `d` (the pairs' differences): `permutations`
 * random relabellings from `random`. 1 for an empty or all-zero window (no evidence).
 */
export function permutationPValue(d: readonly number[], permutations: number, random: () => number): number {
  let observed = 0;
  for (const v of d) observed += v;
  observed = Math.abs(observed);
  if (d.length === 0 || observed === 0) return 1;
  // Ties within rounding count as at least as extreme (a conservative p).
  const eps = observed * 1e-12;
  let extreme = 0;
  for (let b = 0; b < permutations; b++) {
    let s = 0;
    for (const v of d) s += random() < 0.5 ? v : -v;
    if (Math.abs(s) >= observed - eps) extreme++;
  }
  return (1 + extreme) / (1 + permutations);
}

/** The test's settings: `alert.permutation` with the window of `alert.window`. */
export interface PermutationConfig {
  window: number;
  permutations: number;
  seed: number;
}

/** The last `window` pairs' differences and the p-value over them (computed on demand, cached). */
export class PermutationWindow {
  private readonly d: number[] = [];
  private cached: number | null = null;

  constructor(private readonly cfg: PermutationConfig) {}

  /** Adds one comparable pair (a pair with no aligned position adds nothing). */
  add(c: Comparison): void {
    const v = pairDifference(c);
    if (v === null) return;
    this.addDifference(v);
  }

  /** Adds one pair's difference directly (tests, the benchmark). */
  addDifference(v: number): void {
    this.d.push(v);
    if (this.d.length > this.cfg.window) this.d.splice(0, this.d.length - this.cfg.window);
    this.cached = null;
  }

  /** Pairs in the window. */
  get pairs(): number {
    return this.d.length;
  }

  /** The p-value now (1 with no pair yet). */
  pValue(): number {
    this.cached ??= permutationPValue(this.d, this.cfg.permutations, mulberry32(this.cfg.seed));
    return this.cached;
  }
}

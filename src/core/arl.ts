/**
 * Average run lengths of the one-sided CUSUM `S = max(0, S + x − k)`, alarm at `S > h`, and the
 * inverse: the `k` and `h` that buy a chosen false-alarm interval (`alert.cusum.falseAlarmPairs`)
 * and catch a chosen shift (`alert.cusum.targetShift`). Pure functions (docs/detection.md, "What
 * the CUSUM's k and h buy").
 *
 * Siegmund's approximation (D. Siegmund, Sequential Analysis, Springer 1985, eq. 2.56; the form
 * in D. C. Montgomery, Introduction to Statistical Quality Control, §9.1.4) for observations
 * x ~ N(μ, 1), with Δ = μ − k and b = h + 1.166:
 *
 *   ARL(μ) ≈ (exp(−2Δb) + 2Δb − 1) / (2Δ²)   (Δ ≠ 0),   b²   (Δ = 0).
 *
 * Here x = maxShift / noiseFloor: the floor is the unit, taken as the σ of x in control (the floor
 * is the noise's p99 × a margin, so the true σ is smaller and the true ARL0 longer: the figure
 * is a lower bound, not a promise of false alarms).
 */

/** Siegmund's correction of the threshold for the overshoot: b = h + 1.166 (= h + 2·0.583). */
export const SIEGMUND_OVERSHOOT = 1.166;

/** ARL of a one-sided CUSUM (slack k, threshold h) when x ~ N(mu, 1): Siegmund's approximation. */
export function siegmundArl(k: number, h: number, mu: number): number {
  const d = mu - k;
  const b = h + SIEGMUND_OVERSHOOT;
  if (Math.abs(d) < 1e-9) return b * b;
  return (Math.exp(-2 * d * b) + 2 * d * b - 1) / (2 * d * d);
}

/** The h at which the in-control ARL (μ = 0) of a one-sided CUSUM with slack k is `arl0` (bisection; ≥ 0). */
export function hForArl0(k: number, arl0: number): number {
  if (siegmundArl(k, 0, 0) >= arl0) return 0;
  let lo = 0;
  let hi = 1;
  while (siegmundArl(k, hi, 0) < arl0 && hi < 1e6) hi *= 2;
  for (let i = 0; i < 200; i++) {
    const mid = (lo + hi) / 2;
    if (siegmundArl(k, mid, 0) < arl0) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

/** The `alert.cusum` section as the config file gives it (raw k/h are overrides; null or absent: derived). */
export interface CusumInput {
  k?: number | null | undefined;
  h?: number | null | undefined;
  targetShift: number | null;
  falseAlarmPairs: number | null;
}

/** The defaults when neither the raw values nor the targets are set: k 0.5 (a shift of one floor), h 5. */
export const CUSUM_DEFAULT = { k: 0.5, h: 5 } as const;

/**
 * The floor the CUSUM's unit is derived at: the configured floor, `calibration.minFloor` for
 * `auto` (the floor in force until calibration has enough repeats, and the least it can be), and
 * for `exact` 0.1 (any shift then counts as a whole step, k only has to be > 0).
 */
export function cusumUnit(noiseFloor: number | 'auto' | 'exact', minFloor: number): number {
  return noiseFloor === 'auto' ? minFloor : noiseFloor === 'exact' ? 0.1 : noiseFloor;
}

/**
 * The k and h in force: a raw `k`/`h` wins; otherwise `k = targetShift / (2 · unit)` (half the
 * target shift, in floor units: the optimal slack for a step of that size) and `h` such that
 * Siegmund's ARL0 at that k is `falseAlarmPairs`; with neither set, the defaults (0.5, 5).
 */
export function resolveCusum(c: CusumInput, unit: number): { k: number; h: number } {
  const k = c.k ?? (c.targetShift !== null ? c.targetShift / (2 * unit) : CUSUM_DEFAULT.k);
  const h = c.h ?? (c.falseAlarmPairs !== null ? hForArl0(k, c.falseAlarmPairs) : CUSUM_DEFAULT.h);
  return { k, h };
}

/** What a CUSUM configuration buys, by Siegmund's approximation and the per-request clip. */
export interface ImpliedRunLengths {
  k: number;
  h: number;
  /** The unit (floor, nats) k and h are in. */
  unit: number;
  /** The shift (nats) ARL1 is for: `targetShift`, or 2·k·unit (the shift k is optimal for). */
  shift: number;
  /** Pairs between false alarms in control (x ~ N(0, 1) in floor units: a lower bound). */
  arl0: number;
  /** Pairs to fire on a sustained shift of `shift` nats: Siegmund's, and never fewer than minRequests + 1 (the clip). */
  arl1: number;
  /** Siegmund's ARL1 before the clip's minimum. */
  arl1Siegmund: number;
}

/**
 * The run lengths a configuration implies. The detector clips each request's x at
 * `k + h / minRequests` (src/core/detector.ts), so S passes h no sooner than minRequests + 1
 * requests: ARL1 is Siegmund's or that, whichever is longer.
 */
export function impliedRunLengths(
  cusum: { k: number; h: number; targetShift: number | null },
  unit: number,
  minRequests: number,
): ImpliedRunLengths {
  const shift = cusum.targetShift ?? 2 * cusum.k * unit;
  const arl1Siegmund = siegmundArl(cusum.k, cusum.h, shift / unit);
  return {
    k: cusum.k,
    h: cusum.h,
    unit,
    shift,
    arl0: siegmundArl(cusum.k, cusum.h, 0),
    arl1: Math.max(arl1Siegmund, Math.max(1, minRequests) + 1),
    arl1Siegmund,
  };
}

/** One line for serve's start log: what the CUSUM's k and h buy. */
export function runLengthLine(r: ImpliedRunLengths, minRequests: number): string {
  const n = (v: number): string => (v >= 100 ? Math.round(v).toLocaleString('en-US') : v.toFixed(1));
  return (
    `LogprobSustainedShift: CUSUM k ${r.k.toFixed(3)} h ${r.h.toFixed(2)} (floor units of ${r.unit} nats) imply ARL0 ≥ ${n(r.arl0)} pairs between false alarms ` +
    `and ARL1 ≈ ${n(r.arl1)} pairs for a ${r.shift} nat shift (Siegmund ${n(r.arl1Siegmund)}, at least minRequests + 1 = ${minRequests + 1})`
  );
}

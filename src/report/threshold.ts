import type { Comparison } from '../core/index.js';
import { Histogram, linearEdges } from './histogram.js';

/**
 * How far a shift flips tokens, measured: at every free-running comparable position the baseline's
 * top-1/top-2 gap is the force a flip there would need, and the position either kept the
 * baseline's token or flipped (the first divergence). Float noise flips only near-ties (gap ≈ 0);
 * a systematic shift of size s flips tokens whose gap is below about s, so the gap at which flips
 * stop is a second estimate of the offset, independent of the logprob shifts themselves.
 */

/** Upper edges of the gap buckets (nats); the last bucket holds every gap above 3. */
export const GAP_BUCKETS: readonly number[] = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2, 3];

/** Flips needed before the report names a stop gap (fewer say little). */
export const MIN_FLIPS_FOR_STOP = 5;

/** The share of positions that flipped, per baseline-gap bucket, and where flips stop. */
export interface FlipCurveData {
  /** Upper edges, as {@link GAP_BUCKETS}. */
  edges: number[];
  /** Comparable positions with a known gap, per bucket. */
  positions: number[];
  /** Of them, the ones that flipped (a pair's first divergence). */
  flips: number[];
  /**
   * The gap below which 95% of the flips lie (an upper bound within 0.01 nats), with the flips it
   * rests on; null with fewer than {@link MIN_FLIPS_FOR_STOP} flips.
   */
  stop: { gap: number; flips: number } | null;
}

/** Accumulates the curve over pairs, in constant memory. */
export class FlipCurve {
  private readonly positions = new Histogram(GAP_BUCKETS);
  private readonly flips = new Histogram(GAP_BUCKETS);
  private readonly flipGaps = new Histogram(linearEdges(0.01, 5));

  add(c: Pick<Comparison, 'positions'>): void {
    for (const p of c.positions) {
      if (p.gap === null) continue;
      this.positions.add(p.gap);
      if (p.candidateToken !== undefined) {
        this.flips.add(p.gap);
        this.flipGaps.add(p.gap);
      }
    }
  }

  toJSON(): FlipCurveData {
    const n = this.flipGaps.n;
    return {
      edges: [...GAP_BUCKETS],
      positions: [...this.positions.counts],
      flips: [...this.flips.counts],
      stop: n >= MIN_FLIPS_FOR_STOP ? { gap: this.flipGaps.quantile(0.95)!, flips: n } : null,
    };
  }
}

/** A bucket's label: `0–0.05`, …, `> 3`. */
export function gapBucketLabel(edges: readonly number[], i: number): string {
  return i === edges.length ? `> ${edges[edges.length - 1]}` : `${i === 0 ? 0 : edges[i - 1]}–${edges[i]}`;
}

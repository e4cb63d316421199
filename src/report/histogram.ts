/**
 * Fixed-edge histograms for the offline report: constant memory whatever the input size, with
 * quantiles read from the buckets (an upper bound within one bucket's width).
 */

/** A histogram over explicit upper edges: bucket i counts values in (edges[i−1], edges[i]], the last bucket everything above. */
export class Histogram {
  readonly counts: number[];
  n = 0;
  max = -Infinity;

  constructor(readonly edges: readonly number[]) {
    this.counts = new Array<number>(edges.length + 1).fill(0);
  }

  add(x: number): void {
    if (!Number.isFinite(x)) return;
    let lo = 0;
    let hi = this.edges.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (x <= this.edges[mid]!) hi = mid;
      else lo = mid + 1;
    }
    this.counts[lo]!++;
    this.n++;
    if (x > this.max) this.max = x;
  }

  /** The upper edge of the bucket holding the q-quantile (the exact max for the last bucket); null when empty. */
  quantile(q: number): number | null {
    if (this.n === 0) return null;
    const target = Math.max(1, Math.ceil(q * this.n));
    let seen = 0;
    for (let i = 0; i < this.counts.length; i++) {
      seen += this.counts[i]!;
      if (seen >= target) return i < this.edges.length ? Math.min(this.edges[i]!, this.max) : this.max;
    }
    return this.max;
  }

  /** A plain-data copy for reports. */
  toJSON(): HistogramData {
    return { edges: [...this.edges], counts: [...this.counts], n: this.n, max: this.n > 0 ? this.max : null };
  }
}

/** A histogram as data: bucket i is (edges[i−1], edges[i]], the last one above every edge. */
export interface HistogramData {
  edges: number[];
  counts: number[];
  n: number;
  max: number | null;
}

/** Edges 0, then `perDecade` log-spaced edges per decade from 10^lo to 10^hi (nats). */
export function logEdges(lo: number, hi: number, perDecade: number): number[] {
  const edges = [0];
  for (let e = lo * perDecade; e <= hi * perDecade; e++) edges.push(Number((10 ** (e / perDecade)).toPrecision(6)));
  return edges;
}

/** Evenly spaced edges from `step` to `max`. */
export function linearEdges(step: number, max: number): number[] {
  const edges: number[] = [];
  for (let i = 1; i * step <= max + 1e-9; i++) edges.push(Number((i * step).toFixed(6)));
  return edges;
}

/** Sums adjacent buckets so that only the given edges remain (each must be one of `h.edges`). */
export function coarsen(h: HistogramData, keep: readonly number[]): HistogramData {
  const counts = new Array<number>(keep.length + 1).fill(0);
  let k = 0;
  for (let i = 0; i < h.counts.length; i++) {
    const upper = i < h.edges.length ? h.edges[i]! : Infinity;
    while (k < keep.length && upper > keep[k]! * (1 + 1e-9)) k++;
    counts[k]! += h.counts[i]!;
  }
  return { edges: [...keep], counts, n: h.n, max: h.max };
}

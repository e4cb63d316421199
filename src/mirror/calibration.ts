/**
 * Noise-floor calibration: some mirrored requests are sent twice to a backend; the per-position
 * shift between the two runs is run-to-run noise — on the trusted side. Keeps a bounded window of
 * those shifts per backend (their p99 is `logprobe_noise_floor_observed_nats{backend}`) and, apart,
 * the trusted ones the floor is learned from: the baseline's repeats, or in baseline-free mode the
 * candidate's cold↔cold repeats (its cache emptied before each run). A candidate whose warm run
 * disagrees with its cold one shows a finding, not noise, and never raises the floor.
 */
export class Calibration {
  private readonly shifts: Record<'candidate' | 'baseline' | 'trusted', number[]> = {
    candidate: [],
    baseline: [],
    trusted: [],
  };
  private readonly p99Cache: Record<'candidate' | 'baseline' | 'trusted', number | null> = {
    candidate: null,
    baseline: null,
    trusted: null,
  };
  /** Repeat pairs measured so far, per backend, and the trusted ones among them. */
  readonly samples: Record<'candidate' | 'baseline' | 'trusted', number> = { candidate: 0, baseline: 0, trusted: 0 };

  constructor(private readonly options: { margin: number; minSamples: number; minFloor: number; maxValues?: number }) {}

  /** Adds the per-position shifts of one repeat pair of a backend; `trusted`: the floor may learn from it. */
  add(backend: 'candidate' | 'baseline', positionShifts: readonly number[], o: { trusted: boolean }): void {
    for (const key of o.trusted ? [backend, 'trusted' as const] : [backend]) {
      const list = this.shifts[key];
      for (const s of positionShifts) if (Number.isFinite(s)) list.push(s);
      const max = this.options.maxValues ?? 10_000;
      if (list.length > max) list.splice(0, list.length - max);
      this.samples[key]++;
      this.p99Cache[key] = null;
    }
  }

  /** p99 of the recorded shifts of a backend (or of the trusted ones), or null before any. */
  p99(backend: 'candidate' | 'baseline' | 'trusted'): number | null {
    const cached = this.p99Cache[backend];
    if (cached !== null) return cached;
    const list = this.shifts[backend];
    if (list.length === 0) return null;
    const sorted = [...list].sort((a, b) => a - b);
    const v = sorted[Math.min(sorted.length - 1, Math.ceil(0.99 * sorted.length) - 1)] as number;
    this.p99Cache[backend] = v;
    return v;
  }

  /**
   * The floor `noiseFloor: auto` uses: max(minFloor, trusted p99 × margin) once minSamples trusted
   * repeats exist, minFloor until then. It can raise the floor on noisy hardware, never lower it
   * below what two implementations differ by, and never learn from the candidate's cache path.
   */
  autoFloor(): number {
    if (this.samples.trusted < this.options.minSamples) return this.options.minFloor;
    return Math.max(this.options.minFloor, (this.p99('trusted') ?? 0) * this.options.margin);
  }
}

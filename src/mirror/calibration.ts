/**
 * Noise-floor calibration: some mirrored requests are sent twice to each backend; the per-position
 * shift between the two runs of one backend is pure run-to-run noise. Keeps a bounded window of
 * those shifts per backend and reports their p99.
 */
export class Calibration {
  private readonly shifts: Record<'candidate' | 'baseline', number[]> = { candidate: [], baseline: [] };
  private readonly p99Cache: Record<'candidate' | 'baseline', number | null> = { candidate: null, baseline: null };
  /** Repeat pairs measured so far, per backend. */
  readonly samples: Record<'candidate' | 'baseline', number> = { candidate: 0, baseline: 0 };

  constructor(private readonly options: { margin: number; minSamples: number; minFloor: number; maxValues?: number }) {}

  /** Adds the per-position shifts of one repeat pair of a backend. */
  add(backend: 'candidate' | 'baseline', positionShifts: readonly number[]): void {
    const list = this.shifts[backend];
    for (const s of positionShifts) if (Number.isFinite(s)) list.push(s);
    const max = this.options.maxValues ?? 10_000;
    if (list.length > max) list.splice(0, list.length - max);
    this.samples[backend]++;
    this.p99Cache[backend] = null;
  }

  /** p99 of the recorded shifts of a backend, or null before any. */
  p99(backend: 'candidate' | 'baseline'): number | null {
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
   * The floor `noiseFloor: auto` uses: max(minFloor, max(observed p99) × margin) once both
   * backends have minSamples repeats, minFloor until then. It can raise the floor on noisy
   * hardware, never lower it below what two implementations differ by.
   */
  autoFloor(): number {
    const ready = this.samples.candidate >= this.options.minSamples && this.samples.baseline >= this.options.minSamples;
    if (!ready) return this.options.minFloor;
    const observed = Math.max(this.p99('candidate') ?? 0, this.p99('baseline') ?? 0);
    return Math.max(this.options.minFloor, observed * this.options.margin);
  }
}

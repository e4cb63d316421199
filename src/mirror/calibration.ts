import type { Config } from '../config/schema.js';
import { compare, pickThresholds } from '../core/index.js';
import type { Backend } from '../core/types.js';
import type { Metrics } from '../metrics/registry.js';
import type { Copy } from '../backend/client.js';
import type { BackendResult } from '../backend/dispatch.js';
import type { PairPipeline } from '../pair/pipeline.js';

/**
 * Noise-floor calibration: some mirrored requests are sent twice to a backend; the per-position
 * shift between the two runs is run-to-run noise — on the trusted side. Keeps a bounded window of
 * those shifts per backend (their p99 is `logprobe_noise_floor_observed_nats{backend}`) and, apart,
 * the trusted ones the floor is learned from: the baseline's repeats, or in baseline-free mode the
 * candidate's cold↔cold repeats (its cache emptied before each run). A candidate whose warm run
 * disagrees with its cold one shows a finding, not noise, and never raises the floor.
 */
export class Calibration {
  private readonly shifts: Record<Backend | 'trusted', number[]> = {
    candidate: [],
    baseline: [],
    trusted: [],
  };
  private readonly p99Cache: Record<Backend | 'trusted', number | null> = {
    candidate: null,
    baseline: null,
    trusted: null,
  };
  /** Repeat pairs measured so far, per backend, and the trusted ones among them. */
  readonly samples: Record<Backend | 'trusted', number> = { candidate: 0, baseline: 0, trusted: 0 };

  constructor(private readonly options: { margin: number; minSamples: number; minFloor: number; maxValues?: number }) {}

  /** Adds the per-position shifts of one repeat pair of a backend; `trusted`: the floor may learn from it. */
  add(backend: Backend, positionShifts: readonly number[], o: { trusted: boolean }): void {
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
  p99(backend: Backend | 'trusted'): number | null {
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

/** The checks with a floor of their own (`path.noiseFloor`, `canary.noiseFloor`). */
export type OwnFloor = 'path' | 'canary';

/**
 * The mirror's calibration (`calibration.rate`): the floor in force, what it has learned, its
 * gauges, and the extra runs that teach it — the same copy again to each backend, whose shift
 * against the first run is run-to-run noise on the trusted side. With a baseline, the baseline's
 * repeat teaches the floor and the candidate's is only observed; baseline-free, the candidate's
 * counts only when both its runs were cold (`mirror.repeat.flush`: its cache emptied before each).
 */
export class MirrorCalibration {
  /** What each model slice has learned (the `auto` floor runs per slice). */
  private readonly learned = new Map<string, Calibration>();
  /**
   * What each slice's own floors have learned (`path.noiseFloor: auto` from the trusted side's
   * path pairs, `canary.noiseFloor: auto` from the trusted side's canary repeats), by check.
   */
  private readonly own: Record<OwnFloor, Map<string, Calibration>> = { path: new Map(), canary: new Map() };

  constructor(
    private readonly deps: {
      config: Config;
      metrics: Metrics;
      pipeline: PairPipeline;
    },
  ) {}

  /** A slice's calibration, created (with its gauge) on first sight. */
  private of(model: string): Calibration {
    let c = this.learned.get(model);
    if (c === undefined) {
      c = new Calibration(this.deps.config.calibration);
      this.learned.set(model, c);
      this.deps.metrics.gauge('logprobe_noise_floor_nats').set({ model }, this.floorOf(c));
      for (const backend of ['candidate', 'baseline'] as const)
        this.deps.metrics.gauge('logprobe_noise_floor_observed_nats').set({ backend, model }, Number.NaN);
    }
    return c;
  }

  private floorOf(c: Calibration): number {
    const f = this.deps.config.analysis.noiseFloor;
    return f === 'auto' ? c.autoFloor() : f === 'exact' ? 0 : f;
  }

  /** The noise floor in force for a model slice: the configured one, or the slice's calibrated one for `auto`. */
  noiseFloor(model: string): number {
    return this.floorOf(this.of(model));
  }

  /**
   * The floor of a check that has one of its own, for a slice: `path.noiseFloor` or
   * `canary.noiseFloor` — a number; `auto`, learned from that check's trusted pairs alone
   * ({@link addOwn}); null, the pair floor in force.
   */
  ownFloor(kind: OwnFloor, model: string): number {
    const f = this.deps.config[kind].noiseFloor;
    if (f === null) return this.noiseFloor(model);
    if (f !== 'auto') return f;
    return this.ownOf(kind, model).autoFloor();
  }

  /**
   * Trusted pairs an `auto` own floor still waits for before it is learned (0: learned, or not
   * `auto`): until then it stands at `calibration.minFloor`.
   */
  ownToLearn(kind: OwnFloor, model: string): number {
    if (this.deps.config[kind].noiseFloor !== 'auto') return 0;
    return Math.max(0, this.deps.config.calibration.minSamples - this.ownOf(kind, model).samples.trusted);
  }

  private ownOf(kind: OwnFloor, model: string): Calibration {
    let c = this.own[kind].get(model);
    if (c === undefined) this.own[kind].set(model, (c = new Calibration(this.deps.config.calibration)));
    return c;
  }

  /**
   * A pair of the check's own (a path pair, a canary's repeat) and its per-position shifts: the
   * trusted side's teach the slice's `auto` floor of that check, the candidate's never do.
   */
  addOwn(kind: OwnFloor, model: string, backend: Backend, shifts: readonly number[], trusted: boolean): void {
    if (this.deps.config[kind].noiseFloor !== 'auto') return;
    this.ownOf(kind, model).add(backend, shifts, { trusted });
  }

  /** A repeat pair's per-position shifts in a slice; `trusted`: the floor may learn from them. Publishes the gauges. */
  add(model: string, backend: Backend, shifts: readonly number[], trusted: boolean): void {
    const c = this.of(model);
    c.add(backend, shifts, { trusted });
    const p99 = c.p99(backend);
    const { metrics } = this.deps;
    if (p99 !== null) metrics.gauge('logprobe_noise_floor_observed_nats').set({ backend, model }, p99);
    metrics.gauge('logprobe_noise_floor_nats').set({ model }, this.floorOf(c));
  }

  /** Whether this pair is one the calibration runs again (`calibration.rate`). */
  wants(random: () => number): boolean {
    const rate = this.deps.config.calibration.rate;
    return rate > 0 && random() < rate;
  }

  /** Sends a compared pair's copy again to each backend and learns, in its slice, from the two runs' shifts. */
  async again(
    copy: Copy,
    model: string,
    firsts: { candidate: BackendResult; baseline: BackendResult | null },
  ): Promise<void> {
    const { config, pipeline } = this.deps;
    const t = pickThresholds(config.analysis, this.noiseFloor(model));
    let cold = false;
    if (firsts.baseline === null && config.mirror.repeat.flush) {
      // Not cold for sure when it fails: the candidate's repeat is observed, never trusted.
      cold = (await pipeline.flush(copy, ['candidate'])).size === 0;
    }
    const sent = await pipeline.send(copy);
    const runs: Array<[Backend, BackendResult, BackendResult | null, boolean]> = [
      ['candidate', firsts.candidate, sent.candidate, firsts.baseline === null && cold],
    ];
    if (firsts.baseline !== null) runs.push(['baseline', firsts.baseline, sent.baseline, true]);
    for (const [backend, first, second, trusted] of runs) {
      if (second === null || second.error !== null || second.status >= 400) continue;
      const c = compare(second.body, first.body, t);
      if (c.verdict === 'incomparable') continue;
      this.add(
        model,
        backend,
        c.positions.map((p) => p.shift).filter((s): s is number => s !== null),
        trusted,
      );
    }
  }
}

import type { Dispatcher } from 'undici';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { pickThresholds, type Thresholds } from '../core/index.js';
import type { DetectorState } from '../core/detector.js';
import type { PermutationWindow } from '../core/permutation.js';
import type { Backend } from '../core/types.js';
import type { EngineName } from '../metrics/labels.js';
import type { Metrics } from '../metrics/registry.js';
import { redactionOf, type Redaction } from '../log/redact.js';
import { scrubFields } from '../log/logger.js';
import type { Exchange } from '../proxy/tap.js';
import { createUpstreamPool } from '../backend/pool.js';
import { Backends, scoringOptions, type BackendOptions } from '../backend/client.js';
import type { BackendHealth } from '../backend/health.js';
import { mirrorKind, requestKind, rewriteForMirror, skipReason, stateSkip } from '../backend/rewrite.js';
import {
  PairPipeline,
  withBody,
  type PairCopy,
  type PathPlan,
  type RepeatPlan,
  type PairRun,
} from '../pair/pipeline.js';
import { Slicer } from '../core/slice.js';
import type { MirrorSkipReason } from '../metrics/catalog.js';
import type { MirroredPair, MirrorListeners, MirrorOutcome } from '../pair/types.js';
import { MirrorCalibration } from './calibration.js';
import { MirrorDetectors, type SliceDetectors } from './detectors.js';
import { mirrorBackendHooks, PairObserver } from './observe.js';
import { WorkQueue } from './queue.js';

/** A sampled exchange, rewritten: the copy the pipeline sends, and what the pair record keeps of the request. */
interface Job extends PairCopy {
  id: string;
  route: string;
  /** Its model slice (src/core/slice.ts). */
  model: string;
  /** The client's request headers (the copy's, and the pair record's: the capture strips credentials). */
  clientHeaders: Exchange['headers'];
  /** Credential values of the client's request: scrubbed from what is logged about it. */
  secrets: readonly string[];
  /** Called once when the job is over (compared, failed or dropped at close). */
  settle?: () => void;
}

/** A canary round as the mirror observes it: its slice, its pairs, and how it was judged (null: inconclusive). */
export interface CanaryRound {
  model: string;
  pairs: MirroredPair[];
  changed: boolean | null;
  compared: number;
  pooledShare: number;
  maxShift: number | null;
  /** The judgement in one line (the alert's evidence). */
  summary: string;
}

/** What the mirror needs from the process. */
export interface MirrorDeps {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  candidatePool: Dispatcher & { close(): Promise<void> };
  listeners?: MirrorListeners;
  /** Clock in seconds (injectable for tests). */
  now?: () => number;
  /** Uniform [0,1) source for sampling and calibration (injectable for tests). */
  random?: () => number;
  /** Called once per exchange handed to `accept` when it is over (the worker's acknowledgement). */
  onSettled?: () => void;
  /** Each backend's state: failed copies are logged there, rate-limited, with the cause (src/backend/health.ts). */
  health?: BackendHealth;
}

/** Both backends of the mirror: the worker's candidate pool, the baseline's own (none baseline-free). */
function mirrorBackends(deps: MirrorDeps, log: Logger): Backends {
  const { config } = deps;
  const candidate: BackendOptions = {
    ...config.candidate,
    pool: deps.candidatePool,
    ownsPool: false,
    headers: { role: 'candidate' },
  };
  const url = config.baseline.url;
  const baseline: BackendOptions | null =
    url === null
      ? null
      : {
          ...config.baseline,
          url,
          pool: createUpstreamPool(
            { ...config.baseline, url },
            {
              tlsInsecure: config.tlsInsecure,
              connections: config.mirror.concurrency * 2,
              maxHeaderSize: config.limits.maxHeaderKB * 1024,
              onConnections: (delta) => deps.metrics.connections('baseline', delta),
            },
          ),
          ownsPool: true,
          headers: {
            role: 'baseline',
            apiKey: config.baseline.apiKey,
            forwardAuth: config.baseline.forwardAuth,
            forwardHeaders: config.baseline.forwardHeaders,
          },
        };
  return new Backends({ candidate, baseline }, scoringOptions(config), mirrorBackendHooks(deps.metrics, log));
}

/**
 * The mirror, in its worker thread: takes the exchanges the proxy's thread sampled, rewrites them
 * to greedy + logprobs, runs each through the pair pipeline (src/pair/pipeline.ts: send to both
 * backends, classify, score, repeat), then observes it (metrics, detectors, calibration) and
 * hands it to the listeners. Everything happens after the client's response and off its thread;
 * a full queue drops the copy.
 */
export class Mirror {
  private readonly queue: WorkQueue<Job>;
  private readonly backends: Backends;
  private readonly pipeline: PairPipeline;
  private readonly detectors: MirrorDetectors;
  private readonly calibration: MirrorCalibration;
  private readonly observer: PairObserver;
  private readonly log: Logger;
  private readonly random: () => number;
  /** What a line about one request is scrubbed of (src/log/redact.ts): the captures' rule. */
  private readonly redaction: Redaction;
  /** Names each request's model slice, within `slices`' bound. */
  private readonly slicer: Slicer;

  constructor(private readonly deps: MirrorDeps) {
    const { config, metrics } = deps;
    const now = deps.now ?? (() => Date.now() / 1000);
    this.log = deps.logger.child({ module: 'mirror' });
    this.redaction = redactionOf(config);
    this.random = deps.random ?? Math.random;
    this.backends = mirrorBackends(deps, this.log);
    this.pipeline = new PairPipeline(this.backends, { rewrite: config.mirror });
    this.calibration = new MirrorCalibration({ config, metrics, pipeline: this.pipeline });
    this.detectors = new MirrorDetectors({ config, metrics, log: this.log, listeners: deps.listeners, now });
    const overflow = metrics.counter('logprobe_slice_overflow_total');
    overflow.inc(0);
    this.slicer = new Slicer(config.slices, undefined, () => overflow.inc());
    // The allow-list's slices have their series from the start (src/metrics/registry.ts's rule).
    for (const model of this.slicer.initial()) {
      this.detectors.slice(model);
      this.calibration.noiseFloor(model);
    }
    this.observer = new PairObserver({
      config,
      metrics,
      log: this.log,
      redaction: this.redaction,
      backends: this.backends,
      counts: this.pipeline.counts,
      detectors: this.detectors,
      calibration: this.calibration,
      health: deps.health,
    });
    const depth = metrics.gauge('logprobe_mirror_queue_depth');
    this.queue = new WorkQueue<Job>({
      concurrency: config.mirror.concurrency,
      size: config.mirror.queueSize,
      run: (job) =>
        this.process(job)
          .catch((err: unknown) =>
            this.log.error(scrubFields({ err, reqId: job.id }, this.redaction, job.secrets), 'mirror pair failed'),
          )
          .finally(() => job.settle?.()),
      onDepth: (d) => depth.set(d),
    });
  }

  /** The noise floor in force for a model slice: the configured one, or the slice's calibrated one for `auto`. */
  noiseFloor(model: string): number {
    return this.calibration.noiseFloor(model);
  }

  /** The thresholds in force for the next comparison in a model slice. */
  thresholds(model: string): Thresholds {
    return pickThresholds(this.deps.config.analysis, this.noiseFloor(model));
  }

  /** The thresholds a slice's canaries are compared at: the analysis thresholds at `canary.noiseFloor` (src/mirror/calibration.ts `ownFloor`). */
  canaryThresholds(model: string): Thresholds {
    return pickThresholds(this.deps.config.analysis, this.calibration.ownFloor('canary', model));
  }

  /**
   * A canary's repeat on one side (its per-position shifts against its first run): the trusted
   * side's teach the slice's `canary.noiseFloor: auto` — the canaries' own floor, apart from the
   * traffic's.
   */
  learnCanaryFloor(model: string, backend: Backend, shifts: readonly number[], trusted: boolean): void {
    this.calibration.addOwn('canary', model, backend, shifts, trusted);
  }

  /** Trusted canary repeats `canary.noiseFloor: auto` still waits for in a slice (0: learned, or a set floor). */
  canaryFloorToLearn(model: string): number {
    return this.calibration.ownToLearn('canary', model);
  }

  /** Every model slice's detectors (read-only, for the live page). */
  get slices(): ReadonlyMap<string, Readonly<SliceDetectors>> {
    return this.detectors.all;
  }

  /** The detectors' current state (read-only view for the demo and tests). */
  get detectorState(): Readonly<DetectorState> {
    return this.detectors.state;
  }

  /** A backend's self-consistency detector state (read-only, for the demo). */
  selfDetectorState(backend: Backend): Readonly<DetectorState> {
    return this.detectors.selfState(backend);
  }

  /** The permutation test beside the alerts (of the worst slice): its p-value is a gauge and on /ui. */
  get permutation(): PermutationWindow | null {
    return this.detectors.permutation;
  }

  /**
   * Takes an exchange the sampler chose (on the proxy's thread, src/worker/handle.ts): skipped,
   * dropped or queued. `deps.onSettled` is called once when it is over, whichever way.
   */
  accept(ex: Exchange): void {
    const settle = this.deps.onSettled;
    const count = (outcome: MirrorOutcome, reason?: string | null, code?: MirrorSkipReason) => {
      this.deps.metrics.counter('logprobe_mirror_total').inc({ route: ex.route, outcome });
      if (code) this.deps.metrics.counter('logprobe_mirror_skipped_total').inc({ reason: code });
      if (reason) this.log.debug({ reqId: ex.requestId, route: ex.route, reason }, 'mirror skipped');
      settle?.();
    };
    const kind = mirrorKind(ex);
    if (kind === null) return count('skipped', skipReason(ex));
    if (this.refusal !== null) return count('skipped', this.refusal, 'meaning_differs');
    // A full queue would refuse the copy anyway: drop it before parsing and rewriting the body.
    if (this.queue.full) return count('dropped');
    let parsed: unknown;
    try {
      parsed = JSON.parse(ex.body.toString('utf8'));
    } catch {
      return count('skipped', 'the request body is not JSON', 'not_json');
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
      return count('skipped', 'the request body is not a JSON object', 'not_json');
    const stateful = stateSkip(kind, parsed as Record<string, unknown>);
    if (stateful !== null) return count('skipped', stateful, 'stored_state');
    const body = rewriteForMirror(kind, parsed as Record<string, unknown>, this.deps.config.mirror);
    let payload: string;
    try {
      // Throws on a body nested deeper than the stack allows (JSON.parse does not).
      payload = JSON.stringify(body);
    } catch {
      return count('skipped', 'the rewritten body cannot be serialised (nested too deep)', 'unserialisable');
    }
    const job: Job = {
      id: ex.requestId,
      route: ex.route,
      model: this.slicer.model(parsed as Record<string, unknown>),
      path: ex.path,
      kind: requestKind(ex.path) ?? 'completions',
      clientHeaders: ex.headers,
      secrets: this.redaction.secrets(ex.headers),
      body,
      payload,
      ...(settle ? { settle } : {}),
    };
    if (!this.queue.push(job)) count('dropped');
  }

  /**
   * Which backends this job probes with a repeat (cold → warm), and whether their caches are
   * emptied first; none for most jobs. Baseline-free, every mirrored request is a probe of the
   * candidate (there is nothing else to compare).
   */
  private repeatPlan(): RepeatPlan | null {
    const r = this.deps.config.mirror.repeat;
    if (this.backends.baseline === null) return { backends: ['candidate'], flush: r.flush };
    if (r.rate <= 0 || this.random() >= r.rate) return null;
    return { backends: [...new Set(r.backends)], flush: r.flush };
  }

  /** The mirror is behind (its queue half full): scoring is skipped to keep up. */
  private get busy(): boolean {
    return this.queue.depth >= Math.max(1, this.deps.config.mirror.queueSize / 2);
  }

  /**
   * With `flush`, one probe at a time: a probe is flush → first run → second run, and another
   * probe's flush in between would empty the cache its second run needs (cold↔cold, no evidence).
   */
  private probeChain: Promise<void> = Promise.resolve();

  private async process(job: Job): Promise<void> {
    const plan = this.repeatPlan();
    if (!plan?.flush) return this.run(job, plan);
    const previous = this.probeChain;
    let release!: () => void;
    this.probeChain = new Promise<void>((resolve) => (release = resolve));
    await previous;
    try {
      await this.run(job, plan);
    } finally {
      release();
    }
  }

  /** A job through the pair pipeline, observed, emitted; then, for a share of compared pairs, calibration. */
  private async run(job: Job, plan: RepeatPlan | null): Promise<void> {
    const floor = this.noiseFloor(job.model);
    const t = pickThresholds(this.deps.config.analysis, floor);
    const pathFloor = this.calibration.ownFloor('path', job.model);
    const run = await this.pipeline.run(job, {
      thresholds: t,
      busy: this.busy,
      repeat: plan,
      path: this.pathPlan(pathFloor),
    });
    this.observer.observe(job, run, floor, pathFloor);
    this.emit(job, run, floor);
    if (run.result.outcome === 'ok' && this.calibration.wants(this.random))
      await this.calibration.again(withBody(job, run.request), job.model, run);
  }

  /** Which backends this job's path check covers (`path.rate` of jobs), at the slice's path floor; null for none. */
  private pathPlan(floor: number): PathPlan | null {
    const p = this.deps.config.path;
    if (p.rate <= 0 || (p.rate < 1 && this.random() >= p.rate)) return null;
    const backends = [...new Set(p.backends)].filter((b) => b === 'candidate' || this.backends.baseline !== null);
    if (backends.length === 0) return null;
    return { backends, thresholds: pickThresholds(this.deps.config.analysis, floor) };
  }

  /** The outcome counted, a pair not compared logged, the pair handed to the listeners. */
  private emit(job: Job, run: PairRun, noiseFloor: number): void {
    const { candidate: cand, baseline: base, repeats } = run;
    const outcome = run.result.outcome;
    this.deps.metrics.counter('logprobe_mirror_total').inc({ route: job.route, outcome });
    if (outcome !== 'ok') {
      const fields = {
        reqId: job.id,
        outcome,
        candidateStatus: cand.status,
        baselineStatus: base?.status,
        candidateError: cand.error,
        baselineError: base?.error,
      };
      this.log.debug(scrubFields(fields, this.redaction, job.secrets), 'mirror pair not compared');
    }
    const pair: MirroredPair = {
      id: job.id,
      ts: new Date().toISOString(),
      route: job.route,
      path: job.path,
      request: run.request,
      clientHeaders: job.clientHeaders,
      candidate: cand,
      baseline: base,
      outcome,
      analysis: run.result.comparison,
      noiseFloor,
      slice: { model: job.model, cache: run.cache },
      ...(repeats.length > 0 ? { repeats } : {}),
      ...(run.paths.length > 0 ? { paths: run.paths } : {}),
      ...(run.translated ? { translated: run.translated } : {}),
    };
    this.tell(pair);
  }

  /** A pair to the listeners (capture, the live page); a listener's failure is logged, never the mirror's. */
  private tell(pair: MirroredPair): void {
    try {
      this.deps.listeners?.onPair?.(pair);
    } catch (err) {
      this.log.error({ err }, 'mirror listener failed');
    }
  }

  /** The pair pipeline the mirrored copies go through: canary probes (src/canary) go through it too, with the mirror's backends. */
  get pairPipeline(): PairPipeline {
    return this.pipeline;
  }

  /** The model slice a request naming `model` counts in (within `slices`' bound). */
  sliceOf(model: string | null): string {
    return this.slicer.model(model === null ? {} : { model });
  }

  /**
   * A round of canary probes, compared and judged (src/canary): each pair counted
   * (`logprobe_verdicts_total{kind="canary"}`) and handed to the listeners (capture, the live
   * page) as a canary's, the judgement to the slice's LogprobCanaryShift. Canary pairs feed no
   * other detector and teach no floor of the traffic's: they are logprobe's own requests (their
   * repeats teach the canaries' own floor, {@link learnCanaryFloor}).
   */
  observeCanaryRound(round: CanaryRound): void {
    const verdicts = this.deps.metrics.counter('logprobe_verdicts_total');
    for (const pair of round.pairs) {
      const v = pair.analysis?.verdict;
      if (v !== undefined) verdicts.inc({ route: pair.route, verdict: v, kind: 'canary', model: round.model });
      this.tell(pair);
    }
    this.detectors.observeCanary(round.model, round.changed, {
      probes: round.compared,
      pooledShare: round.pooledShare,
      maxShift: round.maxShift,
      exampleId: round.pairs.find((p) => p.analysis !== null)?.id ?? null,
      detail: round.summary,
    });
  }

  /** Resolves when no mirrored pair is queued or in flight (tests, replay). */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  /** A backend's engine as the start-up probe told it, before its burst: the pairs' scoring takes it instead of detecting it again. */
  adoptEngine(backend: Backend, engine: EngineName, evidence: string): void {
    if (backend === 'baseline' && this.backends.baseline === null) return;
    this.backends.side(backend).adopt(engine, evidence);
  }

  /**
   * The two sides cannot be compared (their logprobs mean different things: the start-up probe's
   * `meaningMismatch`): from now on every exchange is skipped with this reason, never a shift.
   */
  refuse(reason: string): void {
    this.refusal = reason;
  }
  private refusal: string | null = null;

  /** The admin server listens on `port` (0 in the config: known only now): alerts link to its live page. */
  setAdminPort(port: number): void {
    this.detectors.setAdminPort(port);
  }

  /**
   * Stops taking copies and lets the queued and running pairs finish (so a graceful stop loses
   * no record), for up to `shutdown.drainSeconds`; what is still queued then is dropped and
   * counted. Closes the baseline pool.
   */
  async close(): Promise<void> {
    const dropped = await this.queue.close(this.deps.config.shutdown.drainSeconds * 1000);
    for (const job of dropped) {
      this.deps.metrics.counter('logprobe_mirror_total').inc({ route: job.route, outcome: 'dropped' });
      job.settle?.();
    }
    if (dropped.length > 0) this.log.warn({ dropped: dropped.length }, 'drain time over: queued mirror pairs dropped');
    await this.queue.idle();
    await this.detectors.close();
    await this.backends.close();
  }
}

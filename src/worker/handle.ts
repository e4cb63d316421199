import type { Backend } from '../core/types.js';
import { Worker } from 'node:worker_threads';
import type { Registry } from 'prom-client';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { initialDetectorState } from '../core/detector.js';
import type { LogDestination } from '../log/logger.js';
import { mergeThreads, type MetricsJSON } from '../metrics/merge.js';
import type { Metrics } from '../metrics/registry.js';
import type { Exchange, MirrorTap } from '../proxy/tap.js';
import { routeLabel } from '../metrics/labels.js';
import { mirrorKind, skipReason } from '../backend/rewrite.js';
import { Sampler } from '../mirror/sampler.js';
import { summarize, type DetectorSummary, type FromWorker, type ToWorker, type WorkerInit } from './protocol.js';
import type { MirrorListeners } from '../pair/types.js';
import type { BackendStatus } from '../backend/health.js';

/**
 * The worker's young generation: V8's default (up to 32 MB of semi-spaces per isolate) is sized for
 * throughput; the mirror's garbage is short-lived JSON, and a smaller nursery keeps the process's
 * RSS down with the queue full.
 */
const WORKER_LIMITS = { maxYoungGenerationSizeMb: 8 };

/**
 * How long a scrape waits for the worker's metrics before `/metrics` answers without them (with
 * the worker's last known values and `logprobe_mirror_worker_up 0`). The worker answers between
 * two of its tasks, within milliseconds even when busy (a comparison takes a few ms, its young
 * generation is 8 MB); half a second is ample for that and still leaves room in a scrape timeout
 * of 1 s (docs/operations.md's and the fleet test's Prometheus; the default is 10 s).
 */
export const WORKER_METRICS_TIMEOUT_MS = 500;

/**
 * How long `ready()` waits for a starting worker's first snapshot (the runtime's `listen()` waits
 * for it, so that a fresh proxy's /metrics has every series). Starting takes ~100 ms compiled
 * (nearer a second under tsx); this bounds a pathological start, after which the proxy serves
 * anyway and the metrics say the worker is down.
 */
export const WORKER_START_TIMEOUT_MS = 10_000;

/**
 * After `shutdown.drainSeconds`, how long a draining worker — a cluster's proxy worker process
 * (src/cluster/supervisor.ts), the mirror's worker thread — has left to exit before it is killed:
 * its last answers, the hand-over's or the capture's flush, the exit.
 */
export const EXIT_GRACE_MS = 10_000;

/** How long a draining worker may take in all before it is killed: `shutdown.drainSeconds`, then {@link EXIT_GRACE_MS}. */
export function exitDeadlineMs(config: Config): number {
  return config.shutdown.drainSeconds * 1000 + EXIT_GRACE_MS;
}

/** How long a live page's poll (GET /ui/data) waits for the worker; the page keeps what it has. */
export const LIVE_TIMEOUT_MS = 1000;
/** Polls waiting for the worker at once; more are answered `busy` at once (many open pages). */
export const LIVE_MAX_WAITING = 8;

/** A live poll's answer: the body of GET /ui/data as the worker encoded it, or why there is none. */
export type LiveAnswer = { worker: 'up'; body: Uint8Array } | { worker: 'late' | 'down' | 'busy' };

/**
 * The tap's answer before a body is read: keep it? When the sampler's choice is already final
 * (`sampleBy: random`, or forced by `x-logprobe-mirror: 1`) and the hand-over is full (`full`),
 * the copy is counted `dropped` now and its body never kept: a proxy at sample rate 1 with the
 * mirror saturated would otherwise hold every in-flight body only to drop it at the end (the
 * fault soak's RSS swing). With `sampleBy: hash` the choice needs the bytes: the body is kept and
 * a full hand-over drops it after the response.
 */
export function keepBodyFor(
  sampler: Sampler,
  method: string,
  path: string,
  forced: boolean | undefined,
  full: boolean,
  metrics: Metrics,
): boolean {
  if (!sampler.wantsBody(method, path, forced)) return false;
  if (!full || !sampler.finalBeforeBody(forced)) return true;
  metrics.counter('logprobe_mirror_total').inc({ route: routeLabel(path), outcome: 'dropped' });
  return false;
}

/**
 * What becomes of a finished exchange whose body the sampler kept: not mirrored (`no`: a hash
 * outside the sample), `skipped` (not a kind the mirror compares: counted), or `mirror`.
 */
export function mirrorChoice(sampler: Sampler, ex: Exchange): 'no' | 'skipped' | 'mirror' {
  if (!sampler.decide(ex.body, ex.forced)) return 'no';
  return mirrorKind(ex) === null ? 'skipped' : 'mirror';
}

/** The worker's entry: the compiled worker.js next to this file; from the sources (under tsx), worker-tsx.mjs, which loads worker.ts. */
export const DEFAULT_WORKER_URL = new URL(
  import.meta.url.endsWith('.ts') ? './worker-tsx.mjs' : './worker.js',
  import.meta.url,
);

/** What a {@link MirrorHandle} is built from. */
export interface MirrorHandleDeps {
  config: Config;
  logger: Logger;
  /** The proxy's thread's registry (src/metrics/registry.ts, thread `main`). */
  metrics: Metrics;
  /** Where the worker's log lines are written: the destination of `logger`. */
  logDestination: LogDestination;
  listeners?: MirrorListeners | undefined;
  /**
   * The worker's entry module (default {@link DEFAULT_WORKER_URL}). Code that runs from the .ts
   * sources (tests under tsx) passes a boot module that loads worker.ts through tsx's loader,
   * which a worker thread does not inherit.
   */
  workerUrl?: URL | undefined;
  /** The client path's requests in flight to the candidate now (the candidate pool's running + queued): told to the canaries. */
  candidateInFlight?: () => number;
}

/**
 * The mirror as the proxy's thread sees it: the sampling decision (it decides whether a body is
 * kept at all) and a bounded hand-over of each chosen exchange to the mirror's worker thread
 * (src/worker/worker.ts), which does everything else. The client path pays for one copy of the
 * kept body and one `postMessage`; a full mirror drops the copy here, counted, without waiting.
 * If the worker dies, mirroring stops (counted as dropped, logged once); clients never notice,
 * and /metrics keeps the worker's last values under `logprobe_mirror_worker_up 0`.
 */
export class MirrorHandle implements MirrorTap {
  private readonly sampler: Sampler;
  private readonly worker: Worker;
  /** Exchanges handed over and not yet settled by the worker. */
  private outstanding = 0;
  private readonly cap: number;
  private alive = true;
  private idleWaiters: Array<() => void> = [];
  /** Scrapes waiting for the worker's answer; `null` when it will not come (the worker exited). */
  private metricWaiters = new Map<number, (m: MetricsJSON | null) => void>();
  /** Live polls waiting for the worker's answer (`null`: the worker exited). */
  private liveWaiters = new Map<number, (body: Uint8Array | null) => void>();
  private nextId = 1;
  /**
   * The worker's registry as last received (a scrape's answer, or a snapshot it sent after an
   * alert transition): what /metrics shows of the worker when it is gone or does not answer.
   */
  private workerSnapshot: MetricsJSON = [];
  private readonly started: Promise<boolean>;
  private markStarted: (ok: boolean) => void = () => {};
  private detector: DetectorSummary = summarize(initialDetectorState());
  private self: Record<Backend, DetectorSummary> = {
    candidate: summarize(initialDetectorState()),
    baseline: summarize(initialDetectorState()),
  };
  /** Each model slice's pair detectors as of the last settled pair (bounded as the slices are: src/core/slice.ts). */
  private readonly sliceSummaries = new Map<string, DetectorSummary>();
  /** Each backend's state as the worker last told it (src/backend/health.ts). */
  private backends: BackendStatus[] = [];
  private readonly closed: Promise<void>;
  private closing: Promise<void> | null = null;
  private loadTimer: NodeJS.Timeout | null = null;

  constructor(private readonly deps: MirrorHandleDeps) {
    const { config } = deps;
    this.sampler = new Sampler(config.mirror);
    // As many as the worker's queue holds and runs: beyond that it would drop them anyway.
    this.cap = config.mirror.queueSize + config.mirror.concurrency;
    this.started = new Promise((resolve) => (this.markStarted = resolve));
    const workerData: WorkerInit = {
      config,
      forwardPairs: Boolean(deps.listeners?.onPair),
      forwardAlerts: Boolean(deps.listeners?.onAlert),
    };
    this.worker = new Worker(deps.workerUrl ?? DEFAULT_WORKER_URL, {
      workerData,
      name: 'logprobe-mirror',
      resourceLimits: WORKER_LIMITS,
    });
    this.worker.on('message', (m: FromWorker) => this.onMessage(m));
    // Canaries wait while the client path is busy: the worker learns the load four times a second.
    const load = deps.candidateInFlight;
    if (config.canary.enabled && load) {
      let last = -1;
      this.loadTimer = setInterval(() => {
        const n = load();
        if (n === last || !this.alive) return;
        last = n;
        this.worker.postMessage({ t: 'load', candidateInFlight: n } satisfies ToWorker);
      }, 250);
      this.loadTimer.unref();
    }
    this.worker.on('error', (err) => {
      deps.logger.error({ err }, 'mirror worker failed');
    });
    this.closed = new Promise((resolve) => {
      this.worker.once('exit', (code) => {
        if (this.closing === null)
          deps.logger.error(
            { exitCode: code },
            'mirror worker stopped: mirroring stopped, the proxy keeps serving; /metrics keeps its last values with logprobe_mirror_worker_up 0',
          );
        this.alive = false;
        this.outstanding = 0;
        this.deps.metrics.gauge('logprobe_mirror_worker_up').set(0);
        this.markStarted(false);
        this.wakeIdle();
        for (const w of this.metricWaiters.values()) w(null);
        this.metricWaiters.clear();
        for (const w of this.liveWaiters.values()) w(null);
        this.liveWaiters.clear();
        resolve();
      });
    });
  }

  /**
   * Resolves true once the worker is up (its first metrics snapshot arrived), false when it
   * exited first or did not come up within `timeoutMs`.
   */
  ready(timeoutMs: number = WORKER_START_TIMEOUT_MS): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
      timer.unref();
    });
    return Promise.race([this.started, late]).finally(() => clearTimeout(timer));
  }

  /** False once the worker thread has exited. */
  get workerRunning(): boolean {
    return this.alive;
  }

  /** Each backend's state as the worker last told it: reachable or not, the last failure (for /readyz). */
  backendStates(): readonly BackendStatus[] {
    return this.backends;
  }

  /** The detectors' state as of the last settled pair (for the demo and tests). */
  get detectorState(): Readonly<DetectorSummary> {
    return this.detector;
  }

  /**
   * Each model slice's pair detectors (window and CUSUM, alert phases) as of the last settled pair,
   * by model: what {@link detectorState} shows of the worst one, for every slice. (The live page's
   * rows do not come through here: GET /ui/data is the worker's own JSON, relayed as it is, also
   * by the cluster's primary.)
   */
  get sliceStates(): ReadonlyMap<string, Readonly<DetectorSummary>> {
    return this.sliceSummaries;
  }

  /** A backend's self-consistency detector as of the last settled pair (for the demo's progress lines). */
  selfDetectorState(backend: Backend): Readonly<DetectorSummary> {
    return this.self[backend];
  }

  wantsBody(method: string, path: string, forced: boolean | undefined): boolean {
    return keepBodyFor(this.sampler, method, path, forced, this.full(), this.deps.metrics);
  }

  /** No room for another copy: the worker gone or closing, or `queueSize + concurrency` handed over and unsettled. */
  private full(): boolean {
    return !this.alive || this.closing !== null || this.outstanding >= this.cap;
  }

  onExchange(ex: Exchange): void {
    const choice = mirrorChoice(this.sampler, ex);
    if (choice === 'skipped') {
      this.deps.metrics.counter('logprobe_mirror_total').inc({ route: ex.route, outcome: 'skipped' });
      this.deps.logger.debug({ reqId: ex.requestId, route: ex.route, reason: skipReason(ex) }, 'mirror skipped');
    }
    if (choice === 'mirror') this.handOver(ex);
  }

  /**
   * Hands an exchange the sampler chose (here, or in a proxy worker process: src/cluster) to the
   * worker thread; when the mirror is full, gone or closing, it is dropped and counted instead.
   */
  handOver(ex: Exchange): void {
    if (this.full()) {
      this.deps.metrics.counter('logprobe_mirror_total').inc({ route: ex.route, outcome: 'dropped' });
      return;
    }
    // A copy of exactly the body's bytes (the Buffer may be a view on a larger pooled one),
    // moved to the worker without a second copy.
    const body = new Uint8Array(ex.body);
    const msg: ToWorker = { t: 'job', exchange: { ...ex, body } };
    this.outstanding++;
    this.worker.postMessage(msg, [body.buffer]);
  }

  private onMessage(m: FromWorker): void {
    switch (m.t) {
      case 'settled':
        this.detector = m.state;
        this.self = m.self;
        for (const [model, summary] of m.slices ?? []) this.sliceSummaries.set(model, summary);
        if (this.outstanding > 0) this.outstanding--;
        if (this.outstanding === 0) this.wakeIdle();
        break;
      case 'log':
        this.deps.logDestination.write(m.line);
        break;
      case 'pair':
        this.call(() => this.deps.listeners?.onPair?.(m.pair), 'mirror listener failed');
        break;
      case 'alert':
        this.call(() => this.deps.listeners?.onAlert?.(m.transition), 'alert listener failed');
        break;
      case 'metrics':
        // Every snapshot is the newest known state, also one that comes after its scrape gave up.
        this.workerSnapshot = m.metrics;
        this.markStarted(true);
        if (m.id !== null) {
          this.metricWaiters.get(m.id)?.(m.metrics);
          this.metricWaiters.delete(m.id);
        }
        break;
      case 'live':
        this.liveWaiters.get(m.id)?.(m.body);
        this.liveWaiters.delete(m.id);
        break;
      case 'backends':
        this.backends = m.backends;
        break;
      case 'closed':
        break;
    }
  }

  private call(f: () => void, what: string): void {
    try {
      f();
    } catch (err) {
      this.deps.logger.error({ err }, what);
    }
  }

  private wakeIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }

  /** Resolves when every exchange handed over so far is settled (compared, failed or dropped). */
  idle(): Promise<void> {
    if (this.outstanding === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * The worker's metrics (mirror, detectors, capture) now, or `null` when it is gone or does not
   * answer within {@link WORKER_METRICS_TIMEOUT_MS}.
   */
  private workerMetrics(): Promise<MetricsJSON | null> {
    if (!this.alive) return Promise.resolve(null);
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.metricWaiters.delete(id);
        resolve(null);
      }, WORKER_METRICS_TIMEOUT_MS);
      this.metricWaiters.set(id, (m) => {
        clearTimeout(timer);
        resolve(m);
      });
      this.worker.postMessage({ t: 'metrics', id } satisfies ToWorker);
    });
  }

  /**
   * The live page's data (src/live/feed.ts) after pair `since` and point `sinceT`, as the worker
   * serialised and encoded it (its buffer moved here, not copied): this thread only relays the bytes. At most {@link LIVE_TIMEOUT_MS} of waiting
   * and {@link LIVE_MAX_WAITING} polls at once, so pages never hold the proxy's thread.
   */
  /** Tells the worker the admin server's port once it listens (the alerts' link to the live page). */
  adminListening(port: number): void {
    if (this.alive) this.worker.postMessage({ t: 'admin', port } satisfies ToWorker);
  }

  liveData(since: number, sinceT: number): Promise<LiveAnswer> {
    if (!this.alive) return Promise.resolve({ worker: 'down' });
    if (this.liveWaiters.size >= LIVE_MAX_WAITING) return Promise.resolve({ worker: 'busy' });
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.liveWaiters.delete(id);
        resolve({ worker: 'late' });
      }, LIVE_TIMEOUT_MS);
      this.liveWaiters.set(id, (body) => {
        clearTimeout(timer);
        resolve(body === null ? { worker: 'down' } : { worker: 'up', body });
      });
      this.worker.postMessage({ t: 'live', id, since, sinceT } satisfies ToWorker);
    });
  }

  /**
   * The exposition text of `main` and the worker's registry together ({@link mergeThreads}),
   * within {@link WORKER_METRICS_TIMEOUT_MS} whatever the worker does. When the worker is gone or
   * does not answer in time, its series keep their last known values (counters do not reset, a
   * firing alert stays firing) and `logprobe_mirror_worker_up` is 0: stale, and saying so.
   */
  async metricsText(main: Registry): Promise<string> {
    return mergeThreads(await this.metricsParts(main)).metrics();
  }

  /**
   * The two registries {@link metricsText} merges, unmerged: `main`'s (with
   * `logprobe_mirror_worker_up` set by this scrape) and the worker's, fresh or its last known
   * values. A cluster's primary merges them with its proxy workers' (src/cluster/primary.ts).
   */
  async metricsParts(main: Registry): Promise<[MetricsJSON, MetricsJSON]> {
    const fresh = await this.workerMetrics();
    this.deps.metrics.gauge('logprobe_mirror_worker_up').set(fresh === null ? 0 : 1);
    return [await main.getMetricsAsJSON(), this.workerSnapshot];
  }

  /**
   * Stops handing over copies; the worker finishes its queue within `shutdown.drainSeconds`
   * (then drops and counts the rest), flushes the capture and exits.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (this.loadTimer) clearInterval(this.loadTimer);
      if (this.alive) {
        this.worker.postMessage({ t: 'close' } satisfies ToWorker);
        const grace = exitDeadlineMs(this.deps.config);
        const timer = setTimeout(() => {
          this.deps.logger.warn('mirror worker did not stop in time: terminated');
          void this.worker.terminate();
        }, grace);
        timer.unref();
        await this.closed;
        clearTimeout(timer);
      }
    })();
    return this.closing;
  }
}

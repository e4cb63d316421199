import type { Dispatcher, Pool } from 'undici';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { compare, detectorEvidence, parseResponse, pickThresholds, type Comparison, type Thresholds } from '../core/index.js';
import { initialDetectorState, observe, pooledShare, tick, type AlertTransition, type DetectorState } from '../core/detector.js';
import type { Metrics } from '../metrics/registry.js';
import type { Exchange } from '../proxy/tap.js';
import { createUpstreamPool } from '../upstream/pool.js';
import { Calibration } from './calibration.js';
import { callBackend, mirrorHeaders, type BackendResult } from './dispatch.js';
import { LogprobLimits, sendWithinLimits } from './limits.js';
import { AlertNotifier } from './notify.js';
import { WorkQueue } from './queue.js';
import { recordComparison } from './record.js';
import { mirrorKind, requestKind, rewriteForMirror, skipReason } from './rewrite.js';
import { Scorer, scoreComparison, scoringOptions, withCopyParams, type Backend } from '../scoring/score.js';
import type { ScoringTarget } from '../scoring/http.js';
import { ENGINE_NAMES } from '../scoring/profile.js';
import type { MirroredPair, MirrorListeners, MirrorOutcome } from './types.js';

interface Job {
  id: string;
  route: string;
  path: string;
  headers: Exchange['headers'];
  body: Record<string, unknown>;
  /** `body` as JSON text. */
  payload: string;
  /** Called once when the job is over (compared, failed or dropped at close). */
  settle?: () => void;
}

/** What the mirror needs from the process. */
export interface MirrorDeps {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  candidatePool: Dispatcher;
  /** The baseline's pool; created from the config when absent. */
  baselinePool?: Pool;
  listeners?: MirrorListeners;
  /** Clock in seconds (injectable for tests). */
  now?: () => number;
  /** Uniform [0,1) source for sampling and calibration (injectable for tests). */
  random?: () => number;
  /** Called once per exchange handed to `accept` when it is over (the worker's acknowledgement). */
  onSettled?: () => void;
}

/**
 * The mirror, in its worker thread: takes the exchanges the proxy's thread sampled, rewrites them
 * to greedy + logprobs, sends the copy to candidate and baseline, compares, exports, detects, and
 * hands each pair to listeners. Everything happens after the client's response and off its
 * thread; a full queue drops the copy.
 */
export class Mirror {
  private readonly queue: WorkQueue<Job>;
  private readonly baselinePool: Pool;
  private readonly ownsBaselinePool: boolean;
  private readonly calibration: Calibration;
  private readonly notifier: AlertNotifier;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly random: () => number;
  private readonly ticker: NodeJS.Timeout;
  private detector: DetectorState = initialDetectorState();
  /** The logprobs caps the backends told us about (limits.ts). */
  private readonly limits = new LogprobLimits();
  /** Teacher-forced scoring through each backend's engine profile (src/scoring). */
  private readonly scorer: Scorer;

  constructor(private readonly deps: MirrorDeps) {
    const { config } = deps;
    this.log = deps.logger.child({ module: 'mirror' });
    this.now = deps.now ?? (() => Date.now() / 1000);
    this.random = deps.random ?? Math.random;
    this.ownsBaselinePool = !deps.baselinePool;
    this.baselinePool =
      deps.baselinePool ??
      createUpstreamPool(config.baseline, {
        tlsInsecure: config.tlsInsecure,
        connections: config.mirror.concurrency * 2,
        maxHeaderSize: config.limits.maxHeaderKB * 1024,
        onConnections: (delta) => deps.metrics.connections('baseline', delta),
      });
    this.calibration = new Calibration(config.calibration);
    this.scorer = new Scorer(scoringOptions(config), {
        onProfile: (backend, profile, evidence) => {
          const g = deps.metrics.gauge('logprobe_engine_profile');
          for (const p of ENGINE_NAMES) g.set({ backend, profile: p }, p === profile ? 1 : 0);
          this.log.info({ backend, profile, evidence }, `${backend} engine profile: ${profile} (${evidence})`);
        },
    });
    this.notifier = new AlertNotifier({ logger: this.log, webhookUrl: config.alert.webhookUrl, instance: `${config.listen.host}:${config.listen.port}` });
    const depth = deps.metrics.gauge('logprobe_mirror_queue_depth');
    this.queue = new WorkQueue<Job>({
      concurrency: config.mirror.concurrency,
      size: config.mirror.queueSize,
      run: (job) =>
        this.process(job)
          .catch((err: unknown) => this.log.error({ err, reqId: job.id }, 'mirror pair failed'))
          .finally(() => job.settle?.()),
      onDepth: (d) => depth.set(d),
    });
    // The series of every known label value exist at 0 from the start (src/metrics/registry.ts).
    deps.metrics.gauge('logprobe_noise_floor_nats').set(this.noiseFloor());
    // Time alone can fire or resolve an alert (forSeconds), with or without traffic.
    this.ticker = setInterval(() => this.advance(tick(this.detector, config.alert, this.now())), 1000);
    this.ticker.unref();
  }

  /** The noise floor in force: the configured one, or the calibrated one for `auto`. */
  noiseFloor(): number {
    const f = this.deps.config.analysis.noiseFloor;
    return f === 'auto' ? this.calibration.autoFloor() : f;
  }

  /** The thresholds in force for the next comparison. */
  thresholds(): Thresholds {
    return pickThresholds(this.deps.config.analysis, this.noiseFloor());
  }

  /** The detectors' current state (read-only view for the demo and tests). */
  get detectorState(): Readonly<DetectorState> {
    return this.detector;
  }

  /**
   * Takes an exchange the sampler chose (on the proxy's thread, src/mirror/thread.ts): skipped,
   * dropped or queued. `deps.onSettled` is called once when it is over, whichever way.
   */
  accept(ex: Exchange): void {
    const settle = this.deps.onSettled;
    const count = (outcome: MirrorOutcome, reason?: string | null) => {
      this.deps.metrics.counter('logprobe_mirror_total').inc({ route: ex.route, outcome });
      if (reason) this.log.debug({ reqId: ex.requestId, route: ex.route, reason }, 'mirror skipped');
      settle?.();
    };
    const kind = mirrorKind(ex);
    if (kind === null) {
      count('skipped', skipReason(ex));
      return;
    }
    // A full queue would refuse the copy anyway: drop it before parsing and rewriting the body.
    if (this.queue.full) {
      count('dropped');
      return;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(ex.body.toString('utf8'));
    } catch {
      count('skipped', 'the request body is not JSON');
      return;
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      count('skipped', 'the request body is not a JSON object');
      return;
    }
    const body = rewriteForMirror(kind, parsed as Record<string, unknown>, this.deps.config.mirror);
    let payload: string;
    try {
      // Throws on a body nested deeper than the stack allows (JSON.parse does not).
      payload = JSON.stringify(body);
    } catch {
      count('skipped', 'the rewritten body cannot be serialised (nested too deep)');
      return;
    }
    const accepted = this.queue.push({ id: ex.requestId, route: ex.route, path: ex.path, headers: ex.headers, body, payload, settle });
    if (!accepted) count('dropped');
  }

  /**
   * Sends a mirrored copy to both backends at once, within the logprobs caps learned so far (a
   * backend refusing the copy for asking too many is retried once within its cap: limits.ts).
   * `job.body` becomes what both backends finally got, so the pair records what was sent.
   */
  /** Where a job's copies and scoring calls go: each backend's pool, URL, headers and timeout. */
  private targets(job: Job): Record<Backend, ScoringTarget> {
    const { config } = this.deps;
    return {
      candidate: { pool: this.deps.candidatePool, url: config.candidate.url, headers: mirrorHeaders(job.headers, { role: 'candidate' }), timeoutMs: config.candidate.timeoutMs },
      baseline: {
        pool: this.baselinePool,
        url: config.baseline.url,
        headers: mirrorHeaders(job.headers, { role: 'baseline', apiKey: config.baseline.apiKey, forwardAuth: config.baseline.forwardAuth, forwardHeaders: config.baseline.forwardHeaders }),
        timeoutMs: config.baseline.timeoutMs,
      },
    };
  }

  private async sendPair(job: Job, payload: string, targets: Record<Backend, ScoringTarget>): Promise<[BackendResult, BackendResult]> {
    const { config } = this.deps;
    // Fields an engine profile adds so its answer names the generated token ids (vLLM, SGLang).
    const [cExtra, bExtra] = await Promise.all([this.scorer.copyParams('candidate', targets.candidate), this.scorer.copyParams('baseline', targets.baseline)]);
    const sent = await sendWithinLimits({
      body: job.body,
      payload,
      limits: this.limits,
      send: (backend, p) =>
        backend === 'candidate'
          ? callBackend(this.deps.candidatePool, config.candidate, job.path, targets.candidate.headers as Record<string, string>, withCopyParams(p, cExtra))
          : callBackend(this.baselinePool, config.baseline, job.path, targets.baseline.headers as Record<string, string>, withCopyParams(p, bExtra)),
      onLearned: (backend, field, cap, requested) =>
        this.log.info({ backend, field, limit: cap, requested }, `${backend} caps ${field} at ${cap}: mirrored copies now ask for at most ${cap}`),
    });
    job.body = sent.body;
    return [sent.candidate, sent.baseline];
  }

  private async process(job: Job): Promise<void> {
    const { metrics } = this.deps;
    const payload = job.payload;
    const targets = this.targets(job);
    const [cand, base] = await this.sendPair(job, payload, targets);
    const dur = metrics.histogram('logprobe_upstream_duration_seconds');
    dur.observe({ backend: 'candidate', route: job.route }, cand.latencyMs / 1000);
    dur.observe({ backend: 'baseline', route: job.route }, base.latencyMs / 1000);

    const floor = this.noiseFloor();
    let outcome: MirrorOutcome;
    let analysis: Comparison | null = null;
    if (cand.error !== null || cand.status >= 400) outcome = 'candidate_error';
    else if (base.error !== null || base.status >= 400) outcome = 'baseline_error';
    else {
      const pc = parseResponse(cand.body);
      const pb = parseResponse(base.body);
      if (pc.format === 'unknown' || pb.format === 'unknown' || pc.format === 'error' || pb.format === 'error') outcome = 'unparseable';
      else {
        const t = pickThresholds(this.deps.config.analysis, floor);
        analysis = compare(pc, pb, t);
        outcome = analysis.verdict === 'incomparable' ? 'incomparable' : 'ok';
        if (outcome === 'ok') {
          const kind = requestKind(job.path) ?? 'completions';
          const scoring = await scoreComparison(this.scorer, { source: { kind, body: job.body }, free: analysis, baseline: { parsed: pb, body: base.body }, targets, thresholds: t, busy: this.queue.depth >= Math.max(1, this.deps.config.mirror.queueSize / 2) });
          if (scoring.counted) metrics.counter('logprobe_scoring_total').inc({ route: job.route, outcome: scoring.outcome });
          if (scoring.outcome === 'failed') this.log.warn({ reqId: job.id, reason: scoring.reason }, 'scoring failed');
          analysis = scoring.comparison;
        }
        recordComparison(metrics, job.route, analysis);
        if (analysis.verdict !== 'incomparable' && analysis.comparable > 0) {
          this.advance(observe(this.detector, { ...detectorEvidence(analysis), noiseFloor: floor, requestId: job.id }, this.deps.config.alert, this.now()));
        }
      }
    }
    metrics.counter('logprobe_mirror_total').inc({ route: job.route, outcome });
    if (outcome !== 'ok') this.log.debug({ reqId: job.id, outcome, candidateStatus: cand.status, baselineStatus: base.status, candidateError: cand.error, baselineError: base.error }, 'mirror pair not compared');

    const pair: MirroredPair = {
      id: job.id,
      ts: new Date().toISOString(),
      route: job.route,
      path: job.path,
      request: job.body,
      clientHeaders: job.headers,
      candidate: cand,
      baseline: base,
      outcome,
      analysis,
      noiseFloor: floor,
    };
    try {
      this.deps.listeners?.onPair?.(pair);
    } catch (err) {
      this.log.error({ err }, 'mirror listener failed');
    }

    if (outcome === 'ok' && this.deps.config.calibration.rate > 0 && this.random() < this.deps.config.calibration.rate) {
      await this.calibrate(job, cand, base);
    }
  }

  /** Sends the same copy again to each backend; the shift between the two runs is noise. */
  private async calibrate(job: Job, cand1: BackendResult, base1: BackendResult): Promise<void> {
    // From job.body, not job.payload: the first send may have lowered it to a learned logprobs
    // cap, and the second run must ask for what the first one got.
    const [cand2, base2] = await this.sendPair(job, JSON.stringify(job.body), this.targets(job));
    const t = this.thresholds();
    for (const [backend, first, second] of [
      ['candidate', cand1, cand2],
      ['baseline', base1, base2],
    ] as const) {
      if (second.error !== null || second.status >= 400) continue;
      const c = compare(second.body, first.body, t);
      if (c.verdict === 'incomparable') continue;
      this.calibration.add(
        backend,
        c.positions.map((p) => p.shift).filter((s): s is number => s !== null),
      );
      const p99 = this.calibration.p99(backend);
      if (p99 !== null) this.deps.metrics.gauge('logprobe_noise_floor_observed_nats').set({ backend }, p99);
    }
    this.deps.metrics.gauge('logprobe_noise_floor_nats').set(this.noiseFloor());
  }

  private advance(result: { state: DetectorState; transitions: AlertTransition[] }): void {
    this.detector = result.state;
    const { metrics } = this.deps;
    metrics.gauge('logprobe_window_global_shift_ratio').set(pooledShare(this.detector));
    metrics.gauge('logprobe_cusum_statistic').set(this.detector.cusum);
    const firing = metrics.gauge('logprobe_alert_firing');
    firing.set({ alert: 'LogprobGlobalShift' }, this.detector.global.phase === 'firing' || this.detector.global.phase === 'resolving' ? 1 : 0);
    firing.set({ alert: 'LogprobSustainedShift' }, this.detector.sustained.phase === 'firing' || this.detector.sustained.phase === 'resolving' ? 1 : 0);
    for (const t of result.transitions) {
      this.notifier.notify(t);
      try {
        this.deps.listeners?.onAlert?.(t);
      } catch (err) {
        this.log.error({ err }, 'alert listener failed');
      }
    }
  }

  /** Resolves when no mirrored pair is queued or in flight (tests, replay). */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  /**
   * Stops taking copies and lets the queued and running pairs finish (so a graceful stop loses
   * no record), for up to `shutdown.drainSeconds`; what is still queued then is dropped and
   * counted. Closes the baseline pool.
   */
  async close(): Promise<void> {
    clearInterval(this.ticker);
    const dropped = await this.queue.close(this.deps.config.shutdown.drainSeconds * 1000);
    for (const job of dropped) {
      this.deps.metrics.counter('logprobe_mirror_total').inc({ route: job.route, outcome: 'dropped' });
      job.settle?.();
    }
    if (dropped.length > 0) this.log.warn({ dropped: dropped.length }, 'drain time over: queued mirror pairs dropped');
    await this.queue.idle();
    await this.notifier.flush();
    if (this.ownsBaselinePool) await this.baselinePool.close();
  }
}


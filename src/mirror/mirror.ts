import type { Dispatcher, Pool } from 'undici';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import {
  compare,
  detectorEvidence,
  pickThresholds,
  type Comparison,
  type ParsedResponse,
  type Thresholds,
} from '../core/index.js';
import { classifyPair } from '../core/pair.js';
import {
  initialDetectorState,
  observe as observeDetector,
  pooledShare,
  tick,
  type AlertPhase,
  type AlertTransition,
  type DetectorState,
} from '../core/detector.js';
import type { Metrics } from '../metrics/registry.js';
import { redactionOf, type Redaction } from '../log/redact.js';
import { scrubFields } from '../log/logger.js';
import type { Exchange } from '../proxy/tap.js';
import { createUpstreamPool } from '../backend/pool.js';
import { Calibration } from './calibration.js';
import { PermutationWindow } from '../core/permutation.js';
import { callBackend, mirrorHeaders, type BackendResult } from '../backend/dispatch.js';
import { LogprobLimits, sendOneWithinLimits, sendWithinLimits } from '../backend/limits.js';
import { repeatOnce, type RepeatPair } from '../pair/repeat.js';
import { bothCold, CacheCounts, observeSelf, selfEvidence, tickSelf } from '../core/self.js';
import { AlertNotifier, generatorUrl } from './notify.js';
import { WorkQueue } from './queue.js';
import { recordComparison } from './record.js';
import { mirrorKind, requestKind, rewriteForMirror, skipReason } from '../backend/rewrite.js';
import { Scorer, scoreComparison, scoringOptions, withCopyParams, type Backend } from '../pair/score.js';
import type { ScoringTarget } from '../backend/http.js';
import { ENGINE_NAMES } from '../metrics/labels.js';
import type { MirroredPair, MirrorListeners, MirrorOutcome } from '../pair/types.js';
import { failureReason } from '../backend/failure.js';
import type { BackendHealth } from '../backend/health.js';

/** Which backends a job probes with a repeat (cold → warm), and whether their caches are emptied first. */
interface RepeatPlan {
  backends: Backend[];
  flush: boolean;
}

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
  /** Each backend's state: failed copies are logged there, rate-limited, with the cause (src/backend/health.ts). */
  health?: BackendHealth;
}

/** The baseline's own connection pool, or null when there is no baseline (config.baseline.url null). */
function createBaselinePool(deps: MirrorDeps): Pool | null {
  const { config } = deps;
  const baselineUrl = config.baseline.url;
  return baselineUrl === null
    ? null
    : createUpstreamPool(
        { ...config.baseline, url: baselineUrl },
        {
          tlsInsecure: config.tlsInsecure,
          connections: config.mirror.concurrency * 2,
          maxHeaderSize: config.limits.maxHeaderKB * 1024,
          onConnections: (delta) => deps.metrics.connections('baseline', delta),
        },
      );
}

/**
 * The mirror, in its worker thread: takes the exchanges the proxy's thread sampled, rewrites them
 * to greedy + logprobs, sends the copy to candidate and baseline, compares, exports, detects, and
 * hands each pair to listeners. Everything happens after the client's response and off its
 * thread; a full queue drops the copy.
 */
export class Mirror {
  private readonly queue: WorkQueue<Job>;
  /** The baseline's pool; null in baseline-free mode (`baseline: null`). */
  private readonly baselinePool: Pool | null;
  private readonly ownsBaselinePool: boolean;
  private readonly calibration: Calibration;
  private readonly notifier: AlertNotifier;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly random: () => number;
  private readonly ticker: NodeJS.Timeout;
  private detector: DetectorState = initialDetectorState();
  /** The permutation test beside the alerts (src/core/permutation.ts): its p-value is a gauge and on /ui. */
  readonly permutation: PermutationWindow;
  /** The self-consistency detectors, one per backend probed with repeats. */
  private readonly selfDetectors: Record<Backend, DetectorState> = {
    candidate: initialDetectorState(),
    baseline: initialDetectorState(),
  };
  /** The logprobs caps the backends told us about (limits.ts). */
  private readonly limits = new LogprobLimits();
  /** Teacher-forced scoring through each backend's engine profile (src/scoring). */
  private readonly scorer: Scorer;
  /** Which backends report their cache hits (a missing count then means 0). */
  private readonly cacheCounts = new CacheCounts();
  /** Backends whose repeat probes were said once to probe nothing (the log line is written once). */
  private readonly unprobedSaid = new Set<Backend>();
  /** What a line about one request is scrubbed of (src/log/redact.ts): the captures' rule. */
  private readonly redaction: Redaction;

  constructor(private readonly deps: MirrorDeps) {
    const { config } = deps;
    this.log = deps.logger.child({ module: 'mirror' });
    this.redaction = redactionOf(config);
    this.now = deps.now ?? (() => Date.now() / 1000);
    this.random = deps.random ?? Math.random;
    this.ownsBaselinePool = !deps.baselinePool;
    this.baselinePool = deps.baselinePool ?? createBaselinePool(deps);
    this.calibration = new Calibration(config.calibration);
    this.permutation = new PermutationWindow({ window: config.alert.window, ...config.alert.permutation });
    deps.metrics.gauge('logprobe_alert_test_pvalue').set(1);
    this.scorer = this.createScorer();
    this.notifier = new AlertNotifier({
      logger: this.log,
      webhookUrl: config.alert.webhookUrl,
      instance: `${config.listen.host}:${config.listen.port}`,
      generatorUrl: generatorUrl(config),
    });
    const depth = deps.metrics.gauge('logprobe_mirror_queue_depth');
    this.queue = new WorkQueue<Job>({
      concurrency: config.mirror.concurrency,
      size: config.mirror.queueSize,
      run: (job) =>
        this.process(job)
          .catch((err: unknown) => this.log.error(this.jobFields(job, { err, reqId: job.id }), 'mirror pair failed'))
          .finally(() => job.settle?.()),
      onDepth: (d) => depth.set(d),
    });
    // The series of every known label value exist at 0 from the start (src/metrics/registry.ts).
    deps.metrics.gauge('logprobe_noise_floor_nats').set(this.noiseFloor());
    // Time alone can fire or resolve an alert (forSeconds), with or without traffic.
    this.ticker = setInterval(() => {
      this.advance(tick(this.detector, config.alert, this.now()));
      for (const b of ['candidate', 'baseline'] as const)
        this.advanceSelf(b, tickSelf(this.selfDetectors[b], config.alert, this.now(), b));
    }, 1000);
    this.ticker.unref();
  }

  /** The scorer, which logs each backend's engine profile and the logprobs caps it learns, and counts them. */
  private createScorer(): Scorer {
    const { config } = this.deps;
    return new Scorer(scoringOptions(config), {
      onProfile: (backend, profile, evidence) => {
        const g = this.deps.metrics.gauge('logprobe_engine_profile');
        for (const p of ENGINE_NAMES) g.set({ backend, profile: p }, p === profile ? 1 : 0);
        this.log.info({ backend, profile, evidence }, `${backend} engine profile: ${profile} (${evidence})`);
      },
      onCap: (backend, field, cap, requested, learned) => {
        this.deps.metrics.counter('logprobe_logprobs_capped_total').inc({ backend, field });
        if (learned)
          this.log.info(
            { backend, field, limit: cap, requested },
            `${backend} caps ${field} at ${cap}: scoring now asks for at most ${cap} alternatives`,
          );
      },
    });
  }

  /** Log fields about one job, scrubbed of the secret values its request carried (an upstream's error may quote them). */
  private jobFields(job: Job, fields: Record<string, unknown>): Record<string, unknown> {
    return scrubFields(fields, this.redaction, this.redaction.secrets(job.headers));
  }

  /** The noise floor in force: the configured one, or the calibrated one for `auto`. */
  noiseFloor(): number {
    const f = this.deps.config.analysis.noiseFloor;
    return f === 'auto' ? this.calibration.autoFloor() : f === 'exact' ? 0 : f;
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
   * Takes an exchange the sampler chose (on the proxy's thread, src/worker/thread.ts): skipped,
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
    const accepted = this.queue.push({
      id: ex.requestId,
      route: ex.route,
      path: ex.path,
      headers: ex.headers,
      body,
      payload,
      settle,
    });
    if (!accepted) count('dropped');
  }

  /** Where a job's copies and scoring calls go: each backend's pool, URL, headers and timeout. */
  private targets(job: Job): Record<Backend, ScoringTarget> {
    const { config } = this.deps;
    const secrets = this.redaction.secrets(job.headers);
    return {
      candidate: {
        pool: this.deps.candidatePool,
        url: config.candidate.url,
        headers: mirrorHeaders(job.headers, { role: 'candidate' }),
        timeoutMs: config.candidate.timeoutMs,
        model: config.candidate.model,
        adminApiKey: config.candidate.adminApiKey,
        secrets,
      },
      baseline: {
        // Baseline-free: never called (no copy, no scoring goes to a baseline that is not there).
        pool: this.baselinePool ?? this.deps.candidatePool,
        url: config.baseline.url ?? config.candidate.url,
        headers: mirrorHeaders(job.headers, {
          role: 'baseline',
          apiKey: config.baseline.apiKey,
          forwardAuth: config.baseline.forwardAuth,
          forwardHeaders: config.baseline.forwardHeaders,
        }),
        timeoutMs: config.baseline.timeoutMs,
        model: config.baseline.model,
        adminApiKey: config.baseline.adminApiKey,
        secrets,
      },
    };
  }

  /**
   * Sends a mirrored copy to both backends at once, within the logprobs caps learned so far (a
   * backend refusing the copy for asking too many is retried once within its cap: limits.ts).
   * `job.body` becomes what both backends finally got, so the pair records what was sent.
   */
  private async sendPair(
    job: Job,
    payload: string,
    targets: Record<Backend, ScoringTarget>,
  ): Promise<[BackendResult, BackendResult]> {
    const { config } = this.deps;
    // Fields an engine profile adds so its answer names the generated token ids (vLLM, SGLang).
    const [cExtra, bExtra] = await Promise.all([
      this.scorer.copyParams('candidate', targets.candidate),
      this.scorer.copyParams('baseline', targets.baseline),
    ]);
    const sent = await sendWithinLimits({
      body: job.body,
      payload,
      limits: this.limits,
      send: (backend, p) =>
        backend === 'candidate'
          ? callBackend(
              this.deps.candidatePool,
              config.candidate,
              job.path,
              targets.candidate.headers as Record<string, string>,
              withCopyParams(p, cExtra),
            )
          : callBackend(
              targets.baseline.pool,
              { ...config.baseline, url: targets.baseline.url },
              job.path,
              targets.baseline.headers as Record<string, string>,
              withCopyParams(p, bExtra),
            ),
      onLearned: (backend, field, cap, requested) =>
        this.log.info(
          { backend, field, limit: cap, requested },
          `${backend} caps ${field} at ${cap}: mirrored copies now ask for at most ${cap}`,
        ),
      onRefused: (backend, field) =>
        this.deps.metrics.counter('logprobe_logprobs_capped_total').inc({ backend, field }),
    });
    job.body = sent.body;
    return [sent.candidate, sent.baseline];
  }

  /** Sends the copy to one backend alone, within its logprobs cap (baseline-free mode, repeats). */
  private async sendOne(job: Job, backend: Backend, targets: Record<Backend, ScoringTarget>): Promise<BackendResult> {
    const { config } = this.deps;
    const extra = await this.scorer.copyParams(backend, targets[backend]);
    const t = targets[backend];
    const upstream = backend === 'candidate' ? config.candidate : { ...config.baseline, url: t.url };
    const sent = await sendOneWithinLimits(
      {
        body: job.body,
        limits: this.limits,
        send: (_b, p) =>
          callBackend(t.pool, upstream, job.path, t.headers as Record<string, string>, withCopyParams(p, extra)),
        onLearned: (b, field, cap, requested) =>
          this.log.info(
            { backend: b, field, limit: cap, requested },
            `${b} caps ${field} at ${cap}: mirrored copies now ask for at most ${cap}`,
          ),
        onRefused: (b, field) => this.deps.metrics.counter('logprobe_logprobs_capped_total').inc({ backend: b, field }),
      },
      backend,
    );
    job.body = sent.body;
    return sent.result;
  }

  /**
   * Which backends this job probes with a repeat (cold → warm), and whether their caches are
   * emptied first; none for most jobs. Baseline-free, every mirrored request is a probe of the
   * candidate (there is nothing else to compare).
   */
  private repeatPlan(): RepeatPlan | null {
    const r = this.deps.config.mirror.repeat;
    if (this.baselinePool === null) return { backends: ['candidate'], flush: r.flush };
    if (r.rate <= 0 || this.random() >= r.rate) return null;
    return { backends: [...new Set(r.backends)], flush: r.flush };
  }

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

  /**
   * A pair's way through the mirror, one named step each: the caches emptied first (a repeat with
   * `flush`), send, classify ({@link classifyPair}, as `analyze` and `replay` do), score, observe,
   * repeats, emit; then, for a share of compared pairs, calibration.
   */
  private async run(job: Job, plan: RepeatPlan | null): Promise<void> {
    const targets = this.targets(job);
    const flushErrors = plan?.flush ? await this.flushFirst(job, plan.backends, targets) : new Map<Backend, string>();
    const [cand, base] = await this.send(job, targets);
    const floor = this.noiseFloor();
    const t = pickThresholds(this.deps.config.analysis, floor);
    const classed = classifyPair(cand, base, t);
    let analysis = classed.comparison;
    if (analysis !== null && classed.outcome === 'ok')
      analysis = await this.score(job, analysis, { parsed: classed.baseline!, body: base!.body }, targets, t);
    if (analysis !== null) this.observe(job, analysis, floor);
    const repeats = plan
      ? await this.repeats(job, plan, { candidate: cand, baseline: base }, flushErrors, targets, t)
      : [];
    // Baseline-free, the repeat is the comparison: a second run that failed leaves nothing compared.
    const outcome: MirrorOutcome =
      base === null && repeats[0]?.verdict === null && classed.outcome === 'ok' ? 'candidate_error' : classed.outcome;
    this.emit(job, { candidate: cand, baseline: base, outcome, analysis, noiseFloor: floor, repeats });
    const rate = this.deps.config.calibration.rate;
    if (outcome === 'ok' && rate > 0 && this.random() < rate) await this.calibrate(job, cand, base, targets);
  }

  /** Empties the caches of the backends a repeat probes, so the first run is cold; what failed is kept (the probe is then not `flushed`). */
  private async flushFirst(
    job: Job,
    backends: readonly Backend[],
    targets: Record<Backend, ScoringTarget>,
  ): Promise<Map<Backend, string>> {
    const errors = new Map<Backend, string>();
    for (const b of backends) {
      try {
        await this.scorer.flush(b, targets[b]);
      } catch (err) {
        errors.set(b, (err as Error).message);
        this.log.debug(
          this.jobFields(job, { reqId: job.id, backend: b, err }),
          'cache flush before a repeat failed: the first run may be warm',
        );
      }
    }
    return errors;
  }

  /** Step send: the copy to both backends at once (to the candidate alone baseline-free), each one's latency observed. */
  private async send(
    job: Job,
    targets: Record<Backend, ScoringTarget>,
  ): Promise<[BackendResult, BackendResult | null]> {
    const [cand, base] =
      this.baselinePool !== null
        ? await this.sendPair(job, job.payload, targets)
        : [await this.sendOne(job, 'candidate', targets), null];
    const dur = this.deps.metrics.histogram('logprobe_upstream_duration_seconds');
    dur.observe({ backend: 'candidate', route: job.route }, cand.latencyMs / 1000);
    if (base) dur.observe({ backend: 'baseline', route: job.route }, base.latencyMs / 1000);
    return [cand, base];
  }

  /** Step score: teacher-forced scoring past the divergence (src/scoring), counted; the comparison with it. */
  private async score(
    job: Job,
    free: Comparison,
    baseline: { parsed: ParsedResponse; body: unknown },
    targets: Record<Backend, ScoringTarget>,
    t: Thresholds,
  ): Promise<Comparison> {
    const source = { kind: requestKind(job.path) ?? 'completions', body: job.body };
    const scoring = await scoreComparison(this.scorer, {
      source,
      free,
      baseline,
      targets,
      thresholds: t,
      busy: this.busy,
    });
    if (scoring.counted)
      this.deps.metrics.counter('logprobe_scoring_total').inc({ route: job.route, outcome: scoring.outcome });
    if (scoring.outcome === 'failed')
      this.log.warn(this.jobFields(job, { reqId: job.id, reason: scoring.reason }), 'scoring failed');
    return scoring.comparison;
  }

  /** Step observe: a compared pair's metrics, and its evidence to the window and CUSUM detectors. */
  private observe(job: Job, analysis: Comparison, floor: number): void {
    recordComparison(this.deps.metrics, job.route, analysis);
    if (analysis.verdict === 'incomparable' || analysis.comparable === 0) return;
    this.advance(
      observeDetector(
        this.detector,
        { ...detectorEvidence(analysis), noiseFloor: floor, requestId: job.id },
        this.deps.config.alert,
        this.now(),
      ),
    );
    this.permutation.add(analysis);
    this.deps.metrics.gauge('logprobe_alert_test_pvalue').set(this.permutation.pValue());
  }

  /** Step repeats: each probed backend's second run, compared with its first, recorded; in the plan's order. */
  private async repeats(
    job: Job,
    plan: RepeatPlan,
    firsts: Record<Backend, BackendResult | null>,
    flushErrors: ReadonlyMap<Backend, string>,
    targets: Record<Backend, ScoringTarget>,
    t: Thresholds,
  ): Promise<RepeatPair[]> {
    const repeats: RepeatPair[] = [];
    for (const b of plan.backends) {
      const first = firsts[b];
      if (first === null) continue;
      const flushError = flushErrors.get(b);
      const rp = await repeatOnce({
        backend: b,
        first,
        send: () => this.sendOne(job, b, targets),
        flushed: plan.flush && flushError === undefined,
        ...(flushError !== undefined ? { flushError } : {}),
        thresholds: t,
        scorer: this.scorer,
        target: targets[b],
        source: { kind: requestKind(job.path) ?? 'completions', body: job.body },
        busy: this.busy,
        when: this.deps.config.analysis.scoring.when,
        counts: this.cacheCounts,
      });
      repeats.push(rp);
      this.recordRepeat(job, rp, t.noiseFloor);
    }
    return repeats;
  }

  /** Step emit: the outcome counted, each backend's health told, a pair not compared logged, the pair handed to the listeners. */
  private emit(
    job: Job,
    r: Pick<MirroredPair, 'candidate' | 'baseline' | 'outcome' | 'analysis' | 'noiseFloor'> & { repeats: RepeatPair[] },
  ): void {
    const { candidate: cand, baseline: base, outcome, repeats } = r;
    this.deps.metrics.counter('logprobe_mirror_total').inc({ route: job.route, outcome });
    this.tellHealth(job, cand, base, base === null ? repeats[0]?.second : undefined);
    if (outcome !== 'ok') {
      const fields = {
        reqId: job.id,
        outcome,
        candidateStatus: cand.status,
        baselineStatus: base?.status,
        candidateError: cand.error,
        baselineError: base?.error,
      };
      this.log.debug(this.jobFields(job, fields), 'mirror pair not compared');
    }
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
      analysis: r.analysis,
      noiseFloor: r.noiseFloor,
      ...(repeats.length > 0 ? { repeats } : {}),
    };
    try {
      this.deps.listeners?.onPair?.(pair);
    } catch (err) {
      this.log.error({ err }, 'mirror listener failed');
    }
  }

  /** Each side's answer to the health record: a failure (logged rate-limited, with the cause) or a backend that answers. */
  private tellHealth(
    job: Job,
    cand: BackendResult,
    base: BackendResult | null,
    repeat: BackendResult | undefined,
  ): void {
    const h = this.deps.health;
    if (!h) return;
    // The cause is logged and shown on /ui: an answer may quote the request's credentials.
    const secrets = this.redaction.secrets(job.headers);
    const one = (backend: 'candidate' | 'baseline', r: BackendResult) => {
      if (r.error !== null || r.status >= 400)
        h.failed(
          backend,
          `${backend}_error`,
          this.redaction.scrub(failureReason(r), secrets, { byName: false }) as string,
          r.status === 0,
        );
      else h.answered(backend);
    };
    one('candidate', repeat && cand.error === null && cand.status < 400 ? repeat : cand);
    if (base) one('baseline', base);
  }

  /** A repeat pair's metrics, detector and (for the trusted side) calibration. */
  private recordRepeat(job: Job, rp: RepeatPair, floor: number): void {
    const { metrics, config } = this.deps;
    const c = rp.analysis;
    if (c === null || rp.verdict === null) return;
    metrics
      .counter('logprobe_verdicts_total')
      .inc({ route: job.route, verdict: rp.verdict, kind: 'self', backend: rp.backend });
    const h = metrics.histogram('logprobe_self_shift_nats');
    // The runs' own positions (cold vs warm): what the probe measures, and what the floor may learn.
    const shifts = c.positions.map((p) => p.shift);
    for (const s of shifts) if (s !== null && s !== undefined) h.observe({ backend: rp.backend }, s);
    // Only a cold→warm pair says anything about the cache path (as far as the engine tells): a
    // first run that reused a prefix, a second that found it evicted, or a pair of which nothing
    // says whether either touched the cache (`unprobed`), is counted and never seen by the alert.
    metrics.counter('logprobe_self_probes_total').inc({ backend: rp.backend, probe: rp.probe });
    this.cachePathCapability(rp);
    if (rp.probe === 'cold_warm' && c.verdict !== 'incomparable' && c.comparable > 0) {
      this.advanceSelf(
        rp.backend,
        observeSelf(
          this.selfDetectors[rp.backend],
          { ...selfEvidence(c), noiseFloor: floor, requestId: job.id },
          config.alert,
          this.now(),
          rp.backend,
        ),
      );
    }
    // The floor learns from the trusted side only: the baseline's repeats, or (baseline-free) the
    // candidate's when both runs were cold — never the candidate's warm-vs-cold disagreement,
    // which is what a cache bug looks like.
    const trusted = rp.backend === 'baseline' || (this.baselinePool === null && bothCold(rp.counts, rp.confirmedFlush));
    this.calibration.add(
      rp.backend,
      shifts.filter((s): s is number => typeof s === 'number'),
      { trusted },
    );
    this.publishCalibration(rp.backend);
  }

  /**
   * `logprobe_engine_capability{capability="cache_path"}` of a backend from its repeat pairs: 1 once
   * it has reported a cache count or confirmed a flush; 0, said once in the log with the server
   * flag that fixes it, when a pair could not be judged (`unprobed`) and the backend has never
   * reported a count.
   */
  private cachePathCapability(rp: RepeatPair): void {
    const g = this.deps.metrics.gauge('logprobe_engine_capability');
    if (this.cacheCounts.reported(rp.backend) || rp.confirmedFlush) {
      g.set({ backend: rp.backend, capability: 'cache_path' }, 1);
      return;
    }
    if (rp.probe !== 'unprobed') return;
    g.set({ backend: rp.backend, capability: 'cache_path' }, 0);
    if (this.unprobedSaid.has(rp.backend)) return;
    this.unprobedSaid.add(rp.backend);
    void this.scorer
      .profile(rp.backend, this.targetsFor(rp.backend))
      .then(
        (p) => p.name,
        () => null,
      )
      .then((engine) => {
        this.log.warn(
          { backend: rp.backend, engine, fix: unprobedFix(engine) },
          `${rp.backend} cannot probe its cache path: ${unprobedFix(engine)}; its repeat pairs are counted as unprobed and never fed to LogprobSelfInconsistency`,
        );
      });
  }

  /** A backend's scoring target without a job's client headers (for profile lookups). */
  private targetsFor(backend: Backend): ScoringTarget {
    return this.targets({ id: '', route: '', path: '', headers: {}, body: {}, payload: '' })[backend];
  }

  /**
   * Calibration (`calibration.rate`): the same copy again to each backend; the shift between the
   * two runs is run-to-run noise on the trusted side. With a baseline, the baseline's repeat
   * teaches the floor and the candidate's is only observed; baseline-free, the candidate's counts
   * only when both its runs were cold (`mirror.repeat.flush`: its cache emptied before each).
   */
  private async calibrate(
    job: Job,
    cand1: BackendResult,
    base1: BackendResult | null,
    targets: Record<Backend, ScoringTarget>,
  ): Promise<void> {
    const t = this.thresholds();
    let cold = false;
    if (base1 === null && this.deps.config.mirror.repeat.flush) {
      try {
        await this.scorer.flush('candidate', targets.candidate);
        cold = true;
      } catch {
        // Not cold for sure: the candidate's repeat is observed, never trusted.
      }
    }
    // From job.body, not job.payload: the first send may have lowered it to a learned logprobs
    // cap, and the second run must ask for what the first one got.
    const [cand2, base2] =
      base1 === null
        ? [await this.sendOne(job, 'candidate', targets), null]
        : await this.sendPair(job, JSON.stringify(job.body), targets);
    const runs = [['candidate', cand1, cand2, base1 === null && cold]] as Array<
      [Backend, BackendResult, BackendResult, boolean]
    >;
    if (base1 !== null && base2 !== null) runs.push(['baseline', base1, base2, true]);
    for (const [backend, first, second, trusted] of runs) {
      if (second.error !== null || second.status >= 400) continue;
      const c = compare(second.body, first.body, t);
      if (c.verdict === 'incomparable') continue;
      this.calibration.add(
        backend,
        c.positions.map((p) => p.shift).filter((s): s is number => s !== null),
        { trusted },
      );
      this.publishCalibration(backend);
    }
  }

  /** The observed p99 of a backend's repeats and the floor in force, as gauges. */
  private publishCalibration(backend: Backend): void {
    const p99 = this.calibration.p99(backend);
    if (p99 !== null) this.deps.metrics.gauge('logprobe_noise_floor_observed_nats').set({ backend }, p99);
    this.deps.metrics.gauge('logprobe_noise_floor_nats').set(this.noiseFloor());
  }

  private advance(result: { state: DetectorState; transitions: AlertTransition[] }): void {
    this.detector = result.state;
    const { metrics } = this.deps;
    metrics.gauge('logprobe_window_global_shift_ratio').set(pooledShare(this.detector));
    metrics.gauge('logprobe_cusum_statistic').set(this.detector.cusum);
    const firing = metrics.gauge('logprobe_alert_firing');
    firing.set({ alert: 'LogprobGlobalShift' }, firingValue(this.detector.global.phase));
    firing.set({ alert: 'LogprobSustainedShift' }, firingValue(this.detector.sustained.phase));
    this.announce(result.transitions);
  }

  /** A backend's self-consistency detector moved: its alert gauge and transitions. */
  private advanceSelf(backend: Backend, result: { state: DetectorState; transitions: AlertTransition[] }): void {
    this.selfDetectors[backend] = result.state;
    this.deps.metrics
      .gauge('logprobe_alert_firing')
      .set({ alert: 'LogprobSelfInconsistency', backend }, firingValue(result.state.global.phase));
    this.announce(result.transitions);
  }

  private announce(transitions: readonly AlertTransition[]): void {
    for (const t of transitions) {
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

  /** The admin server listens on `port` (0 in the config: known only now): alerts link to its live page. */
  setAdminPort(port: number): void {
    this.notifier.setGeneratorUrl(generatorUrl(this.deps.config, port));
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
    if (this.ownsBaselinePool) await this.baselinePool?.close();
  }
}

/** `logprobe_alert_firing`'s value in an alert's phase: 1 from firing until it has resolved (`resolving` still fires), else 0. */
function firingValue(phase: AlertPhase): 0 | 1 {
  return phase === 'firing' || phase === 'resolving' ? 1 : 0;
}

/** What makes a backend's repeat pairs judgeable, by engine: the server flag that reports its cache hits. */
export function unprobedFix(engine: string | null): string {
  if (engine === 'vllm')
    return 'the engine reports no cache hits and its /reset_prefix_cache 200 does not prove the cache was emptied (vLLM does not check): start vLLM with --enable-prompt-tokens-details';
  if (engine === 'sglang')
    return 'the engine reports no cache hits and no flush succeeded: start SGLang with --enable-cache-report (and set mirror.repeat.flush with the admin key, candidate.adminApiKey, where --admin-api-key is set)';
  return 'the engine reports no cache hits (usage.prompt_tokens_details.cached_tokens) and no flush was confirmed';
}

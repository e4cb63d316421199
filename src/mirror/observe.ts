import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { Backend } from '../core/types.js';
import { bothCold } from '../core/self.js';
import type { Metrics } from '../metrics/registry.js';
import { ENGINE_NAMES } from '../metrics/labels.js';
import type { Redaction } from '../log/redact.js';
import { scrubFields } from '../log/logger.js';
import type { BackendHooks, Backends } from '../backend/client.js';
import type { BackendResult } from '../backend/dispatch.js';
import { failureReason } from '../backend/failure.js';
import type { BackendHealth } from '../backend/health.js';
import type { PairRun } from '../pair/pipeline.js';
import type { RepeatPair } from '../pair/repeat.js';
import type { PathPair } from '../core/path.js';
import type { CacheCounts } from '../core/self.js';
import type { MirrorCalibration } from './calibration.js';
import type { MirrorDetectors } from './detectors.js';
import { recordComparison } from './record.js';

/** A mirrored job as the observer sees it: its id, route label, model slice, and the client request's secrets. */
export interface ObservedJob {
  id: string;
  route: string;
  /** Its model slice (src/core/slice.ts): the detectors, calibration and labels it counts in. */
  model: string;
  /** Credential values of the client's request: a cause logged or shown may quote them. */
  secrets: readonly string[];
}

/**
 * What the mirror learns from one pair, once the pipeline has run it: the latency, scoring and
 * verdict metrics, the detectors' evidence, each repeat's metrics, self-consistency evidence and
 * (on the trusted side) calibration, each backend's cache-path capability, and each backend's
 * health (a failed answer logged, rate-limited, with its cause).
 */
export class PairObserver {
  /** Backends whose repeat probes were said once to probe nothing (the log line is written once). */
  private readonly unprobedSaid = new Set<Backend>();

  constructor(
    private readonly deps: {
      config: Config;
      metrics: Metrics;
      log: Logger;
      redaction: Redaction;
      backends: Backends;
      counts: CacheCounts;
      detectors: MirrorDetectors;
      calibration: MirrorCalibration;
      health: BackendHealth | undefined;
    },
  ) {}

  /** `floor`: the slice's pair floor in force; `pathFloor`: the floor its path pairs were counted against. */
  observe(job: ObservedJob, run: PairRun, floor: number, pathFloor: number): void {
    const { metrics } = this.deps;
    const dur = metrics.histogram('logprobe_upstream_duration_seconds');
    dur.observe({ backend: 'candidate', route: job.route }, run.candidate.latencyMs / 1000);
    if (run.baseline) dur.observe({ backend: 'baseline', route: job.route }, run.baseline.latencyMs / 1000);
    for (const [backend, err] of run.flushErrors)
      this.deps.log.debug(
        this.fields(job, { reqId: job.id, backend, err }),
        'cache flush before a repeat failed: the first run may be warm',
      );
    if (run.scoring?.counted)
      metrics.counter('logprobe_scoring_total').inc({ route: job.route, outcome: run.scoring.outcome });
    if (run.scoring?.outcome === 'failed')
      this.deps.log.warn(this.fields(job, { reqId: job.id, reason: run.scoring.reason }), 'scoring failed');
    const analysis = run.result.comparison;
    if (analysis !== null) {
      recordComparison(metrics, { route: job.route, model: job.model, cache: run.cache }, analysis);
      // Two sides that read different prompts say nothing about the server's numerics: they count
      // in the prompt-mismatch window only, never as a shift or a clean pair of the pair detectors.
      const mismatched = analysis.verdict === 'prompt_mismatch';
      if (analysis.verdict !== 'incomparable') this.deps.detectors.observePrompt(job.model, job.id, mismatched);
      if (!mismatched && analysis.verdict !== 'incomparable' && analysis.comparable > 0)
        this.deps.detectors.observePair(job.model, job.id, analysis, floor);
    }
    for (const rp of run.repeats) this.observeRepeat(job, rp, floor);
    for (const pp of run.paths) this.observePath(job, pp, pathFloor);
    this.recordHealth(job, run);
  }

  /** Log fields about one job, scrubbed of the secret values its request carried (an upstream's error may quote them). */
  private fields(job: ObservedJob, fields: Record<string, unknown>): Record<string, unknown> {
    return scrubFields(fields, this.deps.redaction, job.secrets);
  }

  /** A repeat pair's metrics, its self-consistency detector and (for the trusted side) calibration. */
  private observeRepeat(job: ObservedJob, rp: RepeatPair, floor: number): void {
    const { metrics } = this.deps;
    const c = rp.analysis;
    if (c === null || rp.verdict === null) return;
    metrics
      .counter('logprobe_verdicts_total')
      .inc({ route: job.route, verdict: rp.verdict, kind: 'self', backend: rp.backend, model: job.model });
    const h = metrics.histogram('logprobe_self_shift_nats');
    // The runs' own positions (cold vs warm): what the probe measures, and what the floor may learn.
    const shifts = c.positions.map((p) => p.shift);
    for (const s of shifts) if (s !== null && s !== undefined) h.observe({ backend: rp.backend }, s);
    // Only a cold→warm pair says anything about the cache path (as far as the engine tells): a
    // first run that reused a prefix, a second that found it evicted, or a pair of which nothing
    // says whether either touched the cache (`unprobed`), is counted and never seen by the alert.
    metrics.counter('logprobe_self_probes_total').inc({ backend: rp.backend, probe: rp.probe });
    this.cachePathCapability(rp);
    if (rp.probe === 'cold_warm' && c.verdict !== 'incomparable' && c.comparable > 0)
      this.deps.detectors.observeRepeat(job.model, rp.backend, job.id, c, floor);
    // The floor learns from the trusted side only: the baseline's repeats, or (baseline-free) the
    // candidate's when both runs were cold — never the candidate's warm-vs-cold disagreement,
    // which is what a cache bug looks like.
    const trusted =
      rp.backend === 'baseline' || (this.deps.backends.baseline === null && bothCold(rp.counts, rp.confirmedFlush));
    this.deps.calibration.add(
      job.model,
      rp.backend,
      shifts.filter((s): s is number => typeof s === 'number'),
      trusted,
    );
  }

  /** A path pair's metrics, its backend's path detector in the slice, and (the trusted side's) the `auto` path floor. */
  private observePath(job: ObservedJob, pp: PathPair, floor: number): void {
    const { metrics } = this.deps;
    metrics.counter('logprobe_path_checks_total').inc({ backend: pp.backend, outcome: pp.outcome });
    if (pp.outcome === 'failed')
      this.deps.log.warn(
        this.fields(job, { reqId: job.id, backend: pp.backend, reason: pp.reason }),
        'path check failed',
      );
    const c = pp.analysis;
    if (c === null || pp.verdict === null) return;
    metrics
      .counter('logprobe_verdicts_total')
      .inc({ route: job.route, verdict: pp.verdict, kind: 'path', backend: pp.backend, model: job.model });
    const h = metrics.histogram('logprobe_path_shift_nats');
    const shifts = c.shifts.filter((s): s is number => s !== null);
    for (const s of shifts) h.observe({ backend: pp.backend }, s);
    if (c.verdict !== 'incomparable' && c.comparable > 0)
      this.deps.detectors.observePath(job.model, pp.backend, job.id, c, floor);
    this.deps.calibration.addOwn('path', job.model, pp.backend, shifts, pp.backend === 'baseline');
  }

  /**
   * `logprobe_engine_capability{capability="cache_path"}` of a backend from its repeat pairs: 1 once
   * it has reported a cache count or confirmed a flush; 0, said once in the log with the server
   * flag that fixes it, when a pair could not be judged (`unprobed`) and the backend has never
   * reported a count.
   */
  private cachePathCapability(rp: RepeatPair): void {
    const g = this.deps.metrics.gauge('logprobe_engine_capability');
    if (this.deps.counts.reported(rp.backend) || rp.confirmedFlush) {
      g.set({ backend: rp.backend, capability: 'cache_path' }, 1);
      return;
    }
    if (rp.probe !== 'unprobed') return;
    g.set({ backend: rp.backend, capability: 'cache_path' }, 0);
    if (this.unprobedSaid.has(rp.backend)) return;
    this.unprobedSaid.add(rp.backend);
    void this.deps.backends
      .side(rp.backend)
      .profile()
      .then(
        (p) => p.name,
        () => null,
      )
      .then((engine) => {
        this.deps.log.warn(
          { backend: rp.backend, engine, fix: unprobedFix(engine) },
          `${rp.backend} cannot probe its cache path: ${unprobedFix(engine)}; its repeat pairs are counted as unprobed and never fed to LogprobSelfInconsistency`,
        );
      });
  }

  /** Each side's answer to the health record: a failure (logged rate-limited, with the cause) or a backend that answers. */
  private recordHealth(job: ObservedJob, run: PairRun): void {
    const h = this.deps.health;
    if (!h) return;
    const { candidate: cand, baseline: base } = run;
    // Baseline-free, the repeat's second run speaks for the candidate when its first answered.
    const repeat = base === null ? run.repeats[0]?.second : undefined;
    const record = (backend: Backend, r: BackendResult) => {
      if (r.error !== null || r.status >= 400)
        h.failed(
          backend,
          `${backend}_error`,
          // The cause is logged and shown on /ui: an answer may quote the request's credentials.
          this.deps.redaction.scrub(failureReason(r), job.secrets, { byName: false }) as string,
          r.status,
        );
      else h.answered(backend);
    };
    record('candidate', repeat && cand.error === null && cand.status < 400 ? repeat : cand);
    if (base) record('baseline', base);
  }
}

/** The backend hooks of the mirror: each engine profile and logprobs cap learned, logged and counted. */
export function mirrorBackendHooks(metrics: Metrics, log: Logger): BackendHooks {
  return {
    onProfile: (backend, profile, evidence) => {
      const g = metrics.gauge('logprobe_engine_profile');
      for (const p of ENGINE_NAMES) g.set({ backend, profile: p }, p === profile ? 1 : 0);
      log.info({ backend, profile, evidence }, `${backend} engine profile: ${profile} (${evidence})`);
    },
    onScoringCap: (backend, field, cap, requested, learned) => {
      metrics.counter('logprobe_logprobs_capped_total').inc({ backend, field });
      if (learned)
        log.info(
          { backend, field, limit: cap, requested },
          `${backend} caps ${field} at ${cap}: scoring now asks for at most ${cap} alternatives`,
        );
    },
    onCopyCapLearned: (backend, field, cap, requested) =>
      log.info(
        { backend, field, limit: cap, requested },
        `${backend} caps ${field} at ${cap}: mirrored copies now ask for at most ${cap}`,
      ),
    onCopyRefused: (backend, field) => metrics.counter('logprobe_logprobs_capped_total').inc({ backend, field }),
  };
}

/** What makes a backend's repeat pairs judgeable, by engine: the server flag that reports its cache hits. */
export function unprobedFix(engine: string | null): string {
  if (engine === 'vllm')
    return 'the engine reports no cache hits and its /reset_prefix_cache 200 does not prove the cache was emptied (vLLM does not check): start vLLM with --enable-prompt-tokens-details';
  if (engine === 'sglang')
    return 'the engine reports no cache hits and no flush succeeded: start SGLang with --enable-cache-report (and set mirror.repeat.flush with the admin key, candidate.adminApiKey, where --admin-api-key is set)';
  return 'the engine reports no cache hits (usage.prompt_tokens_details.cached_tokens) and no flush was confirmed';
}

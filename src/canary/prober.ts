import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { requestJson } from '../backend/http.js';
import { formatNats, type Thresholds } from '../core/index.js';
import type { CanaryOutcome } from '../metrics/catalog.js';
import type { Metrics } from '../metrics/registry.js';
import type { Mirror } from '../mirror/mirror.js';
import type { MirroredPair } from '../pair/types.js';
import { loadGolden } from '../replay/golden.js';
import { ConfigError } from '../errors/index.js';
import { loadProbes, probeCopy, type CanaryProbe } from './probes.js';
import { CanaryRunner, estimateTokens, judgeRound, type CanaryPair } from './runner.js';

/** What the prober needs from the worker: the config, the mirror it sends through, and the client path's load. */
export interface CanaryProberDeps {
  config: Config;
  mirror: Mirror;
  metrics: Metrics;
  log: Logger;
  /** Requests the client path has in flight to the candidate now (the proxy's thread tells the worker). */
  candidateInFlight: () => number;
  /** Milliseconds (injectable for tests). */
  now?: () => number;
  random?: () => number;
}

const HOUR_MS = 3_600_000;

/**
 * Reads `canary.probes` and `canary.reference` once before `serve` listens (and for
 * `--check-config`): a missing file or a bad line refuses the start in one line naming the key.
 */
export async function checkCanaryFiles(config: Config): Promise<void> {
  const c = config.canary;
  if (!c.enabled) return;
  try {
    await loadProbes(c.probes);
  } catch (err) {
    throw new ConfigError([`canary.probes: ${(err as Error).message}`]);
  }
  if (c.reference === null) return;
  let records = 0;
  try {
    records = (await loadGolden(c.reference)).records;
  } catch (err) {
    throw new ConfigError([`canary.reference: ${(err as Error).message}`]);
  }
  if (records === 0)
    throw new ConfigError([
      `canary.reference: ${c.reference} holds no golden record (write it with logprobe record PROBES --backend TRUSTED --out FILE)`,
    ]);
}

/**
 * `serve`'s canaries (config `canary`): once per `intervalSeconds` (± `jitterSeconds`) the probe
 * set goes, probe after probe, through the mirror's own pair pipeline — to the candidate and the
 * baseline, or to the candidate alone against a recorded reference — for each model probed; the
 * round is judged (src/canary/runner.ts `judgeRound`) and handed to the mirror (metrics, capture,
 * the live page, LogprobCanaryShift). It needs no client traffic. Two limits, each counted in
 * `logprobe_canary_probes_total{outcome}`: a probe that would take the last hour's tokens past
 * `tokensPerHour` is not sent (nor the rest of its round), and a round stops at once while the
 * client path has more than `maxCandidateInFlight` requests in flight to the candidate.
 */
export class CanaryProber {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> = Promise.resolve();
  private closed = false;
  private round = 0;
  private readonly spent: Array<{ at: number; tokens: number }> = [];
  /** Each probe's cost bound (both sides: prompt tokens as last reported + the tokens asked), by probe and model: what the budget checks next time. */
  private readonly cost = new Map<string, number>();
  private runner: CanaryRunner | null = null;
  private probes: CanaryProbe[] = [];
  private models: Array<string | null> | null = null;
  private budgetSaidAt = -Infinity;
  private readonly now: () => number;
  private readonly random: () => number;

  constructor(private readonly deps: CanaryProberDeps) {
    this.now = deps.now ?? Date.now;
    this.random = deps.random ?? Math.random;
  }

  /** Loads the probe set (and the reference), then schedules the first round within one jitter. A bad file throws. */
  async start(): Promise<void> {
    const c = this.deps.config.canary;
    this.probes = await loadProbes(c.probes);
    const reference = c.reference === null ? null : await loadGolden(c.reference);
    if (reference !== null && reference.records === 0)
      throw new Error(`canary.reference: ${c.reference} holds no golden record`);
    this.runner = new CanaryRunner({
      pipeline: this.deps.mirror.pairPipeline,
      reference,
      copy: { ...this.deps.config.mirror, maxTokens: c.maxTokens, topLogprobs: c.topLogprobs },
      // The trusted side's own run-to-run spread on each probe, for the spread test: the same
      // judgement as `canary check` (one more run of the trusted side per probe).
      self: true,
    });
    this.deps.log.info(
      {
        probes: this.probes.length,
        file: c.probes ?? 'built-in',
        intervalSeconds: c.intervalSeconds,
        against: reference ? c.reference : 'baseline',
      },
      `canaries on: ${this.probes.length} probes (${c.probes ?? 'the built-in set'}) every ${c.intervalSeconds} s against ${reference ? `the reference ${c.reference}` : 'the baseline'}, within ${c.tokensPerHour} tokens an hour`,
    );
    this.schedule(this.random() * c.jitterSeconds * 1000);
  }

  private schedule(delayMs: number): void {
    if (this.closed) return;
    this.timer = setTimeout(() => {
      this.running = this.roundOnce()
        .catch((err: unknown) => this.deps.log.error({ err }, 'canary round failed'))
        .finally(() => {
          const c = this.deps.config.canary;
          const jitter = (this.random() * 2 - 1) * c.jitterSeconds;
          this.schedule(Math.max(0, c.intervalSeconds + jitter) * 1000);
        });
    }, delayMs);
    this.timer.unref();
  }

  /** One round now: every model probed with the whole set, each judged and observed. */
  async roundOnce(): Promise<void> {
    const round = ++this.round;
    for (const model of await this.modelsProbed()) {
      if (this.closed) return;
      await this.roundFor(model, round);
    }
  }

  /** `canary.model`, else `candidate.model`, else each model the candidate lists in /v1/models (learned once). */
  private async modelsProbed(): Promise<Array<string | null>> {
    const { config } = this.deps;
    const named = config.canary.model ?? config.candidate.model;
    if (named !== null) return [named];
    if (this.models !== null) return this.models;
    const target = this.deps.mirror.pairPipeline.backends.candidate.target();
    try {
      const a = await requestJson(target, 'GET', '/v1/models');
      const data = (a.body as { data?: Array<{ id?: unknown }> } | null)?.data;
      const ids = Array.isArray(data) ? data.map((m) => m.id).filter((id): id is string => typeof id === 'string') : [];
      this.models = ids.length > 0 ? ids : [null];
    } catch (err) {
      this.deps.log.warn(
        { err },
        'canaries: the candidate did not list its models (GET /v1/models); probing without one',
      );
      return [null];
    }
    return this.models;
  }

  /** One model's round: probe after probe within the limits, then the judgement. */
  private async roundFor(model: string | null, round: number): Promise<void> {
    const { mirror, config } = this.deps;
    const slice = mirror.sliceOf(model);
    const t = mirror.canaryThresholds(slice);
    // `canary.noiseFloor: auto` not learned yet: the round is compared, counted and captured, and
    // its repeats teach the floor, but a floor at calibration.minFloor is not one to judge at.
    const toLearn = mirror.canaryFloorToLearn(slice);
    const pairs: CanaryPair[] = [];
    for (const [i, probe] of this.probes.entries()) {
      const refused = this.refusal(probe, model);
      if (refused !== null) {
        this.count(refused, this.probes.length - i);
        break;
      }
      const pair = await this.runner!.one(probe, model, t);
      this.charge(probe, model, pair.tokens, pair.bound);
      this.learn(slice, pair);
      const c = pair.result.comparison;
      this.count(c !== null && c.verdict !== 'incomparable' ? 'ok' : 'failed', 1);
      pairs.push(pair);
      if (this.closed) break;
    }
    if (pairs.length === 0) return;
    const j = judgeRound(pairs, {
      alpha: config.canary.alpha,
      fireFraction: config.alert.fireFraction,
      permutations: config.alert.permutation.permutations,
      seed: config.alert.permutation.seed,
    });
    const verdict = toLearn > 0 ? 'inconclusive' : j.verdict;
    const learning =
      toLearn > 0
        ? `inconclusive: canary.noiseFloor auto is still learning (${toLearn} more trusted repeats before it judges); at the starting floor `
        : '';
    const line = `canary round ${round}${model !== null ? ` (model ${model})` : ''} at floor ${formatNats(t.noiseFloor)} nats: ${learning}${j.summary}`;
    if (verdict === 'changed') this.deps.log.info({ round, model }, line);
    else this.deps.log.debug({ round, model }, line);
    mirror.observeCanaryRound({
      model: slice,
      pairs: pairs.map((p) => canaryPair(p, slice, round, t)),
      changed: verdict === 'inconclusive' ? null : verdict === 'changed',
      compared: j.compared,
      pooledShare: j.pooledShare,
      maxShift: j.maxShift,
      summary: line,
    });
  }

  /**
   * The probe's repeat on one side teaches the canaries' own floor (`canary.noiseFloor: auto`):
   * the baseline's repeat, trusted; against a reference the candidate's, observed only.
   */
  private learn(slice: string, pair: CanaryPair): void {
    const self = pair.self;
    if (self === undefined || self === null || self.verdict === 'incomparable') return;
    const shifts = self.positions.map((p) => p.shift).filter((s): s is number => s !== null);
    const backend = pair.reference ? 'candidate' : 'baseline';
    this.deps.mirror.learnCanaryFloor(slice, backend, shifts, !pair.reference);
  }

  /** Why a probe may not go now: the client path is busy, or it would pass the hour's budget; null when it may. */
  private refusal(probe: CanaryProbe, model: string | null): Extract<CanaryOutcome, 'budget' | 'saturated'> | null {
    const c = this.deps.config.canary;
    if (this.deps.candidateInFlight() > c.maxCandidateInFlight) return 'saturated';
    const need = this.cost.get(costKey(probe, model)) ?? this.estimate(probe, model);
    if (this.spentLastHour() + need <= c.tokensPerHour) return null;
    const now = this.now();
    if (now - this.budgetSaidAt >= HOUR_MS) {
      this.budgetSaidAt = now;
      this.deps.log.warn(
        { tokensPerHour: c.tokensPerHour, spent: this.spentLastHour(), need },
        `canaries paused: the next probe would pass canary.tokensPerHour (${c.tokensPerHour}); counted as logprobe_canary_probes_total{outcome="budget"}`,
      );
    }
    return 'budget';
  }

  /** A probe's cost before it was ever sent: its copy's upper bound, on each side that spends tokens. */
  private estimate(probe: CanaryProbe, model: string | null): number {
    const c = this.deps.config.canary;
    const body = probeCopy(probe, {
      ...this.deps.config.mirror,
      maxTokens: c.maxTokens,
      topLogprobs: c.topLogprobs,
      model,
    }).body;
    // Each run a probe takes: candidate and baseline and the baseline's repeat, or the candidate twice against a reference.
    return estimateTokens(body) * (c.reference === null ? 3 : 2);
  }

  private charge(probe: CanaryProbe, model: string | null, tokens: number, bound: number): void {
    this.cost.set(costKey(probe, model), bound);
    this.spent.push({ at: this.now(), tokens });
    this.deps.metrics.counter('logprobe_canary_tokens_total').inc(tokens);
  }

  /** Tokens spent over the last hour (older entries dropped). */
  spentLastHour(): number {
    const since = this.now() - HOUR_MS;
    while (this.spent.length > 0 && this.spent[0]!.at <= since) this.spent.shift();
    return this.spent.reduce((a, e) => a + e.tokens, 0);
  }

  private count(outcome: CanaryOutcome, n: number): void {
    if (n > 0) this.deps.metrics.counter('logprobe_canary_probes_total').inc({ outcome }, n);
  }

  /** Stops scheduling and waits for a round in flight (it stops after its current probe). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }
}

function costKey(probe: CanaryProbe, model: string | null): string {
  return `${model ?? ''}\u0000${probe.id}`;
}

/** A canary pair as the mirror's pair record (capture, the live page): no client, its probe and round named. */
function canaryPair(p: CanaryPair, slice: string, round: number, t: Thresholds): MirroredPair {
  return {
    id: `canary-${randomUUID()}`,
    ts: new Date().toISOString(),
    route: p.probe.route,
    path: p.probe.route,
    request: p.request,
    clientHeaders: {},
    candidate: p.candidate,
    baseline: p.baseline,
    outcome: p.result.outcome,
    analysis: p.result.comparison,
    noiseFloor: t.noiseFloor,
    slice: { model: slice, cache: 'unknown' },
    canary: { probe: p.probe.id, round, reference: p.reference },
  };
}

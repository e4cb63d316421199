import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { Backend, Comparison } from '../core/types.js';
import { detectorEvidence } from '../core/index.js';
import {
  initialDetectorState,
  observe,
  observePrompt,
  pooledShare,
  tick,
  tickPrompt,
  stepAlert,
  type AlertPhase,
  type AlertState,
  type AlertTransition,
  type DetectorState,
} from '../core/detector.js';
import { PermutationWindow } from '../core/permutation.js';
import { observeSelf, selfEvidence, tickSelf } from '../core/self.js';
import type { Metrics } from '../metrics/registry.js';
import { ALERT_NAMES, BACKEND_ALERTS, BACKENDS } from '../metrics/catalog.js';
import type { MirrorListeners } from '../pair/types.js';
import { AlertNotifier, generatorUrl } from './notify.js';

/** One model slice's detectors: the pair window and CUSUM, the permutation test, and each backend's self and path detectors. */
export interface SliceDetectors {
  pairs: DetectorState;
  self: Record<Backend, DetectorState>;
  path: Record<Backend, DetectorState>;
  /** The share of compared pairs whose two sides read different prompts (LogprobPromptMismatch). */
  prompt: DetectorState;
  /** LogprobCanaryShift: firing from a canary round judged changed until one judged the same. */
  canary: AlertState;
  permutation: PermutationWindow;
}

/**
 * The mirror's detectors (src/core/detector.ts, pure) and what follows from them, per model slice
 * (src/core/slice.ts): the window and CUSUM alerts over compared pairs, the permutation test
 * beside them, one self-consistency detector per backend probed with repeats and one path
 * detector per backend path-checked; their gauges (labelled with the slice), and each alert
 * transition (naming the slice) to the notifier (log, Alertmanager) and the listeners.
 */
export class MirrorDetectors {
  private readonly slices = new Map<string, SliceDetectors>();
  private readonly notifier: AlertNotifier;
  private readonly ticker: NodeJS.Timeout;

  constructor(
    private readonly deps: {
      config: Config;
      metrics: Metrics;
      log: Logger;
      listeners: MirrorListeners | undefined;
      now: () => number;
    },
  ) {
    const { config } = deps;
    this.notifier = new AlertNotifier({
      logger: deps.log,
      webhookUrl: config.alert.webhookUrl,
      instance: `${config.listen.host}:${config.listen.port}`,
      generatorUrl: generatorUrl(config),
    });
    // Time alone can fire or resolve an alert (forSeconds), with or without traffic.
    this.ticker = setInterval(() => {
      const now = deps.now();
      for (const [model, d] of this.slices) {
        this.setPairState(model, d, tick(d.pairs, config.alert, now));
        this.setPromptState(model, d, tickPrompt(d.prompt, config.alert, now));
        for (const b of BACKENDS) {
          this.setBackendState(model, d, 'self', b, tickSelf(d.self[b], config.alert, now, b));
          this.setBackendState(
            model,
            d,
            'path',
            b,
            tickSelf(d.path[b], config.alert, now, b, 'LogprobPathInconsistency'),
          );
        }
      }
    }, 1000);
    this.ticker.unref();
  }

  /** A slice's detectors, created on first sight with their series at 0. */
  slice(model: string): SliceDetectors {
    let d = this.slices.get(model);
    if (d !== undefined) return d;
    const { config, metrics } = this.deps;
    d = {
      pairs: initialDetectorState(),
      self: { candidate: initialDetectorState(), baseline: initialDetectorState() },
      path: { candidate: initialDetectorState(), baseline: initialDetectorState() },
      prompt: initialDetectorState(),
      canary: { phase: 'inactive', since: 0, firedAt: null },
      permutation: new PermutationWindow({ window: config.alert.window, ...config.alert.permutation }),
    };
    this.slices.set(model, d);
    metrics.initSlice(model);
    metrics.gauge('logprobe_alert_test_pvalue').set({ model }, 1);
    metrics.gauge('logprobe_window_global_shift_ratio').set({ model }, 0);
    metrics.gauge('logprobe_cusum_statistic').set({ model }, 0);
    const firing = metrics.gauge('logprobe_alert_firing');
    for (const alert of ALERT_NAMES) {
      if ((BACKEND_ALERTS as readonly string[]).includes(alert))
        for (const backend of BACKENDS) firing.set({ alert, backend, model }, 0);
      else firing.set({ alert, model }, 0);
    }
    return d;
  }

  /** Every slice seen so far, by model (read-only, for the live page and the reports). */
  get all(): ReadonlyMap<string, Readonly<SliceDetectors>> {
    return this.slices;
  }

  /**
   * The pair detectors' state of the slice that is worst now (firing first, then the largest
   * pooled share), for the one-line views (the demo's progress, the proxy's thread); a fresh state
   * before any pair.
   */
  get state(): Readonly<DetectorState> {
    return worst([...this.slices.values()].map((d) => d.pairs)) ?? initialDetectorState();
  }

  /** A backend's self-consistency detector of the worst slice (read-only: the demo's progress lines show its window share and CUSUM). */
  selfState(backend: Backend): Readonly<DetectorState> {
    return worst([...this.slices.values()].map((d) => d.self[backend])) ?? initialDetectorState();
  }

  /** The permutation test of the worst slice (the one {@link state} shows); null before any pair. */
  get permutation(): PermutationWindow | null {
    const w = this.state;
    for (const d of this.slices.values()) if (d.pairs === w) return d.permutation;
    return null;
  }

  /** A compared pair's evidence to its slice's window and CUSUM detectors and permutation test. */
  observePair(model: string, requestId: string, analysis: Comparison, noiseFloor: number): void {
    const { config, metrics, now } = this.deps;
    const d = this.slice(model);
    this.setPairState(
      model,
      d,
      observe(d.pairs, { ...detectorEvidence(analysis), noiseFloor, requestId }, config.alert, now()),
    );
    d.permutation.add(analysis);
    metrics.gauge('logprobe_alert_test_pvalue').set({ model }, d.permutation.pValue());
  }

  /** A compared pair to its slice's prompt-mismatch window: whether its two sides read different prompts. */
  observePrompt(model: string, requestId: string, mismatched: boolean): void {
    const { config, now } = this.deps;
    const d = this.slice(model);
    this.setPromptState(model, d, observePrompt(d.prompt, mismatched, requestId, config.alert, now()));
  }

  /**
   * A canary round's judgement to its slice's LogprobCanaryShift: a round judged changed fires it
   * at once (a round is already a test over the whole probe set), the first judged the same
   * resolves it; an inconclusive round (`changed` null) changes nothing.
   */
  observeCanary(
    model: string,
    changed: boolean | null,
    round: { probes: number; pooledShare: number; maxShift: number | null; exampleId: string | null; detail: string },
  ): void {
    if (changed === null) return;
    const d = this.slice(model);
    const now = this.deps.now();
    const prev = d.canary;
    const step = stepAlert(prev, changed, now, 0);
    d.canary = step.state;
    this.deps.metrics
      .gauge('logprobe_alert_firing')
      .set({ alert: 'LogprobCanaryShift', model }, firingValue(step.state.phase));
    if (step.change === null) return;
    this.notifyTransitions(model, [
      {
        alert: 'LogprobCanaryShift',
        to: step.change,
        at: now,
        startsAt: prev.firedAt ?? step.state.firedAt ?? now,
        detail: round.detail,
        evidence: {
          pooledShare: round.pooledShare,
          requestsInWindow: round.probes,
          medianShift: round.maxShift,
          cusum: 0,
          cusumRequests: 0,
          medianX: null,
          exampleRequestId: round.exampleId,
        },
      },
    ]);
  }

  /** A cold→warm repeat pair's evidence to its backend's self-consistency detector in its slice. */
  observeRepeat(model: string, backend: Backend, requestId: string, analysis: Comparison, noiseFloor: number): void {
    const { config, now } = this.deps;
    const d = this.slice(model);
    const evidence = { ...selfEvidence(analysis), noiseFloor, requestId };
    this.setBackendState(
      model,
      d,
      'self',
      backend,
      observeSelf(d.self[backend], evidence, config.alert, now(), backend),
    );
  }

  /** A path pair's evidence (decode vs prefill positions) to its backend's path detector in its slice. */
  observePath(
    model: string,
    backend: Backend,
    requestId: string,
    c: { shifted: number; comparable: number; maxShift: number | null },
    noiseFloor: number,
  ): void {
    const { config, now } = this.deps;
    const d = this.slice(model);
    const evidence = { shifted: c.shifted, comparable: c.comparable, maxShift: c.maxShift, noiseFloor, requestId };
    this.setBackendState(
      model,
      d,
      'path',
      backend,
      observeSelf(d.path[backend], evidence, config.alert, now(), backend, 'LogprobPathInconsistency'),
    );
  }

  /** The admin server listens on `port` (0 in the config: known only now): alerts link to its live page. */
  setAdminPort(port: number): void {
    this.notifier.setGeneratorUrl(generatorUrl(this.deps.config, port));
  }

  /** Stops the clock and sends what the notifier still holds. */
  async close(): Promise<void> {
    clearInterval(this.ticker);
    await this.notifier.flush();
  }

  private setPairState(
    model: string,
    d: SliceDetectors,
    result: { state: DetectorState; transitions: AlertTransition[] },
  ): void {
    d.pairs = result.state;
    const { metrics } = this.deps;
    metrics.gauge('logprobe_window_global_shift_ratio').set({ model }, pooledShare(d.pairs));
    metrics.gauge('logprobe_cusum_statistic').set({ model }, d.pairs.cusum);
    const firing = metrics.gauge('logprobe_alert_firing');
    firing.set({ alert: 'LogprobGlobalShift', model }, firingValue(d.pairs.global.phase));
    firing.set({ alert: 'LogprobSustainedShift', model }, firingValue(d.pairs.sustained.phase));
    this.notifyTransitions(model, result.transitions);
  }

  private setPromptState(
    model: string,
    d: SliceDetectors,
    result: { state: DetectorState; transitions: AlertTransition[] },
  ): void {
    d.prompt = result.state;
    this.deps.metrics
      .gauge('logprobe_alert_firing')
      .set({ alert: 'LogprobPromptMismatch', model }, firingValue(result.state.global.phase));
    this.notifyTransitions(model, result.transitions);
  }

  private setBackendState(
    model: string,
    d: SliceDetectors,
    which: 'self' | 'path',
    backend: Backend,
    result: { state: DetectorState; transitions: AlertTransition[] },
  ): void {
    d[which][backend] = result.state;
    const alert = which === 'self' ? 'LogprobSelfInconsistency' : 'LogprobPathInconsistency';
    this.deps.metrics
      .gauge('logprobe_alert_firing')
      .set({ alert, backend, model }, firingValue(result.state.global.phase));
    this.notifyTransitions(model, result.transitions);
  }

  private notifyTransitions(model: string, transitions: readonly AlertTransition[]): void {
    for (const raw of transitions) {
      const t = { ...raw, model };
      this.notifier.notify(t);
      try {
        this.deps.listeners?.onAlert?.(t);
      } catch (err) {
        this.deps.log.error({ err }, 'alert listener failed');
      }
    }
  }
}

/** The state that is worst: firing (or resolving) first, then the largest pooled share; null for none. */
function worst(states: readonly DetectorState[]): DetectorState | null {
  let best: DetectorState | null = null;
  const rank = (s: DetectorState) =>
    (firingValue(s.global.phase) || firingValue(s.sustained.phase)) * 10 + pooledShare(s) + s.cusum * 1e-6;
  for (const s of states) if (best === null || rank(s) > rank(best)) best = s;
  return best;
}

/** `logprobe_alert_firing`'s value in an alert's phase: 1 from firing until it has resolved (`resolving` still fires), else 0. */
function firingValue(phase: AlertPhase): 0 | 1 {
  return phase === 'firing' || phase === 'resolving' ? 1 : 0;
}

import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { Backend, Comparison } from '../core/types.js';
import { detectorEvidence } from '../core/index.js';
import {
  initialDetectorState,
  observe,
  pooledShare,
  tick,
  type AlertPhase,
  type AlertTransition,
  type DetectorState,
} from '../core/detector.js';
import { PermutationWindow } from '../core/permutation.js';
import { observeSelf, selfEvidence, tickSelf } from '../core/self.js';
import type { Metrics } from '../metrics/registry.js';
import type { MirrorListeners } from '../pair/types.js';
import { AlertNotifier, generatorUrl } from './notify.js';

/**
 * The mirror's detectors (src/core/detector.ts, pure) and what follows from them: the window and
 * CUSUM alerts over compared pairs, the permutation test beside them, one self-consistency
 * detector per backend probed with repeats; their gauges, and each alert transition to the
 * notifier (log, Alertmanager) and the listeners.
 */
export class MirrorDetectors {
  private pairs: DetectorState = initialDetectorState();
  private readonly self: Record<Backend, DetectorState> = {
    candidate: initialDetectorState(),
    baseline: initialDetectorState(),
  };
  /** The permutation test beside the alerts (src/core/permutation.ts): its p-value is a gauge and on /ui. */
  readonly permutation: PermutationWindow;
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
    this.permutation = new PermutationWindow({ window: config.alert.window, ...config.alert.permutation });
    deps.metrics.gauge('logprobe_alert_test_pvalue').set(1);
    this.notifier = new AlertNotifier({
      logger: deps.log,
      webhookUrl: config.alert.webhookUrl,
      instance: `${config.listen.host}:${config.listen.port}`,
      generatorUrl: generatorUrl(config),
    });
    // Time alone can fire or resolve an alert (forSeconds), with or without traffic.
    this.ticker = setInterval(() => {
      const now = deps.now();
      this.setPairState(tick(this.pairs, config.alert, now));
      for (const b of ['candidate', 'baseline'] as const)
        this.setSelfState(b, tickSelf(this.self[b], config.alert, now, b));
    }, 1000);
    this.ticker.unref();
  }

  /** The pair detectors' state (read-only, for the live page, the proxy's thread and tests). */
  get state(): Readonly<DetectorState> {
    return this.pairs;
  }

  /** A backend's self-consistency detector (read-only: the demo's progress lines show its window share and CUSUM). */
  selfState(backend: Backend): Readonly<DetectorState> {
    return this.self[backend];
  }

  /** A compared pair's evidence to the window and CUSUM detectors and to the permutation test. */
  observePair(requestId: string, analysis: Comparison, noiseFloor: number): void {
    const { config, metrics, now } = this.deps;
    this.setPairState(
      observe(this.pairs, { ...detectorEvidence(analysis), noiseFloor, requestId }, config.alert, now()),
    );
    this.permutation.add(analysis);
    metrics.gauge('logprobe_alert_test_pvalue').set(this.permutation.pValue());
  }

  /** A cold→warm repeat pair's evidence to its backend's self-consistency detector. */
  observeRepeat(backend: Backend, requestId: string, analysis: Comparison, noiseFloor: number): void {
    const { config, now } = this.deps;
    const evidence = { ...selfEvidence(analysis), noiseFloor, requestId };
    this.setSelfState(backend, observeSelf(this.self[backend], evidence, config.alert, now(), backend));
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

  private setPairState(result: { state: DetectorState; transitions: AlertTransition[] }): void {
    this.pairs = result.state;
    const { metrics } = this.deps;
    metrics.gauge('logprobe_window_global_shift_ratio').set(pooledShare(this.pairs));
    metrics.gauge('logprobe_cusum_statistic').set(this.pairs.cusum);
    const firing = metrics.gauge('logprobe_alert_firing');
    firing.set({ alert: 'LogprobGlobalShift' }, firingValue(this.pairs.global.phase));
    firing.set({ alert: 'LogprobSustainedShift' }, firingValue(this.pairs.sustained.phase));
    this.notifyTransitions(result.transitions);
  }

  private setSelfState(backend: Backend, result: { state: DetectorState; transitions: AlertTransition[] }): void {
    this.self[backend] = result.state;
    this.deps.metrics
      .gauge('logprobe_alert_firing')
      .set({ alert: 'LogprobSelfInconsistency', backend }, firingValue(result.state.global.phase));
    this.notifyTransitions(result.transitions);
  }

  private notifyTransitions(transitions: readonly AlertTransition[]): void {
    for (const t of transitions) {
      this.notifier.notify(t);
      try {
        this.deps.listeners?.onAlert?.(t);
      } catch (err) {
        this.deps.log.error({ err }, 'alert listener failed');
      }
    }
  }
}

/** `logprobe_alert_firing`'s value in an alert's phase: 1 from firing until it has resolved (`resolving` still fires), else 0. */
function firingValue(phase: AlertPhase): 0 | 1 {
  return phase === 'firing' || phase === 'resolving' ? 1 : 0;
}

import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { VERDICTS } from '../core/index.js';
import {
  CAPPED_FIELDS,
  CAPTURE_ERROR_REASONS,
  ENGINE_NAMES,
  OVERFLOW_REASONS,
  routeLabel,
  type OverflowReason,
} from './labels.js';
import {
  BACKENDS,
  FLIP_CLASSES,
  MAIN_MIRROR_OUTCOMES,
  MIRROR_SKIP_REASONS,
  CANARY_OUTCOMES,
  METRIC_CATALOG,
  MIRROR_OUTCOMES,
  REFUSAL_REASONS,
  ROUTE_LABELS,
  STATUS_CLASSES,
  metricsOf,
  type LabelOf,
  type MetricName,
  type MetricNameOf,
  type MetricSpec,
  type MetricThread,
  type RefusalReason,
  SCORING_OUTCOMES,
} from './catalog.js';
import { PROBE_SHAPES, SELF_VERDICTS } from '../core/self.js';
import { PATH_VERDICTS } from '../core/path.js';
import { CACHE_SPLITS } from '../core/slice.js';
import type { Backend } from '../core/types.js';

type AnyMetric = Counter<string> | Gauge<string> | Histogram<string>;

/** How a {@link Metrics} registry is built. */
export interface MetricsOptions {
  /**
   * The thread this registry belongs to: it registers the catalogue's metrics that thread owns
   * (and those owned by both), nothing else. Absent: every metric, for code that runs the whole
   * pipeline on one thread (tests of a single part).
   */
  thread?: MetricThread;
  /** `mirror.routes`: the routes whose mirror series are created at 0 (as their route labels). */
  mirrorRoutes?: readonly string[];
  /** Node's process metrics (`process_*`, `nodejs_*`); default: on every registry but the worker's. */
  defaultMetrics?: boolean;
}

/**
 * A per-thread registry (tests build the app twice; prom-client's global one would throw on the
 * second build) holding the metrics of the catalogue its thread owns, every known label value's
 * series created at 0 (so `rate()` sees the first increment and no panel or rule reads "no
 * data" on a fresh proxy), and on the proxy's thread the process metrics.
 */
export class Metrics {
  readonly registry: Registry;
  readonly thread: MetricThread | undefined;
  private readonly byName = new Map<string, AnyMetric>();
  /** The route labels of `mirror.routes`: a model slice's series are created on each. */
  private readonly mirrorRoutes: readonly string[];

  constructor(options: MetricsOptions = {}) {
    this.thread = options.thread;
    this.registry = new Registry();
    if (options.defaultMetrics ?? options.thread !== 'worker') collectDefaultMetrics({ register: this.registry });
    const specs: readonly MetricSpec[] = options.thread ? metricsOf(options.thread) : METRIC_CATALOG;
    for (const spec of specs) {
      const common = { name: spec.name, help: spec.help, labelNames: [...spec.labelNames], registers: [this.registry] };
      let metric: AnyMetric;
      if (spec.type === 'counter') metric = new Counter(common);
      else if (spec.type === 'gauge') metric = new Gauge(common);
      else metric = new Histogram({ ...common, buckets: [...(spec.buckets ?? [])] });
      this.byName.set(spec.name, metric);
    }
    const routes = [...new Set((options.mirrorRoutes ?? []).map(routeLabel))];
    this.mirrorRoutes = routes;
    if (options.thread !== 'worker') this.initMain(routes);
    if (options.thread !== 'main') this.initWorker(routes);
  }

  /** The proxy's thread: client requests by every route label and status class, its share of the mirror. */
  private initMain(mirrorRoutes: readonly string[]): void {
    const requests = this.counter('logprobe_proxy_requests_total');
    const shadow = this.counter('logprobe_shadow_requests_total');
    const duration = this.histogram('logprobe_proxy_request_duration_seconds');
    for (const route of ROUTE_LABELS) {
      for (const statusClass of STATUS_CLASSES) {
        requests.inc({ route, status_class: statusClass }, 0);
        shadow.inc({ route, status_class: statusClass }, 0);
      }
      duration.zero({ route });
    }
    for (const reason of OVERFLOW_REASONS) this.counter('logprobe_proxy_overflow_total').inc({ reason }, 0);
    this.counter('logprobe_admin_misdirected_total').inc(0);
    for (const reason of REFUSAL_REASONS) this.counter('logprobe_proxy_refused_total').inc({ reason }, 0);
    this.gauge('logprobe_upstream_connections').set({ backend: 'candidate' }, 0);
    for (const route of mirrorRoutes)
      for (const outcome of MAIN_MIRROR_OUTCOMES) this.counter('logprobe_mirror_total').inc({ route, outcome }, 0);
    // Until the worker has answered a scrape (src/worker/handle.ts sets it).
    this.gauge('logprobe_mirror_worker_up').set(0);
  }

  /** The mirror's worker: every mirrored route's comparison series, the detectors, the backends, the capture. */
  private initWorker(mirrorRoutes: readonly string[]): void {
    for (const reason of MIRROR_SKIP_REASONS) this.counter('logprobe_mirror_skipped_total').inc({ reason }, 0);
    for (const outcome of CANARY_OUTCOMES) this.counter('logprobe_canary_probes_total').inc({ outcome }, 0);
    this.counter('logprobe_canary_tokens_total').inc(0);
    for (const route of mirrorRoutes) {
      for (const outcome of MIRROR_OUTCOMES) this.counter('logprobe_mirror_total').inc({ route, outcome }, 0);
      for (const name of [
        'logprobe_token_crosspath_diff_nats',
        'logprobe_token_gap_nats',
        'logprobe_token_kl_nats',
        'logprobe_first_divergence_tokens',
      ] as const) {
        this.histogram(name).zero({ route });
      }
      for (const flipClass of FLIP_CLASSES) this.histogram('logprobe_flip_gap_nats').zero({ route, class: flipClass });
      for (const backend of BACKENDS) this.histogram('logprobe_upstream_duration_seconds').zero({ backend, route });
      for (const outcome of SCORING_OUTCOMES) this.counter('logprobe_scoring_total').inc({ route, outcome }, 0);
      this.histogram('logprobe_prompt_shift_nats').zero({ route });
    }
    for (const backend of BACKENDS)
      for (const profile of ENGINE_NAMES) this.gauge('logprobe_engine_profile').set({ backend, profile }, 0);
    for (const backend of BACKENDS) this.gauge('logprobe_upstream_connections').set({ backend }, 0);
    // The detectors' series (alert_firing, the window share, CUSUM, p-value) and the noise floor's
    // are per model slice: each slice's are created at 0 (NaN: not measured yet) when it is first
    // seen, or at start for the slices.models allow-list (src/mirror/detectors.ts, calibration.ts).
    for (const backend of BACKENDS) {
      this.histogram('logprobe_self_shift_nats').zero({ backend });
      this.histogram('logprobe_path_shift_nats').zero({ backend });
      for (const outcome of SCORING_OUTCOMES) this.counter('logprobe_path_checks_total').inc({ backend, outcome }, 0);
    }
    for (const backend of BACKENDS)
      for (const probe of PROBE_SHAPES) this.counter('logprobe_self_probes_total').inc({ backend, probe }, 0);
    // Not known until the backend's first repeat probe: NaN, not 0.
    for (const backend of BACKENDS)
      this.gauge('logprobe_engine_capability').set({ backend, capability: 'cache_path' }, Number.NaN);
    for (const backend of BACKENDS)
      for (const field of CAPPED_FIELDS) this.counter('logprobe_logprobs_capped_total').inc({ backend, field }, 0);
    this.counter('logprobe_slice_overflow_total').inc(0);
    this.gauge('logprobe_mirror_queue_depth').set(0);
    for (const reason of CAPTURE_ERROR_REASONS) this.counter('logprobe_capture_errors_total').inc({ reason }, 0);
    for (const reason of CAPTURE_ERROR_REASONS)
      this.counter('logprobe_capture_records_dropped_total').inc({ reason }, 0);
    // 0 until a capture writer says it works (captures off: none does).
    this.gauge('logprobe_capture_ok').set(0);
  }

  /**
   * A model slice's comparison series at 0, when the slice is first seen (or at start for
   * `slices.models` and `other`): its verdicts of every kind on every mirrored route (pairs by
   * cache split, self and path checks by backend) and its shift histogram.
   */
  initSlice(model: string): void {
    const verdicts = this.counter('logprobe_verdicts_total');
    for (const route of this.mirrorRoutes) {
      for (const verdict of VERDICTS)
        for (const cache of CACHE_SPLITS) verdicts.inc({ route, verdict, kind: 'pair', model, cache }, 0);
      for (const backend of BACKENDS) {
        for (const verdict of SELF_VERDICTS) verdicts.inc({ route, verdict, kind: 'self', backend, model }, 0);
        for (const verdict of PATH_VERDICTS) verdicts.inc({ route, verdict, kind: 'path', backend, model }, 0);
      }
      this.histogram('logprobe_token_shift_nats').zero({ route, model });
    }
  }

  /** A client request refused at once by a configured candidate limit. */
  overflow(reason: OverflowReason): void {
    this.counter('logprobe_proxy_overflow_total').inc({ reason });
  }

  /** An admin-port request refused for its Host (421). */
  misdirected(): void {
    this.counter('logprobe_admin_misdirected_total').inc();
  }

  /** A client request the proxy answered itself, refused by a client limit or an HTTP rule. */
  refused(reason: RefusalReason): void {
    this.counter('logprobe_proxy_refused_total').inc({ reason });
  }

  /** An upstream connection opened (+1) or closed (−1). */
  connections(backend: Backend, delta: 1 | -1): void {
    this.gauge('logprobe_upstream_connections').inc({ backend }, delta);
  }

  /** A counter of the catalogue, typed by it: another type's name or an unknown label fails `tsc` (test/types/metrics.ts). */
  counter<N extends MetricNameOf<'counter'>>(name: N): Counter<LabelOf<N>> {
    return this.get(name) as Counter<LabelOf<N>>;
  }

  /** A gauge of the catalogue, typed by it. */
  gauge<N extends MetricNameOf<'gauge'>>(name: N): Gauge<LabelOf<N>> {
    return this.get(name) as Gauge<LabelOf<N>>;
  }

  /** A histogram of the catalogue, typed by it. */
  histogram<N extends MetricNameOf<'histogram'>>(name: N): Histogram<LabelOf<N>> {
    return this.get(name) as Histogram<LabelOf<N>>;
  }

  /** One client request through the proxy; status 499 stands for a client that went away. */
  observeRequest(route: string, status: number, seconds: number): void {
    const statusClass = status === 499 ? 'aborted' : `${Math.floor(status / 100)}xx`;
    this.counter('logprobe_proxy_requests_total').inc({ route, status_class: statusClass });
    this.histogram('logprobe_proxy_request_duration_seconds').observe({ route }, seconds);
  }

  /** A copy received in shadow mode, answered with `status`; 499 stands for a mirror source that went away. */
  observeShadow(route: string, status: number): void {
    const statusClass = status === 499 ? 'aborted' : `${Math.floor(status / 100)}xx`;
    this.counter('logprobe_shadow_requests_total').inc({ route, status_class: statusClass });
  }

  private get(name: MetricName): AnyMetric {
    const m = this.byName.get(name);
    if (!m)
      throw new Error(
        `metric ${name} is not registered on the ${this.thread ?? '?'} thread: it belongs to another one (src/metrics/catalog.ts)`,
      );
    return m;
  }
}

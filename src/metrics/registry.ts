import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { METRIC_CATALOG, type MetricName } from './catalog.js';
import { OVERFLOW_REASONS, type OverflowReason } from '../proxy/budget.js';

type AnyMetric = Counter<string> | Gauge<string> | Histogram<string>;

/**
 * A per-app registry (tests build the app twice; prom-client's global one would throw on the
 * second build) holding the process metrics and every metric of the catalog.
 */
export class Metrics {
  readonly registry: Registry;
  private readonly byName = new Map<string, AnyMetric>();

  constructor(options: { defaultMetrics?: boolean } = {}) {
    this.registry = new Registry();
    if (options.defaultMetrics !== false) collectDefaultMetrics({ register: this.registry });
    for (const spec of METRIC_CATALOG) {
      const common = { name: spec.name, help: spec.help, labelNames: [...spec.labelNames], registers: [this.registry] };
      let metric: AnyMetric;
      if (spec.type === 'counter') metric = new Counter(common);
      else if (spec.type === 'gauge') metric = new Gauge(common);
      else metric = new Histogram({ ...common, buckets: [...(spec as { buckets: readonly number[] }).buckets] });
      this.byName.set(spec.name, metric);
    }
    // Gauges that must exist from the start, so a dashboard never shows "no data" for them.
    this.gauge('logprobe_alert_firing').set({ alert: 'LogprobGlobalShift' }, 0);
    this.gauge('logprobe_alert_firing').set({ alert: 'LogprobSustainedShift' }, 0);
    this.gauge('logprobe_window_global_shift_ratio').set(0);
    this.gauge('logprobe_cusum_statistic').set(0);
    this.gauge('logprobe_mirror_queue_depth').set(0);
    for (const reason of OVERFLOW_REASONS) this.counter('logprobe_proxy_overflow_total').inc({ reason }, 0);
    for (const backend of ['candidate', 'baseline']) this.gauge('logprobe_upstream_connections').set({ backend }, 0);
  }

  /** A client request refused at once by a configured candidate limit. */
  overflow(reason: OverflowReason): void {
    this.counter('logprobe_proxy_overflow_total').inc({ reason });
  }

  /** An upstream connection opened (+1) or closed (−1). */
  connections(backend: 'candidate' | 'baseline', delta: 1 | -1): void {
    this.gauge('logprobe_upstream_connections').inc({ backend }, delta);
  }

  counter(name: MetricName): Counter<string> {
    return this.get(name) as Counter<string>;
  }

  gauge(name: MetricName): Gauge<string> {
    return this.get(name) as Gauge<string>;
  }

  histogram(name: MetricName): Histogram<string> {
    return this.get(name) as Histogram<string>;
  }

  /** One client request through the proxy; status 499 stands for a client that went away. */
  observeRequest(route: string, status: number, seconds: number): void {
    const statusClass = status === 499 ? 'aborted' : `${Math.floor(status / 100)}xx`;
    this.counter('logprobe_proxy_requests_total').inc({ route, status_class: statusClass });
    this.histogram('logprobe_proxy_request_duration_seconds').observe({ route }, seconds);
  }

  private get(name: MetricName): AnyMetric {
    const m = this.byName.get(name);
    if (!m) throw new Error(`unknown metric ${name}`);
    return m;
  }
}

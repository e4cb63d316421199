import {
  AggregatorRegistry,
  type Aggregator,
  type Registry,
  type MetricObjectWithValues,
  type MetricValue,
} from 'prom-client';

/** A registry's metrics as `getMetricsAsJSON()` gives them (what crosses threads and processes). */
export type MetricsJSON = Array<MetricObjectWithValues<MetricValue<string>>>;

/**
 * How a family is merged over the processes of a cluster (src/cluster/primary.ts): the aggregator
 * prom-client declares for it — `sum` unless said otherwise, which is every logprobe_* family
 * (each process counts its own part: requests, durations, overflow, upstream connections, its
 * mirror outcomes) and the process metrics that add up (CPU, memory, handles); the event-loop lag
 * is averaged and `nodejs_version_info` taken once, as prom-client's cluster aggregation does —
 * except the start time, which prom-client omits: the oldest process's (the primary's), so that
 * the exposition has the series a single process has.
 */
function aggregatorOf(m: MetricObjectWithValues<MetricValue<string>>): Aggregator {
  if (m.name === 'process_start_time_seconds') return 'min';
  return m.aggregator ?? 'sum';
}

/** The registries of several processes as one (see {@link aggregatorOf}). */
export function mergeProcesses(parts: readonly MetricsJSON[]): Registry {
  return AggregatorRegistry.aggregate(parts.map((list) => list.map((m) => ({ ...m, aggregator: aggregatorOf(m) }))));
}

/**
 * The registries of one process's two threads as one (src/worker/handle.ts): the main thread's
 * and the mirror worker's. Each thread registers only the metrics it owns (src/metrics/catalog.ts),
 * so a family is on both sides only when owned by both (`logprobe_mirror_total`,
 * `logprobe_upstream_connections`), each side counting its own part: adding them is exact. Every
 * other family comes from one side and a sum of one is itself, hence `sum` for every family
 * (prom-client's own aggregators, made for cluster workers, would omit or average some process
 * metrics).
 */
export function mergeThreads(parts: readonly [MetricsJSON, MetricsJSON]): Registry {
  return AggregatorRegistry.aggregate(parts.map((list) => list.map((m) => ({ ...m, aggregator: 'sum' as const }))));
}

/**
 * What a process that has exited leaves in the cluster's figures: its counters and histograms
 * (they only grow, so the sum over processes never goes back, which Prometheus would read as a
 * reset), not its gauges (its connections are closed, its heap is gone).
 */
export function retiredPart(last: MetricsJSON): MetricsJSON {
  // prom-client's types say an enum; the values are its names.
  return last.filter((m) => String(m.type) === 'counter' || String(m.type) === 'histogram');
}

/**
 * The sum of retired parts, series by series (a family's metadata from its first part): what
 * every exited process left, kept in one list however many have exited.
 */
export function sumParts(parts: readonly MetricsJSON[]): MetricsJSON {
  const families = new Map<
    string,
    { metric: MetricObjectWithValues<MetricValue<string>>; values: Map<string, MetricValue<string>> }
  >();
  for (const part of parts) {
    for (const m of part) {
      let f = families.get(m.name);
      if (f === undefined) {
        f = { metric: m, values: new Map() };
        families.set(m.name, f);
      }
      for (const v of m.values) {
        const labels = Object.entries(v.labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
        const key = `${(v as { metricName?: string }).metricName ?? ''}\u0000${JSON.stringify(labels)}`;
        const old = f.values.get(key);
        f.values.set(key, old === undefined ? { ...v } : { ...old, value: old.value + v.value });
      }
    }
  }
  return [...families.values()].map(({ metric, values }) => ({ ...metric, values: [...values.values()] }));
}

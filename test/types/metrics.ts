/**
 * Type-level test of `Metrics.counter/gauge/histogram` (never run: `npm run typecheck` checks it,
 * and each `@ts-expect-error` fails `tsc` when the line below it compiles). The names and label
 * names come from METRIC_CATALOG (src/metrics/catalog.ts): a wrong kind or label is an error.
 */
import type { Metrics } from '../../src/metrics/registry.js';

export function typedMetrics(m: Metrics): void {
  // What the catalogue says compiles.
  m.counter('logprobe_mirror_total').inc({ route: '/v1/completions', outcome: 'ok' });
  m.gauge('logprobe_mirror_queue_depth').set(3);
  m.gauge('logprobe_upstream_connections').inc({ backend: 'candidate' }, 1);
  m.histogram('logprobe_upstream_duration_seconds').observe({ backend: 'baseline', route: '/v1/completions' }, 0.1);
  m.counter('logprobe_admin_misdirected_total').inc();

  // @ts-expect-error logprobe_mirror_queue_depth is a gauge, not a counter
  m.counter('logprobe_mirror_queue_depth');
  // @ts-expect-error logprobe_mirror_total is a counter, not a gauge
  m.gauge('logprobe_mirror_total');
  // @ts-expect-error logprobe_mirror_total is a counter, not a histogram
  m.histogram('logprobe_mirror_total');
  // @ts-expect-error no such metric in the catalogue
  m.counter('logprobe_mirror_totl');

  // @ts-expect-error a label typo: `outcom`
  m.counter('logprobe_mirror_total').inc({ route: '/v1/completions', outcom: 'ok' });
  // @ts-expect-error a label of another metric: logprobe_mirror_queue_depth has none
  m.gauge('logprobe_mirror_queue_depth').set({ backend: 'candidate' }, 1);
  // @ts-expect-error logprobe_upstream_duration_seconds has no `status_class` label
  m.histogram('logprobe_upstream_duration_seconds').observe({ status_class: '2xx' }, 0.1);
}

// Every logprobe series that the fleet rules (config/prometheus/alerts.yml) and the Grafana
// dashboard (config/grafana/logprobe.json) query is exported by a running logprobe, with the
// labels and label values the queries select on. fleet-series.test.ts checks the same queries
// against the metric catalogue; this one checks them against a live /metrics — on a fresh proxy
// that has seen no request (every known label value's series exists at 0 from the start:
// src/metrics/registry.ts), and after real mirrored traffic — so a series that is declared but
// never observed, a label never set, or a histogram bucket boundary that moved (`le="0.1"`)
// shows here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { startLogprobe } from './helpers/logprobe.js';
import { startSim, sendChatOrCompletion } from './helpers/sim.js';
import { startUpstream } from './helpers/upstream.js';
import { METRIC_CATALOG, MIRROR_OUTCOMES } from '../src/metrics/catalog.js';
import { VERDICTS } from '../src/core/index.js';
import {
  checkLive,
  dashboardQueries,
  grafanaToPromql,
  parseExposition,
  readDashboardText,
  readRulesText,
  rulesQueries,
  type Exposition,
  type Query,
} from './helpers/promql.js';

const rules = rulesQueries(readRulesText());
const dashboard = dashboardQueries(readDashboardText()).map((q) => ({ ...q, expr: grafanaToPromql(q.expr) }));

function send(proxyUrl: string, i: number, prompt = `Prompt ${i}: the capital of France is`): Promise<number> {
  return sendChatOrCompletion(proxyUrl, i, { chat: prompt, completion: prompt });
}

test('the live checker reports missing series, labels and values', () => {
  const live = parseExposition(
    [
      '# TYPE logprobe_verdicts_total counter',
      'logprobe_verdicts_total{route="/v1/completions",verdict="noise"} 3',
      '# TYPE logprobe_token_shift_nats histogram',
      'logprobe_token_shift_nats_bucket{le="0.05",route="/v1/completions"} 1',
      'logprobe_token_shift_nats_count{route="/v1/completions"} 1',
      '# TYPE logprobe_capture_errors_total counter',
      '# TYPE logprobe_cusum_statistic gauge',
    ].join('\n'),
  );
  const recorded = new Map([
    ['logprobe:verdicts:rate5m', 'sum by (job, route, verdict) (rate(logprobe_verdicts_total[5m]))'],
  ]);
  const eventOnly = new Map([['logprobe_capture_errors_total', 'test']]);
  const bad: Array<[string, RegExp]> = [
    ['logprobe_cusum_statistic', /logprobe_cusum_statistic is declared but has no sample/],
    ['logprobe_mirror_queue_depth', /logprobe_mirror_queue_depth is not in the live exposition/],
    ['rate(logprobe_verdicts_total{verdict="global_shift"}[5m])', /verdict="global_shift"\} has no live sample/],
    ['logprobe:verdicts:rate5m{verdict=~"noise|early_shift"}', /verdict="early_shift"\} has no live sample/],
    ['rate(logprobe_token_shift_nats_bucket{le="0.1"}[5m])', /le="0.1"\} has no live sample/],
    ['logprobe_verdicts_total{outcome!="ok"}', /carries the label outcome/],
    ['sum by (backend) (rate(logprobe_proxy_requests_total[5m]))', /by \(backend\)/],
    ['rate(logprobe_token_shift_nats_sum[5m])', /logprobe_token_shift_nats_sum is declared but has no sample/],
  ];
  for (const [expr, expected] of bad) {
    const problems = checkLive({ where: 'probe', expr }, recorded, live, eventOnly);
    assert.ok(
      problems.some((p) => expected.test(p)),
      `${expr}: expected ${expected}, got ${JSON.stringify(problems)}`,
    );
  }
  const good = [
    'sum by (le) (rate(logprobe_token_shift_nats_bucket{le="0.05", route=~"var_route", job=~"var_job"}[5m]))',
    'logprobe:verdicts:rate5m{verdict=~"noise"}',
    'sum by (instance, reason) (rate(logprobe_capture_errors_total[5m]))',
    'sum by (job, namespace) (logprobe_verdicts_total) and on (job, namespace) ALERTS{alertname=~"Logprob.*"}',
  ];
  for (const expr of good) assert.deepEqual(checkLive({ where: 'probe', expr }, recorded, live, eventOnly), [], expr);
});

test('every logprobe series, label and value the rules and the dashboard query is exported by a running logprobe', async (t) => {
  const baseline = await startSim();
  const shifted = await startSim({ stateShift: 0.6 });
  // The candidate is the shifted engine behind a gate that answers 500 to prompts that say FAIL,
  // so that status_class="5xx" (the error-ratio rule, the runbook hint) has a live sample too.
  const gate = await startUpstream(async (req, res, body) => {
    if (body.includes('FAIL')) {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"injected","type":"server_error"}}');
      return;
    }
    const up = await request(`${shifted.url}${req.url ?? '/'}`, {
      method: (req.method ?? 'GET') as 'POST',
      body: body.length > 0 ? body : undefined,
      headers: { 'content-type': req.headers['content-type'] ?? 'application/json' },
    });
    const data = Buffer.from(await up.body.arrayBuffer());
    res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type'] ?? 'application/json') });
    res.end(data);
  });
  t.after(() => Promise.all([baseline.close(), shifted.close(), gate.close()]));
  const lp = await startLogprobe({
    candidate: { url: gate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1 },
    alert: { window: 20, minRequests: 10, forSeconds: 0 },
    // Every ok pair is repeated once, so logprobe_noise_floor_observed_nats{backend} exists.
    calibration: { rate: 1, minSamples: 1 },
  });
  t.after(() => lp.close());

  for (let i = 0; i < 16; i++) assert.equal(await send(lp.proxyUrl, i), 200);
  assert.equal(await send(lp.proxyUrl, 1, 'FAIL: answer 500'), 500);
  await lp.runtime.mirror!.idle();
  const res = await request(`${lp.adminUrl}/metrics`);
  assert.equal(res.statusCode, 200);
  assertComplete(parseExposition(await res.body.text()));
});

/**
 * Every rule and dashboard query finds its series, labels and values in `live` (no metric is
 * excused as "event-only": all exist from the start), and every catalogue metric has samples.
 */
function assertComplete(live: Exposition): void {
  // Not vacuous: the queries are there, and every catalogue metric is at least declared.
  assert.ok(
    rules.queries.length >= 14 && dashboard.length >= 25,
    `${rules.queries.length} rule and ${dashboard.length} dashboard queries`,
  );
  const undeclared = METRIC_CATALOG.filter((m) => live.types.get(m.name) !== m.type).map((m) => m.name);
  assert.deepEqual(undeclared, [], 'catalogue metrics missing from the live exposition (or of another type)');
  const problems = [...rules.queries, ...dashboard].flatMap((q: Query) => checkLive(q, rules.recorded, live));
  assert.deepEqual(problems, []);
  const withoutSamples = METRIC_CATALOG.filter(
    (m) => ![...live.samples.keys()].some((s) => s === m.name || s.startsWith(`${m.name}_`)),
  ).map((m) => m.name);
  assert.deepEqual(withoutSamples, [], 'metrics without a sample');
}

test('on a fresh proxy that has seen no request, every series, label and value the rules and the dashboard query exists', async (t) => {
  // Nothing listens there: nothing is sent either. The default config (mirror.routes, capture off).
  const lp = await startLogprobe({ candidate: { url: 'http://127.0.0.1:9' }, baseline: { url: 'http://127.0.0.1:9' } });
  t.after(() => lp.close());
  const res = await request(`${lp.adminUrl}/metrics`);
  assert.equal(res.statusCode, 200);
  const text = await res.body.text();
  const live = parseExposition(text);
  assertComplete(live);

  // The series the issue names, by every known label value, and the worker's state.
  const has = (name: string, labels: Record<string, string>) =>
    (live.samples.get(name) ?? []).some((s) => Object.entries(labels).every(([k, v]) => s[k] === v));
  for (const route of ['/v1/completions', '/v1/chat/completions']) {
    for (const cls of ['ambiguous', 'gray', 'systematic'])
      assert.ok(has('logprobe_flip_gap_nats_count', { route, class: cls }), `flip gap ${route} ${cls}`);
    assert.ok(has('logprobe_first_divergence_tokens_bucket', { route, le: '+Inf' }), `first divergence ${route}`);
    for (const verdict of VERDICTS)
      assert.ok(has('logprobe_verdicts_total', { route, verdict }), `verdict ${route} ${verdict}`);
    for (const outcome of MIRROR_OUTCOMES)
      assert.ok(has('logprobe_mirror_total', { route, outcome }), `outcome ${route} ${outcome}`);
    for (const backend of ['candidate', 'baseline'])
      assert.ok(has('logprobe_upstream_duration_seconds_count', { route, backend }), `upstream ${route} ${backend}`);
  }
  for (const backend of ['candidate', 'baseline'])
    assert.ok(has('logprobe_noise_floor_observed_nats', { backend }), `observed floor ${backend}`);
  // prom-client spells it `Nan`; Prometheus reads NaN in any case.
  assert.match(
    text,
    /^logprobe_noise_floor_observed_nats\{backend="candidate",model="other"\} NaN$/im,
    'not measured yet: NaN, not 0',
  );
  assert.match(text, /^logprobe_mirror_worker_up 1$/m);
});

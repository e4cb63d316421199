// Every series that the fleet rules (config/prometheus/alerts.yml) and the Grafana dashboard
// (config/grafana/logprobe.json) query is one logprobe exports (src/metrics/catalog.ts, the documented
// metrics table) or one a recording rule defines; every label they match on exists on that
// metric, and every enumerated label value (verdict, outcome, …) is one logprobe emits. A typo
// in a query otherwise shows as an empty panel or an alert that can never fire.
// (The query extraction lives in helpers/promql.ts; fleet-live-series.test.ts checks the same
// queries against a running logprobe.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { METRIC_CATALOG } from '../src/metrics/catalog.js';
import {
  baseMetrics,
  checkQuery,
  dashboardQueries,
  grafanaToPromql,
  readDashboardText,
  readRulesText,
  rulesQueries,
} from './helpers/promql.js';

const rulesText = readRulesText();
const dashboardText = readDashboardText();

const rules = rulesQueries(rulesText);
const dashboard = dashboardQueries(dashboardText);

test('the checker catches unknown series, labels and label values', () => {
  const recorded = new Map([
    ['logprobe:verdicts:rate5m', 'sum by (job, route, verdict) (rate(logprobe_verdicts_total[5m]))'],
  ]);
  const bad: Array<[string, RegExp]> = [
    ['rate(logprobe_verdict_total[5m])', /logprobe_verdict_total is not a series/],
    ['logprobe_cusum_statistic_bucket', /logprobe_cusum_statistic_bucket is not a series/],
    ['logprobe:verdict:rate5m', /not defined by a recording rule/],
    ['rate(logprobe_verdicts_total{verdict="global-shift"}[5m])', /verdict="global-shift" is never emitted/],
    ['rate(logprobe_mirror_total{outcome=~"ok|timeout"}[5m])', /outcome="timeout" is never emitted/],
    ['logprobe_cusum_statistic{route="/v1/completions"}', /has no label route/],
    ['sum by (backend) (rate(logprobe_proxy_requests_total[5m]))', /by \(backend\)/],
    ['logprobe:verdicts:rate5m{outcome="ok"}', /has no label outcome/],
    ['rate(logprobe_token_shift_nats_count{le="0.1"}[5m])', /has no label le/],
    ['up', /queries no logprobe series/],
  ];
  for (const [expr, expected] of bad) {
    const problems = checkQuery({ where: 'probe', expr }, recorded);
    assert.ok(
      problems.some((p) => expected.test(p)),
      `${expr}: expected ${expected}, got ${JSON.stringify(problems)}`,
    );
  }
  const good = [
    'sum by (le) (rate(logprobe_token_shift_nats_bucket{le="0.1", route=~"$route"}[5m]))',
    'logprobe:verdicts:rate5m{verdict=~"global_shift|early_shift"}',
    'max by (alert) (logprobe_alert_firing{alert="LogprobGlobalShift"})',
    'ALERTS{alertname=~"Logprob.*", alertstate="firing"}',
  ];
  for (const expr of good) assert.deepEqual(checkQuery({ where: 'probe', expr }, recorded), [], expr);
});

test('the rules and the dashboard read logprobe series', () => {
  // Extraction found what it should, so the checks below cannot pass on an empty list.
  assert.ok(rules.queries.length >= 14, `rules: ${rules.queries.length} queries`);
  assert.ok(dashboard.length >= 25, `dashboard: ${dashboard.length} queries`);
  assert.ok(rules.recorded.has('logprobe:verdicts:rate5m'));
  assert.ok(rules.queries.filter((q) => q.where.includes('annotation')).length >= 6, 'queries in annotation templates');
});

test('every series, label and value the alert rules query is exported by logprobe or recorded', () => {
  const problems = rules.queries.flatMap((q) => checkQuery(q, rules.recorded));
  assert.deepEqual(problems, []);
});

test('every series, label and value the dashboard queries is exported by logprobe or recorded', () => {
  const problems = dashboard
    .map((q) => ({ ...q, expr: grafanaToPromql(q.expr) }))
    .flatMap((q) => checkQuery(q, rules.recorded));
  assert.deepEqual(problems, []);
});

test('the dashboard uses every metric logprobe exports', () => {
  const used = new Set(
    dashboard.flatMap((q) => baseMetrics(grafanaToPromql(q.expr), rules.recorded).map((b) => b.spec.name)),
  );
  const unused = METRIC_CATALOG.map((m) => m.name).filter((n) => !used.has(n));
  assert.deepEqual(unused, [], 'catalog metrics with no panel in config/grafana/logprobe.json: add one');
});

test('every dashboard expression is valid PromQL (promtool)', (t) => {
  const probe = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
  if (probe.error !== undefined || probe.status !== 0) {
    if (process.env.CI) assert.fail('promtool not installed: .ci/run installs it');
    t.skip('promtool not installed: apt-get install -y prometheus');
    return;
  }
  // Each expression becomes a recording rule, so `promtool check rules` parses it.
  const dir = mkdtempSync(join(tmpdir(), 'logprobe-dash-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'dashboard-exprs.yml');
  const rulesYaml = {
    groups: [
      {
        name: 'dashboard',
        rules: dashboard.map((q, i) => ({ record: `dashboard:expr_${i}:check`, expr: grafanaToPromql(q.expr) })),
      },
    ],
  };
  writeFileSync(file, JSON.stringify(rulesYaml));
  const r = spawnSync('promtool', ['check', 'rules', file], { encoding: 'utf8' });
  const where = dashboard.map((q, i) => `expr_${i}: ${q.where}`).join('\n');
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}\n${where}`);
});

test('docs/format.md lists every metric of the catalogue, with its type and labels', async () => {
  const { readFileSync } = await import('node:fs');
  const { METRIC_CATALOG } = await import('../src/metrics/catalog.js');
  const doc = readFileSync(new URL('../docs/format.md', import.meta.url), 'utf8');
  for (const m of METRIC_CATALOG) {
    const row = doc.split('\n').find((l) => l.startsWith(`| \`${m.name}\` |`));
    assert.ok(row, `${m.name} is in docs/format.md`);
    assert.ok(
      row.includes(`| ${m.type} |`) && row.includes(`| ${m.labelNames.join(', ') || '—'} |`),
      `${m.name}: type and labels as in the catalogue`,
    );
  }
});

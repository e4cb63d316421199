// Grafana alerting provisioning (config/grafana/provisioning/alerting/) against the Prometheus
// rules it mirrors (config/prometheus/alerts.yml):
// - every Prometheus alert has a Grafana rule with the same name, `for:`, severity, thresholds
//   and runbook, a threshold condition on its query, and the dashboard's panels link to them;
// - alerts.test.yml's alert tests pass with promtool on rules made of the Grafana queries (the
//   same input series, the same expected alerts: they fire where the PromQL rules fire);
// - on a real Prometheus scraping a recorded logprobe scrape (replayed as growing counters), each
//   Grafana query evaluates and returns the series the PromQL alert's expression returns.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { needPrometheus, promQuery, startPrometheus } from './helpers/prometheus.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PROM_DIR = join(ROOT, 'config', 'prometheus');
const GRAFANA = join(ROOT, 'config', 'grafana');

interface PromRule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface GrafanaQuery {
  refId: string;
  datasourceUid: string;
  model: {
    refId: string;
    expr?: string;
    type?: string;
    expression?: string;
    conditions?: Array<{ evaluator: { type: string; params: number[] } }>;
  };
}
interface GrafanaRule {
  uid: string;
  title: string;
  condition: string;
  data: GrafanaQuery[];
  for: string;
  noDataState: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

const promRules = (
  parseYaml(readFileSync(join(PROM_DIR, 'alerts.yml'), 'utf8')) as {
    groups: Array<{ name: string; rules: PromRule[] }>;
  }
).groups.flatMap((g) => g.rules);
const promAlerts = promRules.filter((r) => r.alert !== undefined);
const grafanaDoc = parseYaml(
  readFileSync(join(GRAFANA, 'provisioning', 'alerting', 'logprobe-alerts.yaml'), 'utf8'),
) as {
  apiVersion: number;
  groups: Array<{ orgId: number; name: string; folder: string; interval: string; rules: GrafanaRule[] }>;
};
const grafanaRules = grafanaDoc.groups.flatMap((g) => g.rules);

/** Query A's PromQL and the threshold C applies to it, as one PromQL expression: `(A) > 0`. */
function grafanaExpr(rule: GrafanaRule): string {
  const a = rule.data.find((d) => d.refId === 'A');
  const c = rule.data.find((d) => d.refId === rule.condition);
  assert.ok(a?.model.expr, `${rule.title}: query A has a PromQL expr`);
  const ev = c?.model.conditions?.[0]?.evaluator;
  assert.ok(
    c && c.model.type === 'threshold' && c.model.expression === 'A' && ev,
    `${rule.title}: the condition is a threshold on A`,
  );
  const op = { gt: '>', lt: '<' }[ev.type];
  assert.ok(op, `${rule.title}: threshold type ${ev.type}`);
  return `(${a.model.expr.trim()}) ${op} ${ev.params[0]}`;
}

/** The labels a Grafana rule's query groups by (its alerts' labels besides its own). */
function groupLabels(rule: GrafanaRule): string[] {
  const m = /^\s*count by \(([^)]*)\)/.exec(rule.data.find((d) => d.refId === 'A')!.model.expr!);
  assert.ok(m, `${rule.title}: query A counts by the alert's labels`);
  return m[1]!.split(',').map((s) => s.trim());
}

/** The comparisons with a number in an expression, recording rules inlined by name: `>= 0.5`, `* 300 >= 20`. */
function thresholds(expr: string): string[] {
  return [...expr.matchAll(/(?:\*\s*\d+\s*)?(?:>=|<=|==|>|<)\s*\d+(?:\.\d+)?/g)]
    .map((m) => m[0].replace(/\s+/g, ' '))
    .sort();
}

test('every Prometheus alert has a Grafana rule with its name, for:, severity, thresholds and runbook', () => {
  assert.equal(grafanaDoc.apiVersion, 1);
  assert.deepEqual(grafanaRules.map((r) => r.title).sort(), promAlerts.map((r) => r.alert).sort());
  assert.equal(new Set(grafanaRules.map((r) => r.uid)).size, grafanaRules.length, 'unique uids');
  const records = new Map(promRules.filter((r) => r.record).map((r) => [r.record!, r.expr]));
  for (const rule of grafanaRules) {
    const prom = promAlerts.find((r) => r.alert === rule.title)!;
    assert.equal(rule.for, prom.for, `${rule.title}: for`);
    assert.equal(rule.labels.severity, prom.labels?.severity, `${rule.title}: severity`);
    assert.equal(rule.labels.service, 'logprobe', `${rule.title}: the label the notification policy routes by`);
    assert.equal(rule.annotations.runbook_url, prom.annotations?.runbook_url, `${rule.title}: runbook`);
    assert.equal(rule.noDataState, 'OK', `${rule.title}: no series means the condition does not hold`);
    for (const q of rule.data)
      assert.equal(
        q.datasourceUid,
        q.refId === 'A' ? 'prometheus' : '__expr__',
        `${rule.title} ${q.refId}: datasource`,
      );
    // The Prometheus alert's thresholds, its recording rules' included, are the Grafana query's.
    const inlined = [
      prom.expr,
      ...[...prom.expr.matchAll(/logprobe:[a-z_:0-9]+/g)].map((m) => records.get(m[0]) ?? ''),
    ].join('\n');
    assert.deepEqual(
      thresholds(rule.data.find((d) => d.refId === 'A')!.model.expr!),
      thresholds(inlined),
      `${rule.title}: thresholds`,
    );
    grafanaExpr(rule);
  }
});

test("the dashboard's panels link to the Grafana alert rules they show", () => {
  const dash = JSON.parse(readFileSync(join(GRAFANA, 'logprobe.json'), 'utf8')) as {
    panels: Array<{ title: string; links?: Array<{ title: string; url: string }> }>;
  };
  const linked = new Set(dash.panels.flatMap((p) => (p.links ?? []).map((l) => l.url)));
  for (const rule of grafanaRules)
    assert.ok(linked.has(`/alerting/grafana/${rule.uid}/view`), `a panel links to ${rule.title}`);
  const alertState = dash.panels.find((p) => p.title === 'Alert state')!;
  assert.equal(alertState.links?.length, grafanaRules.length, 'the alert state panel links to every rule');
});

test("alerts.test.yml's alert tests pass on rules made of the Grafana queries (promtool)", (t) => {
  if (!needPrometheus(t)) return;
  const dir = mkdtempSync(join(tmpdir(), 'logprobe-grafana-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const rules = {
    groups: [
      {
        name: 'grafana',
        rules: grafanaRules.map((r) => ({ alert: r.title, expr: grafanaExpr(r), for: r.for, labels: r.labels })),
      },
    ],
  };
  writeFileSync(join(dir, 'grafana-rules.yml'), stringifyYaml(rules, { lineWidth: 0 }));
  const tests = parseYaml(readFileSync(join(PROM_DIR, 'alerts.test.yml'), 'utf8')) as {
    rule_files: string[];
    group_eval_order?: string[];
    tests: Array<{
      promql_expr_test?: unknown;
      alert_rule_test?: Array<{
        alertname: string;
        exp_alerts: Array<{ exp_labels: Record<string, string>; exp_annotations?: unknown }>;
      }>;
    }>;
  };
  tests.rule_files = ['grafana-rules.yml'];
  delete tests.group_eval_order;
  let cases = 0;
  for (const tc of tests.tests) {
    delete tc.promql_expr_test; // the recording rules' own tests: Grafana's queries inline them
    for (const a of tc.alert_rule_test ?? []) {
      cases++;
      // Grafana's annotations are its own texts; the labels are the Prometheus alert's plus `service`.
      for (const e of a.exp_alerts) {
        delete e.exp_annotations;
        e.exp_labels = { ...e.exp_labels, service: 'logprobe' };
      }
    }
  }
  assert.ok(cases >= 20, `${cases} alert test cases`);
  writeFileSync(join(dir, 'grafana.test.yml'), stringifyYaml(tests, { lineWidth: 0 }));
  const r = spawnSync('promtool', ['test', 'rules', 'grafana.test.yml'], {
    cwd: dir,
    encoding: 'utf8',
    timeout: 120_000,
  });
  assert.equal(r.status, 0, `promtool test rules failed on the Grafana queries:\n${r.stdout}${r.stderr}`);
});

/**
 * A recorded logprobe scrape, two models (the fixture's model labels were added by hand for
 * issue #35's per-model slices): on llama-3-8b a state shift, a cache-path bug and a
 * decode-vs-prefill bug on the candidate, every alert of its in-process detectors firing; on
 * sql-adapter only noise. Served three ways: `as-recorded` with its counters growing
 * (value × seconds since start, so every rate is the recorded value per second), `rates-only`
 * the same with the in-process detectors' gauges at 0 (only the fleet rates can fire), and
 * `worker-down` frozen (counters still) with the worker down and work queued.
 */
function replayScrape(): Promise<Server> {
  const recorded = readFileSync(join(ROOT, 'test', 'fixtures', 'scrape-shift-and-cache.prom'), 'utf8').split('\n');
  const counters = new Set(recorded.filter((l) => /^# TYPE \S+ counter$/.test(l)).map((l) => l.split(' ')[2]));
  const started = Date.now();
  const server = createServer((req, res) => {
    const variant = req.url?.slice(1);
    const k = Math.max(1, Math.round((Date.now() - started) / 1000));
    const lines = recorded.map((l) => {
      if (l.startsWith('#') || l === '') return l;
      const name = l.split(/[{ ]/, 1)[0]!;
      const value = Number(l.slice(l.lastIndexOf(' ') + 1));
      const head = l.slice(0, l.lastIndexOf(' '));
      if (variant === 'rates-only' && /^logprobe_(alert_firing|cusum_statistic|window_global_shift_ratio)$/.test(name))
        return `${head} 0`;
      if (variant === 'worker-down' && name === 'logprobe_mirror_worker_up') return `${head} 0`;
      if (variant === 'worker-down' && name === 'logprobe_mirror_queue_depth') return `${head} 5`;
      if (counters.has(name) && variant !== 'worker-down') return `${head} ${value * k}`;
      return l;
    });
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
    res.end(lines.join('\n'));
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

const key = (labels: Record<string, string>, by: string[]) => JSON.stringify(by.map((l) => [l, labels[l] ?? '']));

test('on a real Prometheus over a recorded scrape, each Grafana query returns the series its PromQL alert returns', async (t) => {
  if (!needPrometheus(t)) return;
  const scrape = await replayScrape();
  t.after(() => new Promise((r) => scrape.close(r)));
  const target = `127.0.0.1:${(scrape.address() as AddressInfo).port}`;
  const variants = ['as-recorded', 'rates-only', 'worker-down'];
  const prom = await startPrometheus({
    config: {
      global: { scrape_interval: '1s', evaluation_interval: '1s' },
      rule_files: ['alerts.yml'],
      scrape_configs: variants.map((v) => ({
        job_name: v,
        metrics_path: `/${v}`,
        static_configs: [{ targets: [target] }],
      })),
    },
    files: { 'alerts.yml': readFileSync(join(PROM_DIR, 'alerts.yml'), 'utf8') },
  });
  t.after(() => prom.close());
  // Rates need two samples of every variant, the recording rules an evaluation after them.
  const deadline = Date.now() + 30_000;
  while (
    (await promQuery(prom.url, 'count(count_over_time(up[1m]) >= 4)').catch(() => []))[0]?.value !== variants.length
  ) {
    assert.ok(Date.now() < deadline, `Prometheus never scraped every variant:\n${prom.output()}`);
    await new Promise((r) => setTimeout(r, 500));
  }
  await new Promise((r) => setTimeout(r, 2500));

  const expected: Record<string, string[]> = {
    LogprobGlobalShift: ['as-recorded', 'rates-only', 'worker-down'],
    LogprobSelfInconsistency: ['as-recorded', 'rates-only', 'worker-down'],
    LogprobPathInconsistency: ['as-recorded', 'rates-only', 'worker-down'],
    LogprobSustainedShift: ['as-recorded', 'worker-down'],
    LogprobMirrorStalled: ['worker-down'],
    LogprobMirrorWorkerDown: ['worker-down'],
    LogprobProxyErrors: [],
    LogprobPromptMismatch: [],
    LogprobCanaryShift: [],
  };
  for (const rule of grafanaRules) {
    const by = groupLabels(rule);
    const prometheus = promAlerts.find((r) => r.alert === rule.title)!.expr;
    const fromProm = (await promQuery(prom.url, prometheus)).map((s) => key(s.metric, by)).sort();
    const fromGrafana = (await promQuery(prom.url, grafanaExpr(rule))).map((s) => key(s.metric, by)).sort();
    assert.deepEqual(fromGrafana, fromProm, `${rule.title}: the same series as the Prometheus alert`);
    assert.deepEqual(
      [...new Set((await promQuery(prom.url, grafanaExpr(rule))).map((s) => s.metric.job))].sort(),
      expected[rule.title],
      `${rule.title}: fires on`,
    );
    // Per model: the shifted model's alerts fire, the clean model's stay silent.
    if (by.includes('model'))
      assert.deepEqual(
        [...new Set((await promQuery(prom.url, grafanaExpr(rule))).map((s) => s.metric.model))],
        expected[rule.title]!.length > 0 ? ['llama-3-8b'] : [],
        `${rule.title}: fires for the shifted model only`,
      );
  }
});

// Every series that the fleet rules (config/prometheus/alerts.yml) and the Grafana dashboard
// (config/grafana/logprobe.json) query is one logprobe exports (src/metrics/catalog.ts, design.md's
// metrics table) or one a recording rule defines; every label they match on exists on that
// metric, and every enumerated label value (verdict, outcome, …) is one logprobe emits. A typo
// in a query otherwise shows as an empty panel or an alert that can never fire.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { parse as parseYaml } from 'yaml';
import { METRIC_CATALOG, MIRROR_OUTCOMES, ALERT_NAMES, type MetricSpec } from '../src/metrics/catalog.js';

const root = new URL('../', import.meta.url);
const rulesText = readFileSync(new URL('config/prometheus/alerts.yml', root), 'utf8');
const dashboardText = readFileSync(new URL('config/grafana/logprobe.json', root), 'utf8');

/** Labels Prometheus adds to every scraped series (target labels), or that recording keeps. */
const TARGET_LABELS = new Set(['job', 'instance', 'namespace', 'pod']);
/** Prometheus' own series that the dashboard may use besides logprobe's. */
const PROMETHEUS_SERIES = new Map<string, ReadonlySet<string>>([['ALERTS', new Set(['alertname', 'alertstate', 'severity'])]]);

/** design.md: the values each bounded label takes. status_class: `2xx` … `5xx`, `aborted` (499). */
const LABEL_VALUES: Record<string, (v: string) => boolean> = {
  verdict: (v) => ['incomparable', 'tokenizer_mismatch', 'identical', 'noise', 'early_shift', 'global_shift', 'local_shift'].includes(v),
  outcome: (v) => (MIRROR_OUTCOMES as readonly string[]).includes(v),
  alert: (v) => (ALERT_NAMES as readonly string[]).includes(v),
  backend: (v) => v === 'candidate' || v === 'baseline',
  class: (v) => ['ambiguous', 'gray', 'systematic'].includes(v),
  status_class: (v) => /^[1-5]xx$/.test(v) || v === 'aborted',
};

interface Query {
  /** Where it comes from, for messages: a rule name or a panel title and refId. */
  where: string;
  expr: string;
}

interface RuleFile {
  groups: Array<{ name: string; rules: Array<{ record?: string; alert?: string; expr: string; annotations?: Record<string, string> }> }>;
}

function rulesQueries(text: string): { queries: Query[]; recorded: Map<string, string> } {
  const doc = parseYaml(text) as RuleFile;
  const queries: Query[] = [];
  const recorded = new Map<string, string>();
  for (const group of doc.groups) {
    for (const rule of group.rules) {
      const name = rule.record ?? rule.alert ?? '?';
      queries.push({ where: `rule ${name}`, expr: rule.expr });
      if (rule.record) recorded.set(rule.record, rule.expr);
      // Annotation templates run queries too (`query` function, and runbook hints).
      for (const [key, value] of Object.entries(rule.annotations ?? {})) {
        for (const q of templateQueries(value)) queries.push({ where: `rule ${name} annotation ${key}`, expr: q });
      }
    }
  }
  return { queries, recorded };
}

/** PromQL inside an annotation: `printf "…" … | query` strings and `backquoted` hints. */
function templateQueries(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/printf\s+"((?:[^"\\]|\\.)*)"[^|}]*\|\s*query\b/g)) {
    out.push((m[1] as string).replace(/\\"/g, '"').replace(/%q/g, '"x"'));
  }
  for (const m of text.matchAll(/`([^`]+)`/g)) {
    const q = m[1] as string;
    if (/\blogprobe[_:]/.test(q) && /[({]/.test(q)) out.push(q);
  }
  return out;
}

interface Panel {
  title?: string;
  type?: string;
  targets?: Array<{ expr?: string; refId?: string }>;
  panels?: Panel[];
}

function dashboardQueries(text: string): Query[] {
  const dash = JSON.parse(text) as {
    panels: Panel[];
    templating: { list: Array<{ name: string; type: string; query?: unknown; definition?: string }> };
    annotations: { list: Array<{ name: string; expr?: string }> };
  };
  const queries: Query[] = [];
  const walk = (panels: Panel[]): void => {
    for (const p of panels) {
      for (const t of p.targets ?? []) {
        if (t.expr) queries.push({ where: `panel "${p.title}" ${t.refId ?? ''}`, expr: t.expr });
      }
      if (p.panels) walk(p.panels);
    }
  };
  walk(dash.panels);
  for (const v of dash.templating.list) {
    if (v.type !== 'query') continue;
    const q = typeof v.query === 'string' ? v.query : (v.query as { query?: string } | undefined)?.query;
    // label_values(metric{…}, label): the selector is PromQL, the label must exist.
    const m = q ? /^label_values\((.*),\s*([a-zA-Z_]\w*)\)$/.exec(q) : null;
    assert.ok(m, `variable ${v.name}: expected label_values(selector, label), got ${q}`);
    queries.push({ where: `variable ${v.name}`, expr: `count by (${m[2]}) (${m[1]})` });
  }
  for (const a of dash.annotations.list) if (a.expr) queries.push({ where: `annotation ${a.name}`, expr: a.expr });
  return queries;
}

/** Grafana's variables replaced by values PromQL accepts. */
function grafanaToPromql(expr: string): string {
  return expr.replace(/\$__rate_interval|\$__interval|\$__range/g, '5m').replace(/\$\{?(\w+)\}?/g, 'var_$1');
}

/** Removes string literals, so that label values are not read as metric names. */
function stripStrings(expr: string): string {
  return expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');
}

const CATALOG = new Map<string, MetricSpec>(METRIC_CATALOG.map((m) => [m.name, m]));

/** The catalogue entry for a series name: `x_bucket`, `x_sum`, `x_count` of a histogram x too. */
function resolveSeries(name: string): { spec: MetricSpec; suffix: string } | undefined {
  const direct = CATALOG.get(name);
  if (direct) return { spec: direct, suffix: '' };
  const m = /^(.*)(_bucket|_sum|_count)$/.exec(name);
  const base = m ? CATALOG.get(m[1] as string) : undefined;
  if (m && base?.type === 'histogram') return { spec: base, suffix: m[2] as string };
  return undefined;
}

/** logprobe's metrics an expression reads, through the recording rules it uses. */
function baseMetrics(expr: string, recorded: Map<string, string>, seen = new Set<string>()): Array<{ spec: MetricSpec; suffix: string }> {
  const out: Array<{ spec: MetricSpec; suffix: string }> = [];
  for (const name of seriesNames(expr)) {
    if (recorded.has(name) && !seen.has(name)) {
      seen.add(name);
      out.push(...baseMetrics(recorded.get(name) as string, recorded, seen));
    }
    const r = resolveSeries(name);
    if (r) out.push(r);
  }
  return out;
}

/** Identifiers that name series: logprobe's (`logprobe_…`, `logprobe:…`) and Prometheus' own. */
function seriesNames(expr: string): string[] {
  const names = new Set<string>();
  for (const m of stripStrings(expr).matchAll(/(?<![\w:])(logprobe[_:][a-zA-Z0-9_:]*|ALERTS)(?![\w:])/g)) names.add(m[1] as string);
  return [...names];
}

/**
 * Checks one expression; returns the problems found. Exported series, recording rules, label
 * names in selectors and in by/without/on/ignoring clauses, and enumerated label values.
 */
function checkQuery(q: Query, recorded: Map<string, string>): string[] {
  const problems: string[] = [];
  const expr = q.expr;
  const names = seriesNames(expr);
  if (names.length === 0) problems.push(`${q.where}: queries no logprobe series: ${expr}`);
  for (const name of names) {
    if (name.includes(':')) {
      if (!recorded.has(name)) problems.push(`${q.where}: ${name} is not defined by a recording rule`);
    } else if (name !== 'ALERTS' && !resolveSeries(name)) {
      problems.push(`${q.where}: ${name} is not a series logprobe exports`);
    }
  }

  // Labels every metric of this expression could carry, for the grouping clauses.
  const bases = baseMetrics(expr, recorded);
  const anyLabels = new Set<string>([...TARGET_LABELS]);
  for (const b of bases) {
    for (const l of b.spec.labelNames) anyLabels.add(l);
    if (b.suffix === '_bucket') anyLabels.add('le');
  }
  for (const name of names) for (const l of PROMETHEUS_SERIES.get(name) ?? []) anyLabels.add(l);

  // Selectors: name{label op "value", …} — each label on that metric, each value possible.
  for (const m of expr.matchAll(/(logprobe[_:][a-zA-Z0-9_:]*|ALERTS)\s*\{([^}]*)\}/g)) {
    const name = m[1] as string;
    const own = new Set<string>([...TARGET_LABELS]);
    if (name.includes(':')) {
      for (const b of baseMetrics(name, recorded)) for (const l of b.spec.labelNames) own.add(l);
    } else if (PROMETHEUS_SERIES.has(name)) {
      for (const l of PROMETHEUS_SERIES.get(name) ?? []) own.add(l);
    } else {
      const r = resolveSeries(name);
      if (!r) continue;
      for (const l of r.spec.labelNames) own.add(l);
      if (r.suffix === '_bucket') own.add('le');
    }
    for (const matcher of (m[2] as string).matchAll(/([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)) {
      const [, label, op, value] = matcher as unknown as [string, string, string, string];
      if (!own.has(label)) problems.push(`${q.where}: ${name} has no label ${label}`);
      const valid = LABEL_VALUES[label];
      if (!valid || value.includes('$')) continue;
      const alternatives = op === '=~' || op === '!~' ? value.split('|') : [value];
      for (const alt of alternatives) {
        if (/^[\w-]+$/.test(alt) && !valid(alt)) problems.push(`${q.where}: ${label}="${alt}" is never emitted`);
      }
    }
  }

  // Grouping and matching clauses name labels that exist on some metric of the expression.
  for (const m of stripStrings(expr).matchAll(/\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g)) {
    for (const label of (m[2] as string).split(',').map((s) => s.trim()).filter(Boolean)) {
      if (!anyLabels.has(label)) problems.push(`${q.where}: ${m[1]} (${label}): no metric here has that label`);
    }
  }
  return problems;
}

const rules = rulesQueries(rulesText);
const dashboard = dashboardQueries(dashboardText);

test('the checker catches unknown series, labels and label values', () => {
  const recorded = new Map([['logprobe:verdicts:rate5m', 'sum by (job, route, verdict) (rate(logprobe_verdicts_total[5m]))']]);
  const bad: Array<[string, RegExp]> = [
    ['rate(logprobe_verdict_total[5m])', /logprobe_verdict_total is not a series/],
    ['logprobe_cusum_statistic_bucket', /logprobe_cusum_statistic_bucket is not a series/],
    ['logprobe:verdict:rate5m', /not defined by a recording rule/],
    ['rate(logprobe_verdicts_total{verdict="global-shift"}[5m])', /verdict="global-shift" is never emitted/],
    ['rate(logprobe_mirror_total{outcome=~"ok|timeout"}[5m])', /outcome="timeout" is never emitted/],
    ['logprobe_cusum_statistic{route="/v1/completions"}', /has no label route/],
    ['sum by (backend) (rate(logprobe_verdicts_total[5m]))', /by \(backend\)/],
    ['logprobe:verdicts:rate5m{outcome="ok"}', /has no label outcome/],
    ['rate(logprobe_token_shift_nats_count{le="0.1"}[5m])', /has no label le/],
    ['up', /queries no logprobe series/],
  ];
  for (const [expr, expected] of bad) {
    const problems = checkQuery({ where: 'probe', expr }, recorded);
    assert.ok(problems.some((p) => expected.test(p)), `${expr}: expected ${expected}, got ${JSON.stringify(problems)}`);
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
  const problems = dashboard.map((q) => ({ ...q, expr: grafanaToPromql(q.expr) })).flatMap((q) => checkQuery(q, rules.recorded));
  assert.deepEqual(problems, []);
});

test('the dashboard uses every metric logprobe exports', () => {
  const used = new Set(dashboard.flatMap((q) => baseMetrics(grafanaToPromql(q.expr), rules.recorded).map((b) => b.spec.name)));
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
    groups: [{ name: 'dashboard', rules: dashboard.map((q, i) => ({ record: `dashboard:expr_${i}:check`, expr: grafanaToPromql(q.expr) })) }],
  };
  writeFileSync(file, JSON.stringify(rulesYaml));
  const r = spawnSync('promtool', ['check', 'rules', file], { encoding: 'utf8' });
  const where = dashboard.map((q, i) => `expr_${i}: ${q.where}`).join('\n');
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}\n${where}`);
});

// What the fleet rules (config/prometheus/alerts.yml) and the Grafana dashboard
// (config/grafana/logprobe.json) query: the PromQL expressions they hold (rule expressions,
// annotation templates, panel targets, template variables), the series and labels those read, and
// a static check against logprobe's metric catalogue. Used by test/fleet-series.test.ts (against
// the catalogue) and test/fleet-live-series.test.ts (against a running logprobe's /metrics).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { METRIC_CATALOG, MIRROR_OUTCOMES, ALERT_NAMES, type MetricSpec } from '../../src/metrics/catalog.js';

const root = new URL('../../', import.meta.url);

/** The rule file's text (config/prometheus/alerts.yml). */
export function readRulesText(): string {
  return readFileSync(new URL('config/prometheus/alerts.yml', root), 'utf8');
}

/** The dashboard's JSON text (config/grafana/logprobe.json). */
export function readDashboardText(): string {
  return readFileSync(new URL('config/grafana/logprobe.json', root), 'utf8');
}
/** Labels Prometheus adds to every scraped series (target labels), or that recording keeps. */
export const TARGET_LABELS = new Set(['job', 'instance', 'namespace', 'pod']);
/** Prometheus' own series that the dashboard may use besides logprobe's. */
export const PROMETHEUS_SERIES = new Map<string, ReadonlySet<string>>([
  // With the labels of the alerts that carry them (config/prometheus/alerts.yml): backend, model.
  ['ALERTS', new Set(['alertname', 'alertstate', 'severity', 'backend', 'model'])],
]);

/**
 * Labels whose values are names from the traffic or the config, not an enumeration: `model` (the
 * request's model or adapter, bounded by slices.models / slices.maxModels, the rest `other`). A
 * query may select any value of them; an annotation template's `model=%q` is the alert's own.
 */
export const FREE_VALUED_LABELS = new Set(['model']);
/** docs/format.md: the values each bounded label takes. status_class: `2xx` … `5xx`, `aborted` (499). */
export const LABEL_VALUES: Record<string, (v: string) => boolean> = {
  verdict: (v) =>
    [
      'incomparable',
      'prompt_mismatch',
      'tokenizer_mismatch',
      'identical',
      'noise',
      'early_shift',
      'global_shift',
      'local_shift',
      'self_inconsistent',
      'path_inconsistent',
    ].includes(v),
  kind: (v) => v === 'pair' || v === 'self' || v === 'path' || v === 'canary',
  cache: (v) => v === 'hit' || v === 'miss' || v === 'unknown',
  outcome: (v) => (MIRROR_OUTCOMES as readonly string[]).includes(v),
  alert: (v) => (ALERT_NAMES as readonly string[]).includes(v),
  backend: (v) => v === 'candidate' || v === 'baseline',
  class: (v) => ['ambiguous', 'gray', 'systematic'].includes(v),
  status_class: (v) => /^[1-5]xx$/.test(v) || v === 'aborted',
};

export interface Query {
  /** Where it comes from, for messages: a rule name or a panel title and refId. */
  where: string;
  expr: string;
}

export interface RuleFile {
  groups: Array<{
    name: string;
    rules: Array<{ record?: string; alert?: string; expr: string; annotations?: Record<string, string> }>;
  }>;
}

export function rulesQueries(text: string): { queries: Query[]; recorded: Map<string, string> } {
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

/** A value of each of our labels that an alert's `$labels` may carry, for templates' queries. */
const EXAMPLE_VALUES: Record<string, string> = { backend: 'candidate' };

/** PromQL inside an annotation: `printf "…" … | query` strings and `backquoted` hints. */
export function templateQueries(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/printf\s+"((?:[^"\\]|\\.)*)"[^|}]*\|\s*query\b/g)) {
    // `$labels.backend` and the like stand for a value the alert carries: a real one of ours.
    out.push(
      (m[1] as string)
        .replace(/\\"/g, '"')
        .replace(/(\w+)=%q/g, (_, name: string) => `${name}="${EXAMPLE_VALUES[name] ?? 'x'}"`)
        .replace(/%q/g, '"x"'),
    );
  }
  for (const m of text.matchAll(/`([^`]+)`/g)) {
    const q = m[1] as string;
    if (/\blogprobe[_:]/.test(q) && /[({]/.test(q)) out.push(q);
  }
  return out;
}

export interface Panel {
  title?: string;
  type?: string;
  targets?: Array<{ expr?: string; refId?: string }>;
  panels?: Panel[];
}

export function dashboardQueries(text: string): Query[] {
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
export function grafanaToPromql(expr: string): string {
  return expr.replace(/\$__rate_interval|\$__interval|\$__range/g, '5m').replace(/\$\{?(\w+)\}?/g, 'var_$1');
}

/** Removes string literals, so that label values are not read as metric names. */
export function stripStrings(expr: string): string {
  return expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');
}

export const CATALOG = new Map<string, MetricSpec>(METRIC_CATALOG.map((m) => [m.name, m]));

/** The catalogue entry for a series name: `x_bucket`, `x_sum`, `x_count` of a histogram x too. */
export function resolveSeries(name: string): { spec: MetricSpec; suffix: string } | undefined {
  const direct = CATALOG.get(name);
  if (direct) return { spec: direct, suffix: '' };
  const m = /^(.*)(_bucket|_sum|_count)$/.exec(name);
  const base = m ? CATALOG.get(m[1] as string) : undefined;
  if (m && base?.type === 'histogram') return { spec: base, suffix: m[2] as string };
  return undefined;
}

/** logprobe's metrics an expression reads, through the recording rules it uses. */
export function baseMetrics(
  expr: string,
  recorded: Map<string, string>,
  seen = new Set<string>(),
): Array<{ spec: MetricSpec; suffix: string }> {
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
export function seriesNames(expr: string): string[] {
  const names = new Set<string>();
  for (const m of stripStrings(expr).matchAll(/(?<![\w:])(logprobe[_:][a-zA-Z0-9_:]*|ALERTS)(?![\w:])/g))
    names.add(m[1] as string);
  return [...names];
}

/**
 * Checks one expression; returns the problems found. Exported series, recording rules, label
 * names in selectors and in by/without/on/ignoring clauses, and enumerated label values.
 */
export function checkQuery(q: Query, recorded: Map<string, string>): string[] {
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
    for (const label of (m[2] as string)
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)) {
      if (!anyLabels.has(label)) problems.push(`${q.where}: ${m[1]} (${label}): no metric here has that label`);
    }
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------
// The same queries against a running logprobe: its /metrics text instead of the catalogue.

/** A Prometheus text exposition: sample label sets by series name, and the declared types. */
export interface Exposition {
  /** Series name (`x`, `x_bucket`, `x_sum`, `x_count`) → the label sets of its samples. */
  readonly samples: ReadonlyMap<string, ReadonlyArray<Readonly<Record<string, string>>>>;
  /** Metric name → `# TYPE` (counter, gauge, histogram, …). */
  readonly types: ReadonlyMap<string, string>;
}

/** Parses a text exposition (format 0.0.4, as prom-client writes it). */
export function parseExposition(text: string): Exposition {
  const samples = new Map<string, Array<Record<string, string>>>();
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    const type = /^# TYPE ([a-zA-Z_:][\w:]*) (\w+)/.exec(line);
    if (type) {
      types.set(type[1] as string, type[2] as string);
      continue;
    }
    if (line.startsWith('#') || line.trim() === '') continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?\s+\S+/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1] as string] = (l[2] as string).replace(/\\(.)/g, (_s, c: string) => (c === 'n' ? '\n' : c));
    const name = m[1] as string;
    let list = samples.get(name);
    if (!list) samples.set(name, (list = []));
    list.push(labels);
  }
  return { samples, types };
}

/** One label matcher of a selector: `series{label op "value"}`. */
export interface Matcher {
  series: string;
  label: string;
  op: '=' | '!=' | '=~' | '!~';
  value: string;
}

/** The label matchers of every logprobe (and ALERTS) selector in an expression. */
export function selectorMatchers(expr: string): Matcher[] {
  const out: Matcher[] = [];
  for (const m of expr.matchAll(/(logprobe[_:][a-zA-Z0-9_:]*|ALERTS)\s*\{([^}]*)\}/g)) {
    for (const matcher of (m[2] as string).matchAll(/([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)) {
      out.push({
        series: m[1] as string,
        label: matcher[1] as string,
        op: matcher[2] as Matcher['op'],
        value: matcher[3] as string,
      });
    }
  }
  return out;
}

/** The labels named in by/without/on/ignoring/group_left/group_right clauses. */
export function groupingLabels(expr: string): Array<{ clause: string; label: string }> {
  const out: Array<{ clause: string; label: string }> = [];
  for (const m of stripStrings(expr).matchAll(/\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g)) {
    for (const label of (m[2] as string)
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean))
      out.push({ clause: m[1] as string, label });
  }
  return out;
}

/**
 * Checks one expression against a live exposition; returns the problems found:
 *  - every logprobe series it reads (through the recording rules it uses; a histogram's
 *    `_bucket`/`_sum`/`_count` as written) has samples;
 *  - every label a selector matches on, or a by/on/… clause names, is carried by live samples of
 *    those series (target labels — job, instance, namespace, pod — are Prometheus', not ours);
 *  - every literal value an `=` or `=~` matcher selects (`verdict=~"global_shift|early_shift"`,
 *    `le="0.1"`, `status_class="5xx"`) occurs on a live sample.
 * `eventOnly` names metrics that have no sample until their event happens (a label value is only
 * known then); for those a `# TYPE` declaration of the right type is enough while no sample exists.
 */
export function checkLive(
  q: Query,
  recorded: Map<string, string>,
  live: Exposition,
  eventOnly: ReadonlyMap<string, string> = new Map(),
): string[] {
  const problems: string[] = [];
  const declaredOnly = new Set<string>();
  const seriesOf = (name: string): string[] => baseMetrics(name, recorded).map((b) => b.spec.name + b.suffix);
  const samplesOf = (names: readonly string[]) => names.flatMap((n) => live.samples.get(n) ?? []);

  const bases = baseMetrics(q.expr, recorded);
  for (const b of bases) {
    const series = b.spec.name + b.suffix;
    if ((live.samples.get(series) ?? []).length > 0) continue;
    if (eventOnly.has(b.spec.name) && live.types.get(b.spec.name) === b.spec.type) {
      declaredOnly.add(series);
      continue;
    }
    problems.push(
      live.types.has(b.spec.name)
        ? `${q.where}: ${series} is declared but has no sample in the live exposition`
        : `${q.where}: ${series} is not in the live exposition at all`,
    );
  }

  for (const m of selectorMatchers(q.expr)) {
    if (m.series === 'ALERTS' || TARGET_LABELS.has(m.label)) continue;
    const names = seriesOf(m.series);
    if (names.length > 0 && names.every((n) => declaredOnly.has(n))) continue;
    const carrying = samplesOf(names).filter((s) => m.label in s);
    if (carrying.length === 0) {
      if (samplesOf(names).length > 0)
        problems.push(`${q.where}: no live sample of ${m.series} carries the label ${m.label}`);
      continue;
    }
    if ((m.op !== '=' && m.op !== '=~') || /\$|\bvar_/.test(m.value) || FREE_VALUED_LABELS.has(m.label)) continue;
    const alternatives = m.op === '=~' ? m.value.split('|') : [m.value];
    for (const alt of alternatives) {
      if (!/^[\w.+-]+$/.test(alt)) continue; // a real regex (`Logprob.*`): no literal value to look for
      if (!carrying.some((s) => s[m.label] === alt))
        problems.push(`${q.where}: ${m.series}{${m.label}="${alt}"} has no live sample`);
    }
  }

  const prometheusLabels = new Set(seriesNames(q.expr).flatMap((n) => [...(PROMETHEUS_SERIES.get(n) ?? [])]));
  const liveSamples = samplesOf(bases.map((b) => b.spec.name + b.suffix));
  for (const g of groupingLabels(q.expr)) {
    if (TARGET_LABELS.has(g.label) || prometheusLabels.has(g.label)) continue;
    if (liveSamples.some((s) => g.label in s)) continue;
    // A label only an event-only metric carries, declared in the catalogue, cannot be seen yet.
    if (
      bases.some(
        (b) => declaredOnly.has(b.spec.name + b.suffix) && (b.spec.labelNames as readonly string[]).includes(g.label),
      )
    )
      continue;
    problems.push(`${q.where}: ${g.clause} (${g.label}): no live sample here carries that label`);
  }
  return problems;
}

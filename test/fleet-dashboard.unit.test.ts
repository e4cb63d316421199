// The Grafana dashboard (config/grafana/logprobe.json) imports anywhere (the datasource is a
// variable), shows what issue #7 lists, and draws the same thresholds as the alert rules, which
// in turn match logprobe's config defaults (a drift would show a line where nothing fires).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { buildConfig } from '../src/config/load.js';

interface Target {
  datasource?: { type?: string; uid?: string };
  expr?: string;
  format?: string;
  refId?: string;
}
interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type?: string; uid?: string };
  gridPos: { x: number; y: number; w: number; h: number };
  targets?: Target[];
  fieldConfig?: {
    defaults?: {
      thresholds?: { steps: Array<{ value: number | null; color: string }> };
      custom?: { thresholdsStyle?: { mode: string } };
    };
  };
  options?: { calculate?: boolean };
}
interface Dashboard {
  uid: string;
  title: string;
  schemaVersion: number;
  panels: Panel[];
  templating: { list: Array<{ name: string; type: string; query?: unknown }> };
  __inputs?: unknown;
}

const root = new URL('../', import.meta.url);
const dash = JSON.parse(readFileSync(new URL('config/grafana/logprobe.json', root), 'utf8')) as Dashboard;
const rules = parseYaml(readFileSync(new URL('config/prometheus/alerts.yml', root), 'utf8')) as {
  groups: Array<{
    rules: Array<{
      alert?: string;
      record?: string;
      expr: string;
      for?: string;
      labels?: Record<string, string>;
      annotations?: Record<string, string>;
    }>;
  }>;
};
const defaults = buildConfig({});

const panels = dash.panels.filter((p) => p.type !== 'row');

function panel(titlePattern: RegExp): Panel {
  const found = panels.filter((p) => titlePattern.test(p.title));
  assert.equal(
    found.length,
    1,
    `one panel titled ${titlePattern}, found ${found.map((p) => p.title).join(', ') || 'none'}`,
  );
  return found[0] as Panel;
}

function thresholdValues(p: Panel): number[] {
  const steps = p.fieldConfig?.defaults?.thresholds?.steps ?? [];
  return steps.map((s) => s.value).filter((v): v is number => typeof v === 'number');
}

function alertRule(name: string) {
  const rule = rules.groups.flatMap((g) => g.rules).find((r) => r.alert === name);
  assert.ok(rule, `alert ${name} exists`);
  return rule;
}

/** The number compared against `left` in an expression (`left >= 0.5` → 0.5). */
function thresholdAfter(expr: string, left: string): number {
  const escaped = left.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const m = new RegExp(`${escaped}\\s*(?:>=|>)\\s*([0-9.]+)`).exec(expr);
  assert.ok(m, `${left} > N in ${expr}`);
  return Number(m[1]);
}

test('the datasource is a variable: no panel or query names a fixed datasource', () => {
  const ds = dash.templating.list.find((v) => v.name === 'datasource');
  assert.ok(ds, 'a datasource variable');
  assert.equal(ds.type, 'datasource');
  assert.equal(ds.query, 'prometheus');
  for (const p of panels) {
    assert.deepEqual(p.datasource, { type: 'prometheus', uid: '${datasource}' }, `panel ${p.title}`);
    for (const t of p.targets ?? [])
      assert.deepEqual(t.datasource, { type: 'prometheus', uid: '${datasource}' }, `panel ${p.title} ${t.refId}`);
  }
  assert.equal(dash.__inputs, undefined, 'no __inputs: provisioning cannot fill them, and the variable does the job');
  assert.ok(dash.schemaVersion >= 36);
  assert.equal(dash.uid, 'logprobe');
});

test('panels have unique ids and do not overlap on the 24-column grid', () => {
  const ids = dash.panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length, 'unique ids');
  for (const [i, a] of dash.panels.entries()) {
    assert.ok(a.gridPos.x >= 0 && a.gridPos.x + a.gridPos.w <= 24, `${a.title} fits the grid`);
    for (const b of dash.panels.slice(i + 1)) {
      const overlap =
        a.gridPos.x < b.gridPos.x + b.gridPos.w &&
        b.gridPos.x < a.gridPos.x + a.gridPos.w &&
        a.gridPos.y < b.gridPos.y + b.gridPos.h &&
        b.gridPos.y < a.gridPos.y + a.gridPos.h;
      assert.ok(!overlap, `${a.title} overlaps ${b.title}`);
    }
  }
});

test("the issue's panels are there: verdict mix, heatmaps, flips, detectors, alerts, mirror, upstreams", () => {
  assert.match(panel(/^Verdict mix$/).targets?.[0]?.expr ?? '', /sum by \(verdict\) \(rate\(logprobe_verdicts_total/);
  for (const [title, metric] of [
    [/^Position shift$/, 'logprobe_token_shift_nats_bucket'],
    [/^Cross-path diff$/, 'logprobe_token_crosspath_diff_nats_bucket'],
  ] as const) {
    const p = panel(title);
    assert.equal(p.type, 'heatmap');
    assert.equal(p.options?.calculate, false, 'buckets come from the histogram, not from Grafana');
    const t = p.targets?.[0];
    assert.equal(t?.format, 'heatmap');
    assert.match(t?.expr ?? '', new RegExp(`^sum by \\(le\\) \\(rate\\(${metric}\\{`));
  }
  assert.match(panel(/^Flips by class$/).targets?.[0]?.expr ?? '', /sum by \(class\)/);
  assert.match(
    panel(/^Alert state$/)
      .targets?.map((t) => t.expr)
      .join(' ') ?? '',
    /logprobe_alert_firing/,
  );
  assert.match(panel(/^Mirror outcomes$/).targets?.[0]?.expr ?? '', /sum by \(outcome\) \(rate\(logprobe_mirror_total/);
  assert.match(panel(/^Mirror queue depth$/).targets?.[0]?.expr ?? '', /logprobe_mirror_queue_depth/);
  assert.match(
    panel(/^Upstream latency by backend$/).targets?.[0]?.expr ?? '',
    /sum by \(backend, le\) \(rate\(logprobe_upstream_duration_seconds_bucket/,
  );
});

test('the window ratio and CUSUM panels draw the thresholds the rules and the config use', () => {
  const ratio = panel(/^Pooled shifted share$/);
  const cusum = panel(/^CUSUM$/);
  assert.match(ratio.targets?.map((t) => t.expr).join(' ') ?? '', /logprobe_window_global_shift_ratio/);
  assert.match(cusum.targets?.[0]?.expr ?? '', /logprobe_cusum_statistic/);
  for (const p of [ratio, cusum])
    assert.notEqual(
      p.fieldConfig?.defaults?.custom?.thresholdsStyle?.mode ?? 'off',
      'off',
      `${p.title} draws its threshold`,
    );

  const global = alertRule('LogprobGlobalShift').expr;
  const sustained = alertRule('LogprobSustainedShift').expr;
  const fireFraction = thresholdAfter(global, 'logprobe:global_shift:ratio_rate5m');
  const minRequests = thresholdAfter(global, 'logprobe:comparable_verdicts:rate5m * 300');
  const h = thresholdAfter(sustained, 'logprobe:cusum_statistic:max');

  assert.equal(fireFraction, defaults.alert.fireFraction, 'rule ratio threshold = alert.fireFraction');
  assert.equal(minRequests, defaults.alert.minRequests, 'rule minimum = alert.minRequests');
  assert.equal(h, defaults.alert.cusum.h, 'rule CUSUM threshold = alert.cusum.h');
  assert.deepEqual(thresholdValues(ratio), [fireFraction]);
  assert.deepEqual(thresholdValues(cusum), [h]);

  const flipGap = panel(/^Flip gap by class$/);
  assert.deepEqual(thresholdValues(flipGap), [defaults.analysis.gapAmbiguous, defaults.analysis.gapSystematic]);
});

test('every alert has a severity, a for: duration, an explanation and a runbook section', () => {
  const runbook = readFileSync(new URL('docs/runbook.md', root), 'utf8');
  const anchors = new Set(
    [...runbook.matchAll(/^##+\s+(.+)$/gm)].map((m) =>
      (m[1] as string)
        .trim()
        .toLowerCase()
        .replace(/[^\w\- ]/g, '')
        .replace(/ /g, '-'),
    ),
  );
  const alerts = rules.groups.flatMap((g) => g.rules).filter((r) => r.alert);
  assert.deepEqual(alerts.map((r) => r.alert).sort(), [
    'LogprobCanaryShift',
    'LogprobGlobalShift',
    'LogprobMirrorStalled',
    'LogprobMirrorWorkerDown',
    'LogprobPathInconsistency',
    'LogprobPromptMismatch',
    'LogprobProxyErrors',
    'LogprobSelfInconsistency',
    'LogprobSustainedShift',
  ]);
  for (const r of alerts) {
    assert.match(r.labels?.severity ?? '', /^(critical|warning)$/, `${r.alert} severity`);
    assert.match(r.for ?? '', /^\d+[smh]$/, `${r.alert} for:`);
    assert.ok((r.annotations?.summary ?? '').length > 20, `${r.alert} summary`);
    assert.ok((r.annotations?.description ?? '').length > 100, `${r.alert} description`);
    const url = r.annotations?.runbook_url ?? '';
    const m = /^docs\/runbook\.md#([\w-]+)$/.exec(url);
    assert.ok(m, `${r.alert} runbook_url points into docs/runbook.md: ${url}`);
    assert.ok(anchors.has(m[1] as string), `docs/runbook.md has a section #${m[1]}`);
  }
  assert.match(
    alertRule('LogprobGlobalShift').annotations?.description ?? '',
    /every decode step moved: suspect the prefill input — KV cache or state/i,
  );
});

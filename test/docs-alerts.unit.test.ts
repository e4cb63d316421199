// The docs name every fleet alert, and say which dashboard panels need the Prometheus rule file:
// a panel that reads a recording rule of config/prometheus/alerts.yml (or the ALERTS series its
// alerts make) shows nothing on a Prometheus that has not loaded that file.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

const read = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');
const README = read('README.md');
const OPERATIONS = read('docs/operations.md');
const RULES = parse(read('config/prometheus/alerts.yml')) as {
  groups: Array<{ rules: Array<{ alert?: string; record?: string }> }>;
};
const alerts = RULES.groups.flatMap((g) => g.rules.flatMap((r) => (r.alert ? [r.alert] : [])));
const records = new Set(RULES.groups.flatMap((g) => g.rules.flatMap((r) => (r.record ? [r.record] : []))));

interface Panel {
  title: string;
  targets?: Array<{ expr?: string }>;
  panels?: Panel[];
}
const panels = (ps: Panel[]): Panel[] => ps.flatMap((p) => [p, ...panels(p.panels ?? [])]);

test('the README and the fleet table of docs/operations.md name every alert of config/prometheus/alerts.yml', () => {
  assert.ok(alerts.length >= 6, alerts.join(', '));
  const fleet = README.slice(README.indexOf('- **Fleet alerts**'));
  for (const a of alerts) {
    assert.ok(fleet.slice(0, fleet.indexOf('\n- **')).includes(`\`${a}\``), `README's Fleet alerts names ${a}`);
    assert.match(OPERATIONS, new RegExp(`\\n\\| \`${a}\` \\|`), `docs/operations.md's fleet table has ${a}`);
  }
});

test("every dashboard panel that reads the rule file's series is named in docs/operations.md, with the series and rule_files", () => {
  const dashboard = JSON.parse(read('config/grafana/logprobe.json')) as { panels: Panel[] };
  const needing: Array<{ title: string; uses: string[] }> = [];
  for (const p of panels(dashboard.panels)) {
    const uses = new Set<string>();
    for (const t of p.targets ?? []) {
      for (const m of (t.expr ?? '').matchAll(/\b(logprobe:[\w:]+|ALERTS)\b/g)) uses.add(m[1]!);
    }
    if (uses.size > 0) needing.push({ title: p.title, uses: [...uses] });
  }
  assert.ok(needing.length > 0, 'the dashboard reads the rule file somewhere');
  const section = OPERATIONS.slice(OPERATIONS.indexOf('- **The dashboard.**'));
  const text = section.slice(0, section.indexOf('\n- **', 1)).replace(/\s+/g, ' ');
  assert.match(text, /rule_files:/);
  assert.match(text, new RegExp(`${['One', 'Two', 'Three', 'Four', 'Five', 'Six'][needing.length - 1]} panels`, 'i'));
  for (const { title, uses } of needing) {
    assert.ok(text.includes(`*${title}*`), `"${title}" named`);
    for (const u of uses) {
      if (u !== 'ALERTS') assert.ok(records.has(u), `${u} is a recording rule of alerts.yml`);
      assert.ok(text.includes(`\`${u}`), `${u} (read by "${title}") named`);
    }
  }
  assert.match(README, /four of its\s+panels read that file's recording rules/);
});

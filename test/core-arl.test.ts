import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hForArl0, impliedRunLengths, resolveCusum, siegmundArl } from '../src/core/arl.js';
import { buildConfig, loadConfig } from '../src/config/load.js';
import { runLengthStart } from '../src/config/summary.js';
import { startCli } from './helpers/cli.js';

/**
 * D. C. Montgomery, Introduction to Statistical Quality Control (6th ed.), Table 9.3: ARLs of the
 * tabular CUSUM with k = 1/2, for h = 4 and h = 5, by shift in σ units. The in-control entries
 * (shift 0) are of the two-sided scheme (an upper and a lower one-sided CUSUM); the shifted ones
 * are the upper CUSUM's (the lower one never fires first).
 */
const MONTGOMERY_9_3: Array<{ shift: number; h4: number; h5: number }> = [
  { shift: 0, h4: 168, h5: 465 },
  { shift: 0.25, h4: 74.2, h5: 139 },
  { shift: 0.5, h4: 26.6, h5: 38.0 },
  { shift: 0.75, h4: 13.3, h5: 17.0 },
  { shift: 1, h4: 8.38, h5: 10.4 },
  { shift: 1.5, h4: 4.75, h5: 5.75 },
  { shift: 2, h4: 3.34, h5: 4.01 },
];

const twoSided = (k: number, h: number, mu: number): number =>
  1 / (1 / siegmundArl(k, h, mu) + 1 / siegmundArl(k, h, -mu));
const within = (got: number, want: number, rel: number, what: string): void =>
  assert.ok(Math.abs(got - want) / want <= rel, `${what}: ${got.toFixed(2)} vs the table's ${want} (±${rel * 100}%)`);

test("Siegmund's ARL matches the published CUSUM table (Montgomery 9.3, k = 1/2) within 5% up to a 2σ shift", () => {
  for (const row of MONTGOMERY_9_3) {
    for (const [h, want] of [
      [4, row.h4],
      [5, row.h5],
    ] as const) {
      within(twoSided(0.5, h, row.shift), want, 0.05, `h ${h}, shift ${row.shift}σ`);
    }
  }
  // One-sided in control is twice the two-sided (the two sides are symmetric): 338 and 938.
  within(siegmundArl(0.5, 5, 0), 930, 0.02, 'one-sided ARL0, h 5');
  assert.equal(siegmundArl(0.5, 3, 0.5), (3 + 1.166) ** 2, 'Δ = 0: b²');
});

test('hForArl0 inverts the ARL0: the table h for its ARL0, monotone in the ARL0 asked for', () => {
  // The table's h = 5 buys a two-sided ARL0 of 465, i.e. a one-sided one of ~930.
  assert.ok(Math.abs(hForArl0(0.5, 930) - 5) < 0.02, `h for ARL0 930: ${hForArl0(0.5, 930)}`);
  assert.ok(Math.abs(hForArl0(0.5, 336) - 4) < 0.02, `h for ARL0 336: ${hForArl0(0.5, 336)}`);
  for (const k of [0.1, 0.25, 0.5, 1]) {
    let last = 0;
    for (const arl0 of [100, 1_000, 10_000, 100_000]) {
      const h = hForArl0(k, arl0);
      assert.ok(h > last, `k ${k}: h grows with the ARL0`);
      within(siegmundArl(k, h, 0), arl0, 1e-6, `k ${k}, ARL0 ${arl0}`);
      last = h;
    }
  }
});

test('resolveCusum: k is half the target shift in floor units, h buys falseAlarmPairs, raw k/h override', () => {
  assert.deepEqual(resolveCusum({ targetShift: null, falseAlarmPairs: null }, 0.1), { k: 0.5, h: 5 }, 'the defaults');
  const d = resolveCusum({ targetShift: 0.05, falseAlarmPairs: 100_000 }, 0.1);
  assert.equal(d.k, 0.25);
  within(siegmundArl(0.25, d.h, 0), 100_000, 1e-6, 'derived h');
  assert.deepEqual(
    resolveCusum({ k: 0.4, h: 7, targetShift: 0.05, falseAlarmPairs: 100_000 }, 0.1),
    { k: 0.4, h: 7 },
    'raw values win',
  );
  const kOnly = resolveCusum({ k: 0.4, targetShift: 0.05, falseAlarmPairs: 1000 }, 0.1);
  assert.equal(kOnly.k, 0.4);
  within(siegmundArl(0.4, kOnly.h, 0), 1000, 1e-6, 'h derived at the raw k');
});

test('the config derives k and h from the targets and the floor; auto uses calibration.minFloor', () => {
  const c = buildConfig({
    analysis: { noiseFloor: 0.05 },
    alert: { cusum: { targetShift: 0.05, falseAlarmPairs: 10_000 } },
  });
  assert.equal(c.alert.cusum.k, 0.5);
  within(siegmundArl(0.5, c.alert.cusum.h, 0), 10_000, 1e-6, 'config h');
  const auto = buildConfig({
    analysis: { noiseFloor: 'auto' },
    calibration: { minFloor: 0.04 },
    alert: { cusum: { targetShift: 0.02 } },
  });
  assert.equal(auto.alert.cusum.k, 0.25);
  assert.equal(auto.alert.cusum.h, 5, 'h stays the default without falseAlarmPairs');
  const d = loadConfig({ env: {} });
  assert.deepEqual({ k: d.alert.cusum.k, h: d.alert.cusum.h }, { k: 0.5, h: 5 }, 'defaults unchanged');
  assert.throws(
    () => buildConfig({ alert: { cusum: { falseAlarmPairs: 1 } } }),
    /alert\.cusum\.falseAlarmPairs: expected a number of pairs > 1/,
  );
  assert.throws(
    () => buildConfig({ alert: { cusum: { targetShift: -0.1 } } }),
    /alert\.cusum\.targetShift: expected a positive number/,
  );
});

test('impliedRunLengths: ARL1 is never shorter than minRequests + 1 (the per-request clip)', () => {
  const r = impliedRunLengths({ k: 0.5, h: 5, targetShift: null }, 0.1, 20);
  assert.equal(r.shift, 0.1);
  within(r.arl0, 938, 0.01, 'ARL0');
  within(r.arl1Siegmund, 10.34, 0.01, 'Siegmund ARL1 at one floor');
  assert.equal(r.arl1, 21);
  // The defaults (minRequests 10): the clip still decides, Siegmund's 10.3 is below 11.
  const line = runLengthStart(loadConfig({ env: {} })).line;
  assert.match(
    line,
    /ARL0 ≥ 938 pairs between false alarms and ARL1 ≈ 11\.0 pairs for a 0\.1 nat shift \(Siegmund 10\.3, at least minRequests \+ 1 = 11\)/,
  );
});

test('serve logs the run lengths its configuration implies at start', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'logprobe-arl-'));
  const file = join(dir, 'c.yaml');
  writeFileSync(
    file,
    [
      'listen: { host: 127.0.0.1, port: 0 }',
      'admin: { host: 127.0.0.1, port: 0 }',
      'candidate: { url: "http://127.0.0.1:9" }',
      'baseline: { url: "http://127.0.0.1:9" }',
      'probe: { atStart: "off" }',
      'capture: { enabled: false }',
      'alert: { minRequests: 10, cusum: { targetShift: 0.05, falseAlarmPairs: 100000 } }',
      '',
    ].join('\n'),
  );
  const s = await startCli(['serve', '--config', file], /ARL1 ≈ [^\n]*\n/);
  s.child.kill('SIGTERM');
  await s.exited;
  const line = s
    .output()
    .split('\n')
    .find((l) => l.includes('ARL0'));
  assert.ok(line, s.output());
  const entry = JSON.parse(line) as { arl0: number; arl1: number; cusumK: number; cusumH: number; msg: string };
  assert.equal(entry.cusumK, 0.25);
  within(entry.arl0, 100_000, 1e-3, 'logged ARL0');
  within(entry.arl1, siegmundArl(0.25, entry.cusumH, 0.5), 0.01, 'logged ARL1 at the target shift');
  assert.match(entry.msg, /for a 0\.05 nat shift/);
});

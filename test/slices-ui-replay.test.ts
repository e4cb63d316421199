import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { parse as parseJunit, type TestSuite, type TestSuites } from 'junit2json';
import { chromium } from 'playwright-core';
import { createSimModel, startEngineServer, type SimAdapterOptions } from '@logprobe/engine';
import { modelTraffic } from './helpers/model-traffic.js';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import { runCli } from './helpers/cli.js';
import { captureLines, makePair, tempDir } from './helpers/capture.js';
import { buildConfig } from '../src/config/load.js';
import { initialDetectorState } from '../src/core/detector.js';
import { LiveFeed, type LiveData } from '../src/live/feed.js';
import type { ModelGate } from '../src/replay/models.js';

// Issue #35's online and CI parts: nine models on one engine pair (a base model and eight LoRA
// adapters, as vLLM serves them), one adapter shifted. The live page's data has a row per model,
// the shifted one first and firing; a replay of the captured traffic fails its gate naming that
// model alone, in its text, --json and JUnit.

const MODELS = ['m', ...Array.from({ length: 8 }, (_, i) => `a${i + 1}`)];
const SHIFTED = 'a3';
const PER_MODEL = 30;
const CHROMIUM = '/usr/bin/chromium';
/** The Models table's screenshot (kept after the test, for a look). */
const SCREENSHOT = join(tmpdir(), 'logprobe-live-models.png');

function engine(faults: Record<string, Partial<SimAdapterOptions>> = {}) {
  return startEngineServer({
    model: createSimModel({ seed: 5, id: 'm', adapters: MODELS.slice(1).map((id) => ({ id, ...faults[id] })) }),
    api: 'vllm',
  });
}

const sum = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);

test(`nine models, ${SHIFTED} shifted: /ui/data has a row per model, ${SHIFTED} first and firing; a replay of the capture fails its gate naming ${SHIFTED} alone`, async (t) => {
  const cand = await engine({ [SHIFTED]: { stateShift: 0.35 } });
  const base = await engine();
  t.after(() => Promise.all([cand.close(), base.close()]));
  const dir = tempDir(t);
  const lp = await startLogprobe({
    candidate: { url: cand.url, engine: 'vllm' },
    baseline: { url: base.url, engine: 'vllm' },
    mirror: { sampleRate: 1, concurrency: 4, queueSize: 4096 },
    // Every copy also path-checked on the candidate: the rows show each model's last check.
    path: { rate: 1, backends: ['candidate'] },
    capture: { enabled: true, dir },
  });
  let closed = false;
  t.after(() => (closed ? undefined : lp.close()));
  await modelTraffic(lp.proxyUrl, MODELS, MODELS.length * PER_MODEL);
  await lp.runtime.mirror!.idle();

  const res = await request(`${lp.adminUrl}/ui/data`);
  const d = ((await res.body.json()) as { worker: string; data: LiveData }).data;
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  // (a) One row per model, the shifted one first and firing, no other.
  assert.deepEqual(d.models.map((m) => m.model).sort(), [...MODELS].sort(), 'a row per model, nothing else');
  assert.equal(d.models[0]!.model, SHIFTED, `worst first: ${d.models.map((m) => `${m.model}:${m.firing}`).join(' ')}`);
  for (const row of d.models) {
    const global = row.alerts.find((a) => a.alert === 'LogprobGlobalShift')!;
    assert.equal(row.pairs, PER_MODEL, row.model);
    assert.equal(sum(row.verdicts), PER_MODEL, `${row.model}: every pair compared`);
    assert.deepEqual(
      row.alerts.map((a) => `${a.alert}${a.backend ? `/${a.backend}` : ''}`),
      [
        'LogprobGlobalShift',
        'LogprobSustainedShift',
        'LogprobSelfInconsistency/candidate',
        'LogprobSelfInconsistency/baseline',
        'LogprobPathInconsistency/candidate',
        'LogprobPathInconsistency/baseline',
        'LogprobPromptMismatch',
        'LogprobCanaryShift',
      ],
    );
    // The row's figures are the slice's own gauges.
    const labels = { model: row.model };
    assert.equal(row.share, metricValue(metrics, 'logprobe_window_global_shift_ratio', labels), row.model);
    assert.equal(row.cusum, metricValue(metrics, 'logprobe_cusum_statistic', labels), row.model);
    assert.equal(row.pvalue, metricValue(metrics, 'logprobe_alert_test_pvalue', labels), row.model);
    for (const a of row.alerts)
      assert.equal(
        a.phase === 'firing' || a.phase === 'resolving' ? 1 : 0,
        metricValue(metrics, 'logprobe_alert_firing', {
          alert: a.alert,
          model: row.model,
          ...(a.backend ? { backend: a.backend } : {}),
        }),
        `${row.model} ${a.alert} ${a.backend ?? ''}`,
      );
    for (const v of ['global_shift', 'identical'] as const)
      assert.equal(
        row.verdicts[v],
        metricValue(metrics, 'logprobe_verdicts_total', { kind: 'pair', model: row.model, verdict: v }) ?? 0,
      );
    // The path check: every copy checked on the candidate. The sim's stateShift moves decode steps
    // only (its prompt distributions are clean), so the shifted adapter's two paths disagree too.
    const path = row.path.candidate!;
    assert.ok(path.checks > 0 && path.outcome === 'ok' && path.comparable > 0, JSON.stringify(path));
    assert.equal(path.inconsistent > 0, row.model === SHIFTED, `${row.model}: ${path.inconsistent} inconsistent`);
    assert.equal(row.path.baseline, null);
    if (row.model === SHIFTED) {
      assert.equal(global.phase, 'firing');
      assert.ok(global.last?.to === 'firing' && global.last.evidence.pooledShare >= 0.5);
      assert.ok(row.verdicts.global_shift + row.verdicts.early_shift + row.verdicts.local_shift > PER_MODEL / 2);
      // The permutation test is of the signed mean difference: a shift of either sign per token may not move it; the differences are not all 0.
      assert.ok(
        row.pvalue! < 1 && row.pvaluePairs! > 0,
        `${SHIFTED}'s permutation p-value ${row.pvalue} over ${row.pvaluePairs}`,
      );
    } else {
      assert.equal(row.firing, 0, `${row.model} does not fire`);
      assert.equal(row.verdicts.identical, PER_MODEL, row.model);
      assert.equal(row.share, 0);
      assert.equal(row.pvalue, 1, `${row.model}: identical pairs, no evidence`);
    }
  }
  // Each pair in the list names its model and cache split.
  assert.ok(d.pairs.length > 0 && d.pairs.every((p) => MODELS.includes(p.model!) && p.cache !== undefined));
  // The proxy's thread hears each slice's detectors too.
  const states = lp.runtime.mirror!.sliceStates;
  for (const m of MODELS)
    assert.equal(states.get(m)?.global.phase, m === SHIFTED ? 'firing' : 'inactive', `sliceStates ${m}`);

  if (existsSync(CHROMIUM)) await pageRows(lp.adminUrl);

  // (b) The capture, replayed against the same pair: the gate fails on the shifted model alone.
  await lp.close();
  closed = true;
  // The replay's own files elsewhere: the capture directory is its input.
  const outDir = tempDir(t, 'logprobe-replay-');
  const junit = join(outDir, 'junit.xml');
  const out = join(outDir, 'replay.jsonl');
  const args = ['replay', dir, '--candidate', cand.url, '--baseline', base.url, '--out', out, '--junit', junit];
  assert.equal(captureLines(dir).length, MODELS.length * PER_MODEL);
  const text = await runCli(args, { timeoutMs: 120_000 });
  assert.equal(text.code, 1, text.stdout + text.stderr);
  assert.match(text.stdout, new RegExp(`^gate: FAIL \\(.*; failed in model ${SHIFTED}\\)$`, 'm'));
  const table = text.stdout.slice(text.stdout.indexOf('Gate by model'), text.stdout.indexOf('\ncapture: '));
  t.diagnostic(table);
  for (const m of MODELS)
    assert.match(table, new RegExp(`^ {2}${m} +${PER_MODEL} .*${m === SHIFTED ? 'FAIL: ' : 'PASS'}`, 'm'), m);
  await checkJunit(readFileSync(junit, 'utf8'));

  const json = await runCli([...args.slice(0, -2), '--json'], { timeoutMs: 120_000 });
  assert.equal(json.code, 1, json.stderr);
  const j = JSON.parse(json.stdout) as {
    passed: boolean;
    failedModels: string[];
    byModel: Record<string, Omit<ModelGate, 'model'>>;
    verdicts: Record<string, number>;
  };
  assert.equal(j.passed, false);
  assert.deepEqual(j.failedModels, [SHIFTED]);
  assert.deepEqual(Object.keys(j.byModel).sort(), [...MODELS].sort());
  for (const m of MODELS) {
    const g = j.byModel[m]!;
    assert.equal(g.pairs, PER_MODEL);
    assert.equal(g.passed, m !== SHIFTED, m);
    if (m === SHIFTED)
      assert.ok(
        g.failedOn.some((x) => /^(global_shift|local_shift) \d+$/.test(x)),
        g.failedOn.join(),
      );
    else assert.deepEqual(g.failedOn, []);
  }
  // The models' counts add up to the run's.
  for (const v of Object.keys(j.verdicts))
    assert.equal(
      MODELS.reduce((n, m) => n + (j.byModel[m]!.verdicts as Record<string, number>)[v]!, 0),
      j.verdicts[v],
      v,
    );
});

/** The JUnit report: one case per model under the gate by model, the shifted one failing, every other passing. */
async function checkJunit(xml: string): Promise<void> {
  const doc = (await parseJunit(xml)) as TestSuites;
  const suite = ((doc.testsuite ?? []) as TestSuite[]).find((s) => s.name?.startsWith('gate by model'));
  assert.ok(suite, 'a suite of the gate by model');
  const cases = suite.testcase ?? [];
  assert.deepEqual(cases.map((c) => c.name).sort(), MODELS.map((m) => `model ${m}`).sort());
  for (const c of cases) {
    const failing = c.name === `model ${SHIFTED}`;
    assert.equal(c.failure !== undefined, failing, c.name);
    if (failing) assert.match(c.failure![0]!.message!, /failed on (global_shift|local_shift) \d+/);
  }
}

/** The page draws the rows: one per model, the shifted one first with its global alert firing. */
async function pageRows(adminUrl: string): Promise<void> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  });
  try {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`${adminUrl}/ui`, { waitUntil: 'load' });
    await page.waitForSelector('#model-body tr', { timeout: 10_000 });
    const rows = await page.$$eval('#model-body tr', (trs) =>
      trs.map((tr) => ({
        model: tr.getAttribute('data-model'),
        global: tr.querySelector('[data-alert="LogprobGlobalShift"]')?.getAttribute('data-phase'),
        text: tr.textContent ?? '',
      })),
    );
    assert.equal(rows.length, MODELS.length);
    assert.deepEqual(rows[0]!.model, SHIFTED);
    assert.deepEqual(
      rows.map((r) => r.global),
      rows.map((r) => (r.model === SHIFTED ? 'firing' : 'inactive')),
    );
    assert.match(rows[0]!.text, /global_shift \d+/);
    assert.match(rows[1]!.text, new RegExp(`identical ${PER_MODEL}`));
    assert.match(rows[0]!.text, /candidate: path_inconsistent, max shift/);
    assert.match(rows[1]!.text, /candidate: (noise|identical), max shift/);
    assert.match((await page.textContent('#pair-list .pair-model'))!, /^model (m|a\d) · cache (hit|miss|unknown)$/);
    assert.deepEqual(errors, []);
    await page.locator('#models').screenshot({ path: SCREENSHOT });
  } finally {
    await browser.close();
  }
}

test('the per-model rows are bounded by slices.maxModels: names past it count under other', () => {
  const config = buildConfig({ slices: { maxModels: 4 } });
  const feed = new LiveFeed(config, () => initialDetectorState());
  for (let i = 0; i < 100; i++) {
    const pair = makePair(i, { shift: i % 10 === 0 ? 0.5 : 0 });
    feed.onPair({ ...pair, slice: { model: `tenant-${i}`, cache: 'miss' } });
  }
  const d = JSON.parse(feed.snapshot(0, 0)) as LiveData;
  feed.close();
  // As the slicer bounds them: the first maxModels names seen, and `other` for the rest.
  assert.deepEqual(d.models.map((m) => m.model).sort(), ['other', 'tenant-0', 'tenant-1', 'tenant-2', 'tenant-3']);
  const other = d.models.find((m) => m.model === 'other')!;
  assert.equal(other.pairs, 96);
  assert.equal(
    d.models.reduce((n, m) => n + m.pairs, 0),
    100,
  );
  assert.equal(sum(other.verdicts), 96);
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import {
  createSimModel,
  startEngineServer,
  type EngineServerHandle,
  type SimAdapterOptions,
  type SimOptions,
} from '@logprobe/engine';
import { modelTraffic } from './helpers/model-traffic.js';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import type { ConfigInput } from '../src/config/schema.js';
import type { AlertTransition } from '../src/core/detector.js';
import type { MirroredPair } from '../src/pair/types.js';

// Where a bug lives (docs/detection.md "Slices"): nine models on one engine — a base model and
// eight LoRA adapters, picked by the request's `model` as vLLM serves them — and a fault confined
// to one adapter. Each model is its own slice: its own window, CUSUM, permutation test and floor.

const MODELS = ['m', ...Array.from({ length: 8 }, (_, i) => `a${i + 1}`)];

/** A vLLM-like engine serving the base `m` and adapters a1..a8; `faults` by adapter id. */
function engine(o: SimOptions = {}, faults: Record<string, Partial<SimAdapterOptions>> = {}) {
  return startEngineServer({
    model: createSimModel({
      seed: 5,
      id: 'm',
      ...o,
      adapters: MODELS.slice(1).map((id) => ({ id, ...(o.noise ? { noise: o.noise } : {}), ...faults[id] })),
    }),
    api: 'vllm',
  });
}

async function run(
  t: { after(fn: () => unknown): void },
  cand: EngineServerHandle,
  base: EngineServerHandle | null,
  config: ConfigInput,
  models: readonly string[],
  n: number,
) {
  const pairs: MirroredPair[] = [];
  const alerts: AlertTransition[] = [];
  const lp = await startLogprobe(
    {
      candidate: { url: cand.url, engine: 'vllm' },
      baseline: base ? { url: base.url, engine: 'vllm' } : null,
      ...config,
      mirror: { sampleRate: 1, concurrency: 4, queueSize: 4096, ...config.mirror },
    },
    { listeners: { onPair: (p) => pairs.push(p), onAlert: (a) => alerts.push(a) } },
  );
  t.after(() => lp.close());
  await modelTraffic(lp.proxyUrl, models, n);
  await lp.runtime.mirror!.idle();
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  return { lp, pairs, alerts, metrics };
}

const firing = (alerts: AlertTransition[], name: string) => alerts.filter((a) => a.alert === name && a.to === 'firing');

test("nine models on one engine pair, one adapter shifted: that model's alert fires within 20 of its own pairs, no other model's", async (t) => {
  const cand = await engine({}, { a3: { stateShift: 0.35 } });
  const base = await engine();
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await run(t, cand, base, { path: { rate: 0 } }, MODELS, 9 * 30);
  assert.equal(r.pairs.length, 270);
  const fired = firing(r.alerts, 'LogprobGlobalShift');
  assert.deepEqual(
    [...new Set(fired.map((a) => a.model))],
    ['a3'],
    `only a3 fires: ${JSON.stringify(r.alerts.map((a) => [a.alert, a.model, a.to]))}`,
  );
  // Within 20 of its own pairs: the alert's window holds a3's pairs only.
  const own = r.pairs.filter((p) => p.slice?.model === 'a3');
  assert.equal(own.length, 30);
  const at = own.findIndex((p) => p.id === fired[0]!.evidence.exampleRequestId);
  assert.ok(fired[0]!.evidence.requestsInWindow <= 20, `fired after ${fired[0]!.evidence.requestsInWindow} a3 pairs`);
  assert.ok(at >= 0 && at < 20, `its example is one of a3's first 20 pairs (${at})`);
  // Every shifted pair is a3's; the others are identical.
  const moved = r.pairs.filter((p) => p.analysis && p.analysis.verdict !== 'identical');
  assert.ok(moved.length >= 25 && moved.every((p) => p.slice?.model === 'a3'), `${moved.length} moved, all a3`);
  // What one pooled detector would have had: a3's shifted positions diluted by eight clean models.
  const last = r.pairs.slice(-50).filter((p) => p.analysis !== null);
  const pooled =
    last.reduce((s, p) => s + p.analysis!.shifted, 0) /
    Math.max(
      1,
      last.reduce((s, p) => s + p.analysis!.comparable, 0),
    );
  t.diagnostic(`pooled share over the last 50 pairs of all models (the old single detector): ${pooled.toFixed(3)}`);
  assert.ok(pooled < 0.5, `pooled over all models the share (${pooled.toFixed(3)}) stays under fireFraction 0.5`);
  // Metrics carry the model: a3 firing, m not.
  assert.equal(metricValue(r.metrics, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift', model: 'a3' }), 1);
  assert.equal(metricValue(r.metrics, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift', model: 'm' }), 0);
  assert.ok(
    (metricValue(r.metrics, 'logprobe_verdicts_total', { kind: 'pair', model: 'a3', verdict: 'global_shift' }) ?? 0) >
      0,
  );
  assert.equal(
    metricValue(r.metrics, 'logprobe_verdicts_total', { kind: 'pair', model: 'a1', verdict: 'identical' }),
    30,
  );
  // The log line names the slice.
  assert.ok(
    r.lp.logs.lines.some((l) => String(l.msg).startsWith('LogprobGlobalShift (model a3) firing')),
    'the warn line names the model',
  );
});

test('nine clean models with run-to-run noise, 2,000 pairs: no alert fires', async (t) => {
  const cand = await engine({ noise: 0.003 });
  const base = await engine({ noise: 0.003 });
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await run(t, cand, base, { path: { rate: 0 } }, MODELS, 2000);
  assert.equal(r.pairs.length, 2000);
  const bySlice = new Map<string, number>();
  for (const p of r.pairs) bySlice.set(p.slice!.model, (bySlice.get(p.slice!.model) ?? 0) + 1);
  assert.deepEqual([...bySlice.keys()].sort(), [...MODELS].sort());
  assert.deepEqual(r.alerts, [], 'no alert');
  assert.ok(r.pairs.every((p) => p.analysis && ['identical', 'noise'].includes(p.analysis.verdict)));
});

test('an unbounded stream of model names cannot grow the series past slices.maxModels; the rest is other, counted', async (t) => {
  const cand = await startEngineServer({ model: createSimModel({ seed: 5, id: 'm' }), api: 'vllm' });
  const base = await startEngineServer({ model: createSimModel({ seed: 5, id: 'm' }), api: 'vllm' });
  t.after(() => Promise.all([cand.close(), base.close()]));
  const names = Array.from({ length: 60 }, (_, i) => `tenant-${i}`);
  const r = await run(t, cand, base, { slices: { maxModels: 4 }, path: { rate: 0 } }, names, 60);
  const models = new Set<string>();
  for (const line of r.metrics.split('\n')) {
    const m = /model="([^"]*)"/.exec(line);
    if (m) models.add(m[1]!);
  }
  assert.deepEqual([...models].sort(), ['other', 'tenant-0', 'tenant-1', 'tenant-2', 'tenant-3']);
  assert.equal(metricValue(r.metrics, 'logprobe_slice_overflow_total'), 56);
  assert.equal(r.pairs.filter((p) => p.slice?.model === 'other').length, 56);
});

test('slices.models: an allow-list has its series from the start, every other name is other', async (t) => {
  const cand = await startEngineServer({ model: createSimModel({ seed: 5, id: 'm' }), api: 'vllm' });
  t.after(() => cand.close());
  const lp = await startLogprobe({
    candidate: { url: cand.url },
    baseline: { url: cand.url },
    slices: { models: ['llama-8b', 'sql-adapter'] },
  });
  t.after(() => lp.close());
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  for (const model of ['llama-8b', 'sql-adapter', 'other'])
    assert.equal(metricValue(metrics, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift', model }), 0, model);
});

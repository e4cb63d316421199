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
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import type { ConfigInput } from '../src/config/schema.js';
import type { AlertTransition } from '../src/core/detector.js';
import type { MirroredPair } from '../src/pair/types.js';
import type { PathPair } from '../src/core/path.js';

// The path check (docs/detection.md "Decode vs prefill"): each backend's decode-time logprobs of
// the tokens it generated against the same tokens scored in one prefill pass on the same server,
// on engine doubles whose faults model the bugs users reported (docs/engines.md).

const ADAPTERS = Array.from({ length: 8 }, (_, i) => `a${i + 1}`);
const MODELS = ['m', ...ADAPTERS];

/** A vLLM-like engine serving the base `m` and adapters a1..a8; `faults` by adapter id (`m`: the base's own knobs). */
function engine(
  faults: Record<string, Partial<SimAdapterOptions>> = {},
  api: 'vllm' | 'sglang' = 'vllm',
): Promise<EngineServerHandle> {
  const { m, ...rest } = faults;
  return startEngineServer({
    model: createSimModel({
      seed: 9,
      id: 'm',
      ...(m as SimOptions | undefined),
      adapters: ADAPTERS.map((id) => ({ id, ...rest[id] })),
    }),
    api,
  });
}

async function traffic(proxyUrl: string, models: readonly string[], n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const r = await request(`${proxyUrl}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({
        model: models[i % models.length],
        prompt: `Question ${i}: what does the adapter say about the cache and the weights?`,
        max_tokens: 12,
      }),
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(r.statusCode, 200);
    await r.body.dump();
  }
}

async function run(
  t: { after(fn: () => unknown): void },
  cand: EngineServerHandle,
  base: EngineServerHandle | null,
  models: readonly string[],
  n: number,
  config: ConfigInput = {},
) {
  const pairs: MirroredPair[] = [];
  const alerts: AlertTransition[] = [];
  const lp = await startLogprobe(
    {
      // The engine named: copies carry return_token_ids from the first, as after the start-up probe.
      candidate: { url: cand.url, engine: 'vllm' },
      baseline: base ? { url: base.url, engine: 'vllm' } : null,
      alert: { window: 20, minRequests: 5, fireFraction: 0.5, forSeconds: 0 },
      ...config,
      mirror: { sampleRate: 1, concurrency: 2, queueSize: 4096, ...config.mirror },
    },
    { listeners: { onPair: (p) => pairs.push(p), onAlert: (a) => alerts.push(a) } },
  );
  t.after(() => lp.close());
  await traffic(lp.proxyUrl, models, n);
  await lp.runtime.mirror!.idle();
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  const paths = (model: string, backend = 'candidate'): PathPair[] =>
    pairs.filter((p) => p.slice?.model === model).flatMap((p) => (p.paths ?? []).filter((x) => x.backend === backend));
  return { lp, pairs, alerts, metrics, paths };
}

const pathAlerts = (alerts: AlertTransition[]) =>
  alerts.filter((a) => a.alert === 'LogprobPathInconsistency' && a.to === 'firing');

test("baseline-free, prompt logprobs without one adapter's head (vllm#51594): that adapter's path pairs are path_inconsistent and its alert fires; the others are clean", async (t) => {
  const cand = await engine({ a3: { promptWithoutAdapter: true } });
  t.after(() => cand.close());
  const r = await run(t, cand, null, MODELS, 9 * 12);
  const a3 = r.paths('a3');
  assert.equal(a3.length, 12);
  assert.ok(
    a3.every((p) => p.outcome === 'ok'),
    JSON.stringify(a3.map((p) => [p.outcome, p.reason])),
  );
  const bad = a3.filter((p) => p.verdict === 'path_inconsistent').length;
  assert.ok(bad / a3.length >= 0.9, `${bad} of ${a3.length} a3 path pairs path_inconsistent`);
  for (const m of MODELS.filter((x) => x !== 'a3')) {
    const others = r.paths(m);
    assert.equal(others.length, 12, m);
    assert.deepEqual(
      others.filter((p) => p.verdict !== 'identical').map((p) => p.verdict),
      [],
      `${m}: decode and prefill agree`,
    );
  }
  const fired = pathAlerts(r.alerts);
  assert.deepEqual(
    fired.map((a) => [a.backend, a.model]),
    [['candidate', 'a3']],
  );
  assert.equal(
    metricValue(r.metrics, 'logprobe_alert_firing', {
      alert: 'LogprobPathInconsistency',
      backend: 'candidate',
      model: 'a3',
    }),
    1,
  );
  assert.equal(
    metricValue(r.metrics, 'logprobe_verdicts_total', { kind: 'path', model: 'a3', verdict: 'path_inconsistent' }),
    bad,
  );
  assert.ok((metricValue(r.metrics, 'logprobe_path_shift_nats_count', { backend: 'candidate' }) ?? 0) > 0);
  assert.ok(
    r.lp.logs.lines.some((l) => String(l.msg).startsWith('LogprobPathInconsistency (candidate, model a3) firing')),
  );
});

test('a clean engine: every path pair identical, no path alert', async (t) => {
  const cand = await engine();
  t.after(() => cand.close());
  const r = await run(t, cand, null, MODELS, 36);
  const all = r.pairs.flatMap((p) => p.paths ?? []);
  assert.equal(all.length, 36);
  assert.deepEqual(
    all.filter((p) => p.verdict !== 'identical').map((p) => [p.verdict, p.reason]),
    [],
  );
  assert.deepEqual(pathAlerts(r.alerts), []);
});

test('speculative-style decode logprobs (prefill exact, the greedy tokens unchanged): the path alert fires baseline-free', async (t) => {
  const cand = await engine({ m: { specDecodeShift: 0.5 } });
  t.after(() => cand.close());
  const r = await run(t, cand, null, ['m'], 12);
  const ps = r.paths('m');
  assert.equal(ps.length, 12);
  assert.ok(ps.filter((p) => p.verdict === 'path_inconsistent').length >= 11, JSON.stringify(ps.map((p) => p.verdict)));
  assert.deepEqual(
    pathAlerts(r.alerts).map((a) => [a.backend, a.model]),
    [['candidate', 'm']],
  );
});

test('prompt logprobs that depend on the previous request (vllm#42019): caught as path_inconsistent', async (t) => {
  const cand = await engine({ m: { staleBuffer: 0.5 } });
  t.after(() => cand.close());
  const r = await run(t, cand, null, ['m'], 12);
  const ps = r.paths('m');
  assert.ok(ps.filter((p) => p.verdict === 'path_inconsistent').length >= 11, JSON.stringify(ps.map((p) => p.verdict)));
  assert.ok(pathAlerts(r.alerts).length === 1);
});

test('every decode logprob reported as 0.0 (llama.cpp#27972): the definition check flags it and the path check does not call it identical', async (t) => {
  const cand = await engine({ m: { zeroDecodeLogprobs: true } });
  t.after(() => cand.close());
  const r = await run(t, cand, null, ['m'], 8);
  const ps = r.paths('m');
  assert.equal(ps.length, 8);
  for (const p of ps) {
    assert.equal(p.verdict, 'path_inconsistent');
    const checks = (p.analysis?.definition ?? []).filter((w) => w.side === 'candidate').map((w) => w.check);
    assert.ok(
      checks.includes('single_survivor'),
      `the decode side is flagged: ${JSON.stringify(p.analysis?.definition)}`,
    );
  }
});

test('with a baseline both sides are checked; a baseline whose own paths disagree is named', async (t) => {
  const cand = await engine();
  const base = await engine({ m: { specDecodeShift: 0.5 } });
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await run(t, cand, base, ['m'], 10);
  assert.equal(r.paths('m', 'candidate').length, 10);
  assert.ok(r.paths('m', 'candidate').every((p) => p.verdict === 'identical'));
  assert.ok(r.paths('m', 'baseline').filter((p) => p.verdict === 'path_inconsistent').length >= 9);
  assert.deepEqual(
    pathAlerts(r.alerts).map((a) => [a.backend, a.model]),
    [['baseline', 'm']],
  );
});

test('path.rate 0 turns the check off; path.backends picks the sides', async (t) => {
  const cand = await engine();
  const base = await engine();
  t.after(() => Promise.all([cand.close(), base.close()]));
  const off = await run(t, cand, base, ['m'], 4, { path: { rate: 0 } });
  assert.ok(off.pairs.every((p) => p.paths === undefined));
  await off.lp.close();
  const one = await run(t, cand, base, ['m'], 4, { path: { backends: ['candidate'] } });
  assert.ok(one.pairs.every((p) => p.paths?.length === 1 && p.paths[0]!.backend === 'candidate'));
});

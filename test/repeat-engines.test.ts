import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool, request } from 'undici';
import { createSimModel, startEngineServer, type EngineServerHandle, type SimOptions } from '@logprobe/engine';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import type { ConfigInput } from '../src/config/schema.js';
import type { AlertTransition } from '../src/core/detector.js';
import type { MirroredPair } from '../src/pair/types.js';
import type { RepeatPair } from '../src/pair/repeat.js';

// Issue #22: the repeat probes of the cache path on the vLLM, SGLang and llama-server APIs as
// their servers behave — counts only behind their flags and only above 0, vLLM's unchecked
// /reset_prefix_cache, SGLang's admin key and ?timeout=, prompt-logprob scoring that never reads
// the cache. Baseline-free, `repeat: {rate: 1, flush: true}`, the engine doubles (packages/engine).

type Api = 'vllm' | 'sglang' | 'llamacpp';

/** The engine flags that let each API's repeat probes see the cache path. */
const FLAGS: Record<Api, object> = {
  vllm: { devMode: true, promptTokensDetails: true },
  sglang: { enableCacheReport: true },
  llamacpp: { slotSavePath: '/tmp' },
};

function engine(api: Api, sim: SimOptions, flags: object = FLAGS[api]): Promise<EngineServerHandle> {
  return startEngineServer({ model: createSimModel({ seed: 11, id: 'm', cacheSlots: 4, ...sim }), api, ...flags });
}

const FAST_ALERT = { window: 20, minRequests: 5, fireFraction: 0.5, forSeconds: 0 };

const TOOLS = [
  {
    type: 'function' as const,
    function: {
      name: 'lookup',
      description: 'Look a word up',
      parameters: { type: 'object', properties: { word: { type: 'string' } } },
    },
  },
];

/**
 * n requests alternating completions and chat (every third chat with tools, response_format and
 * reasoning_effort), each prompt its own and long enough to fill whole 16-token blocks.
 */
async function traffic(client: OpenAI, from: number, n: number): Promise<void> {
  for (let i = from; i < from + n; i++) {
    const text = `Request ${i}: tell a short story about the number ${i * 7 + 3}, with a river, a lantern, a ferry and an old map, in plain words that anyone can follow`;
    if (i % 2 === 0) await client.completions.create({ model: 'm', prompt: text, max_tokens: 8 });
    else if (i % 3 === 0)
      await client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: text }],
        max_tokens: 8,
        tools: TOOLS,
        response_format: { type: 'json_object' },
        reasoning_effort: 'low',
      });
    else
      await client.chat.completions.create({
        model: 'm',
        messages: [
          { role: 'system', content: 'You are terse.' },
          { role: 'user', content: text },
        ],
        max_tokens: 8,
      });
  }
}

async function probe(
  t: { after(fn: () => unknown): void },
  cand: EngineServerHandle,
  n: number,
  config: ConfigInput = {},
  apiKey = 'none',
) {
  const pairs: MirroredPair[] = [];
  const alerts: AlertTransition[] = [];
  const lp = await startLogprobe(
    {
      candidate: { url: cand.url },
      baseline: null,
      alert: FAST_ALERT,
      ...config,
      mirror: { sampleRate: 1, concurrency: 1, repeat: { rate: 1, flush: true }, ...config.mirror },
    },
    { listeners: { onPair: (p) => pairs.push(p), onAlert: (a) => alerts.push(a) } },
  );
  t.after(() => lp.close());
  const client = new OpenAI({ baseURL: `${lp.proxyUrl}/v1`, apiKey, maxRetries: 0 });
  // In rounds the mirror keeps up with (its queue would drop copies of a faster stream: counted, not probed).
  for (let from = 0; from < n; from += 20) {
    await traffic(client, from, Math.min(20, n - from));
    await lp.runtime.mirror!.idle();
  }
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  const repeats: RepeatPair[] = pairs.flatMap((p) => p.repeats ?? []);
  return { lp, pairs, alerts, metrics, repeats };
}

const figures = (rs: readonly RepeatPair[]) => JSON.stringify(rs.map((r) => [r.probe, r.cached, r.verdict]));

for (const api of ['vllm', 'sglang', 'llamacpp'] as const) {
  test(`${api} API: a cache-hit fault is self_inconsistent on ≥ 90% of cold→warm probes and LogprobSelfInconsistency fires`, async (t) => {
    const cand = await engine(api, { cacheHitShift: 0.5 });
    t.after(() => cand.close());
    const r = await probe(t, cand, 30);
    assert.equal(r.repeats.length, 30);
    const probes = r.repeats.filter((x) => x.probe === 'cold_warm');
    // Judged on the probes whose first run read nothing from the cache: another copy can reach the
    // engine between the flush and the first run and leave the chat template's prefix cached (a
    // first run with a few cached tokens hits the fault too, and the two runs then agree).
    const cold = probes.filter((x) => !x.cached.first);
    const hit = cold.filter((x) => x.verdict === 'self_inconsistent').length;
    console.log(
      `# ${api} cache-hit: ${hit} of ${cold.length} fully cold→warm probes self_inconsistent (${probes.length} cold→warm, ${r.repeats.length} pairs)`,
    );
    assert.ok(probes.length >= 27, `${probes.length} of 30 cold→warm: ${figures(r.repeats)}`);
    assert.ok(cold.length >= 20, `${cold.length} of 30 fully cold→warm: ${figures(r.repeats)}`);
    assert.ok(hit / cold.length >= 0.9, `self_inconsistent on ${hit} of ${cold.length}: ${figures(r.repeats)}`);
    assert.ok(
      r.alerts.some((a) => a.alert === 'LogprobSelfInconsistency' && a.backend === 'candidate' && a.to === 'firing'),
    );
    assert.equal(
      metricValue(r.metrics, 'logprobe_self_probes_total', { backend: 'candidate', probe: 'cold_warm' }),
      probes.length,
    );
    assert.equal(
      metricValue(r.metrics, 'logprobe_engine_capability', { backend: 'candidate', capability: 'cache_path' }),
      1,
    );
    // The warm run's own evidence stands: where the engine's scoring does not read the cache, none is made.
    for (const x of r.repeats) {
      assert.equal(x.sides.first.by, 'generation');
      if (api !== 'llamacpp' && x.sides.scored)
        assert.equal(x.sides.scored.counted, false, 'a prompt-logprob scoring never stands in for the warm run');
      if (api !== 'llamacpp' && x.analysis?.scored?.outcome === 'ok')
        assert.fail(`a ${api} repeat was scored by a method that does not read the cache: ${x.analysis.scored.method}`);
    }
  });

  test(`${api} API, clean (noise 0.001): 0 self_inconsistent over 200 repeat pairs, tools, response_format and reasoning_effort included`, async (t) => {
    const cand = await engine(api, { noise: 0.001 });
    t.after(() => cand.close());
    // Scoring on every pair where it is made in a repeat (llama-server's reads the cache, one call a
    // position: on diverged pairs only, to keep the test short); vLLM's and SGLang's are never made.
    const r = await probe(t, cand, 200, {
      analysis: { scoring: { when: api === 'llamacpp' ? 'diverged' : 'always' } },
    });
    assert.equal(r.repeats.length, 200);
    const bad = r.repeats.filter((x) => x.verdict === 'self_inconsistent');
    const mix: Record<string, number> = {};
    for (const x of r.repeats) mix[`${x.probe}/${x.verdict}`] = (mix[`${x.probe}/${x.verdict}`] ?? 0) + 1;
    console.log(`# ${api} clean: ${JSON.stringify(mix)}`);
    assert.deepEqual(
      bad.map((x) => x.analysis?.explanation),
      [],
    );
    assert.ok(!r.alerts.some((a) => a.alert === 'LogprobSelfInconsistency'));
    assert.ok(r.repeats.filter((x) => x.probe === 'cold_warm').length >= 180, figures(r.repeats.slice(0, 20)));
  });
}

test('vLLM without its flags: every repeat pair unprobed, counted and never fed to the alert; serve says once which flag fixes it and exports it', async (t) => {
  const cand = await engine('vllm', { cacheHitShift: 0.5 }, {});
  t.after(() => cand.close());
  const r = await probe(t, cand, 12);
  assert.equal(r.repeats.length, 12);
  assert.ok(
    r.repeats.every((x) => x.probe === 'unprobed'),
    figures(r.repeats),
  );
  assert.ok(
    r.repeats.every((x) => x.flushError !== undefined && !x.flushed),
    'no dev mode: no flush',
  );
  assert.ok(!r.alerts.some((a) => a.alert === 'LogprobSelfInconsistency'));
  assert.equal(metricValue(r.metrics, 'logprobe_self_probes_total', { backend: 'candidate', probe: 'unprobed' }), 12);
  assert.equal(
    metricValue(r.metrics, 'logprobe_engine_capability', { backend: 'candidate', capability: 'cache_path' }),
    0,
  );
  await r.lp.close();
  const said = r.lp.logs.lines.filter((l) => String(l.msg).startsWith('candidate cannot probe its cache path'));
  assert.equal(said.length, 1, 'said once');
  assert.match(String(said[0]!.msg), /--enable-prompt-tokens-details/);
});

test('vLLM in dev mode without the counts flag: /reset_prefix_cache answers 200 without checking, so the pairs stay unprobed', async (t) => {
  const cand = await engine('vllm', { cacheHitShift: 0.5 }, { devMode: true });
  t.after(() => cand.close());
  const r = await probe(t, cand, 8);
  assert.equal(r.repeats.length, 8, 'every request repeated');
  assert.ok(
    r.repeats.every((x) => x.flushed && !x.confirmedFlush && x.probe === 'unprobed'),
    figures(r.repeats),
  );
  assert.ok(!r.alerts.some((a) => a.alert === 'LogprobSelfInconsistency'));
});

test('SGLang with --admin-api-key: the flush goes with candidate.adminApiKey (the client key is refused there) and ?timeout=; without it, 401 and no flush', async (t) => {
  const cand = await engine(
    'sglang',
    { cacheHitShift: 0.5 },
    { enableCacheReport: true, apiKey: 'client-key', adminApiKey: 'admin-key' },
  );
  t.after(() => cand.close());
  const r = await probe(t, cand, 6, { candidate: { url: cand.url, adminApiKey: 'admin-key' } }, 'client-key');
  assert.equal(r.repeats.length, 6, 'every request repeated');
  assert.ok(
    r.repeats.every((x) => x.flushed && x.confirmedFlush && x.flushError === undefined),
    JSON.stringify(r.repeats.map((x) => x.flushError)),
  );
  const flushes = cand.requests.filter((q) => q.path.startsWith('/flush_cache'));
  assert.ok(flushes.length >= 6, `${flushes.length} flushes`);
  assert.deepEqual([...new Set(flushes.map((q) => String(q.headers.authorization)))], ['Bearer admin-key']);
  // The query the double's recorder does not keep: ?timeout= in seconds, half the backend's timeout.
  const seen: string[] = [];
  const srv = createServer((req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization}`);
    res.end('Cache flushed.');
  });
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise((resolve) => srv.close(resolve)));
  const { sglangProfile } = await import('../src/backend/engines/sglang.js');
  const pool = new Pool(`http://127.0.0.1:${(srv.address() as AddressInfo).port}`);
  t.after(() => pool.close());
  await sglangProfile.flush({
    pool,
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`,
    headers: { authorization: 'Bearer client-key' },
    timeoutMs: 60_000,
    adminApiKey: 'admin-key',
  });
  assert.deepEqual(seen, ['POST /flush_cache?timeout=30 Bearer admin-key']);
  await r.lp.close();

  const again = await probe(t, cand, 2, {}, 'client-key');
  assert.equal(again.repeats.length, 2, 'every request repeated');
  assert.ok(
    again.repeats.every((x) => !x.flushed && /401/.test(x.flushError ?? '')),
    JSON.stringify(again.repeats.map((x) => x.flushError)),
  );
});

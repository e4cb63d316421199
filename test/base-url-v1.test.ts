import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createSimModel, startEngineServer } from '@logprobe/engine';
import { buildConfig } from '../src/config/load.js';
import { backendBase } from '../src/config/values.js';
import { startLogprobe } from './helpers/logprobe.js';
import { runCli } from './helpers/cli.js';
import type { MirroredPair } from '../src/pair/types.js';

// A backend URL written as an OpenAI client's base_url (`http://host:8000/v1`): logprobe appends
// the client's own /v1/… path and calls the engine's native routes under the URL's path, so the
// /v1 is dropped where the URL is read (config, environment, command-line flags), never doubled.

test('backendBase drops a trailing /v1 and keeps every other path', () => {
  assert.equal(backendBase('http://h:8000/v1'), 'http://h:8000');
  assert.equal(backendBase('http://h:8000/v1/'), 'http://h:8000');
  assert.equal(backendBase('https://gw.example/llama/v1'), 'https://gw.example/llama');
  assert.equal(backendBase('http://h:8000/V1'), 'http://h:8000');
  assert.equal(backendBase('http://h:8000/v1beta'), 'http://h:8000/v1beta');
  assert.equal(backendBase('http://h:8000/prefix'), 'http://h:8000/prefix');
  assert.equal(backendBase('http://h:8000'), 'http://h:8000');
  const c = buildConfig({ candidate: { url: 'http://h:8000/v1' }, baseline: { url: 'http://t:9000/api/v1/' } });
  assert.equal(c.candidate.url, 'http://h:8000');
  assert.equal(c.baseline.url, 'http://t:9000/api');
});

test('candidate and baseline URLs ending in /v1: the openai client through the proxy gets its answer, and the pair is mirrored and scored', async (t) => {
  const cand = await startEngineServer({ model: createSimModel({ seed: 3, id: 'm' }), api: 'vllm' });
  const base = await startEngineServer({ model: createSimModel({ seed: 3, id: 'm', stateShift: 0.6 }), api: 'vllm' });
  t.after(() => Promise.all([cand.close(), base.close()]));
  const pairs: MirroredPair[] = [];
  const lp = await startLogprobe(
    { candidate: { url: `${cand.url}/v1` }, baseline: { url: `${base.url}/v1` }, mirror: { sampleRate: 1 } },
    { listeners: { onPair: (p) => pairs.push(p) } },
  );
  t.after(() => lp.close());
  const client = new OpenAI({ baseURL: `${lp.proxyUrl}/v1`, apiKey: 'sk-test', maxRetries: 0 });
  for (let i = 0; i < 3; i++) {
    const r = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: `Say something about caches, number ${i}` }],
      max_tokens: 8,
    });
    assert.ok(r.choices[0]!.message.content);
  }
  await lp.runtime.mirror!.idle();
  assert.equal(pairs.length, 3);
  assert.ok(pairs.every((p) => p.outcome === 'ok' && p.candidate.status === 200 && p.baseline!.status === 200));
  assert.ok(
    pairs.some((p) => p.analysis?.scored?.outcome === 'ok'),
    'scoring reached the engines’ native routes',
  );
});

test('logprobe probe URL/v1: says the URL it calls, and probes the engine there', async (t) => {
  const e = await startEngineServer({ model: createSimModel({ seed: 3, id: 'm' }), api: 'vllm' });
  t.after(() => e.close());
  const r = await runCli(['probe', `${e.url}/v1`, '--json']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(
    r.stderr,
    new RegExp(`probing ${e.url.replace(/\./g, '\\.')} \\(the /v1 of ${e.url.replace(/\./g, '\\.')}/v1 dropped`),
  );
  const report = JSON.parse(r.stdout) as { url: string; engine: string };
  assert.equal(report.url, e.url);
  assert.equal(report.engine, 'vllm');
});

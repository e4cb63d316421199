/**
 * What each `api` pretends to be, as a client probing an unknown backend sees it (the
 * order an `engine: auto` detection reads them): `/v1/models` `owned_by`, the `server` header,
 * the 404 of a path the engine lacks, `/health` — and the default, `logprobe`, unchanged.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ENGINE_APIS } from '../src/api/profile.js';
import { get, post, startSim } from './helpers/engine-sim.js';

const EXPECTED = {
  logprobe: { owned: 'logprobe', server: null, notFound: /Invalid URL \(POST \/generate\)/, cache: false },
  openai: { owned: 'system', server: null, notFound: /Invalid URL \(POST \/generate\)/, cache: false },
  vllm: { owned: 'vllm', server: 'uvicorn', notFound: /^\{"detail":"Not Found"\}$/, cache: true },
  sglang: { owned: 'sglang', server: 'uvicorn', notFound: null, cache: true },
  llamacpp: {
    owned: 'llamacpp',
    server: 'llama.cpp',
    notFound: /^\{"error":\{"code":404,"message":"File Not Found","type":"not_found_error"\}\}$/,
    cache: true,
  },
} as const;

test('every api: owned_by, the server header, the prefix cache default, a path it lacks', async (t) => {
  for (const api of ENGINE_APIS) {
    const e = EXPECTED[api];
    const engine = await startSim(t, { seed: 1 }, { api });
    assert.equal(engine.api, api);
    assert.equal(engine.prefixCache, e.cache, `${api}: prefix cache default`);
    const models = await get(engine.url, '/v1/models');
    assert.equal(models.status, 200);
    assert.equal(models.json.object, 'list');
    assert.equal(models.json.data[0].owned_by, e.owned, api);
    assert.equal(models.headers.get('server'), e.server, `${api}: server header`);
    // /generate is SGLang's; everyone else answers 404 in its own words.
    const lacking = await post(engine.url, '/generate', { text: 'x' });
    if (e.notFound === null) assert.equal(lacking.status, 200, 'sglang serves /generate');
    else {
      assert.equal(lacking.status, 404, api);
      assert.match(lacking.text, e.notFound, api);
    }
    assert.equal((await get(engine.url, '/health')).status, 200);
  }
});

test("each engine's own endpoints exist only under its api", async (t) => {
  const owners: Array<[string, string, string]> = [
    ['POST', '/tokenize', 'vllm sglang llamacpp'],
    ['GET', '/version', 'vllm'],
    ['GET', '/get_server_info', 'sglang'],
    ['GET', '/get_model_info', 'sglang'],
    ['GET', '/props', 'llamacpp'],
    ['POST', '/apply-template', 'llamacpp'],
    ['POST', '/completion', 'llamacpp'],
  ];
  for (const api of ENGINE_APIS) {
    const engine = await startSim(t, { seed: 1 }, { api });
    for (const [method, path, who] of owners) {
      const res = method === 'GET' ? await get(engine.url, path) : await post(engine.url, path, {});
      const served = who.split(' ').includes(api);
      if (served) assert.notEqual(res.status, 404, `${api} ${path}`);
      else assert.equal(res.status, 404, `${api} ${path}`);
    }
  }
});

test('the default api is the old engine: OpenAI envelope errors, no server header, no prefix cache, /health {"status":"ok"}', async (t) => {
  const engine = await startSim(t, { seed: 1 });
  assert.equal(engine.api, 'logprobe');
  assert.equal(engine.prefixCache, false);
  const health = await get(engine.url, '/health');
  assert.deepEqual(health.json, { status: 'ok' });
  assert.equal(health.headers.get('server'), null);
  const body = { prompt: 'The same prompt twice', max_tokens: 6, temperature: 0, logprobs: 3 };
  const a = await post(engine.url, '/v1/completions', body);
  const b = await post(engine.url, '/v1/completions', body);
  assert.deepEqual(b.json.choices, a.json.choices);
  assert.deepEqual(Object.keys(a.json.usage), ['prompt_tokens', 'completion_tokens', 'total_tokens']);
});

test("vLLM and SGLang answer /health with an empty 200; a wrong method is FastAPI's 405", async (t) => {
  for (const api of ['vllm', 'sglang'] as const) {
    const engine = await startSim(t, { seed: 1 }, { api });
    const health = await get(engine.url, '/health');
    assert.equal(health.status, 200);
    assert.equal(health.text, '');
    const wrong = await get(engine.url, '/tokenize');
    assert.equal(wrong.status, 405);
    assert.deepEqual(wrong.json, { detail: 'Method Not Allowed' });
  }
});

test("openai: the legacy echo + logprobs + max_tokens 0 — the prompt's tokens, token_logprobs[0] null", async (t) => {
  const engine = await startSim(t, { seed: 1 }, { api: 'openai' });
  const res = await post(engine.url, '/v1/completions', {
    prompt: 'The cache holds the key',
    echo: true,
    logprobs: 3,
    max_tokens: 0,
    temperature: 0,
  });
  assert.equal(res.status, 200);
  const c = res.json.choices[0];
  assert.equal(c.text, 'The cache holds the key');
  assert.equal(c.logprobs.tokens.join(''), 'The cache holds the key');
  assert.equal(c.logprobs.token_logprobs[0], null);
  assert.equal(c.logprobs.top_logprobs[0], null);
  assert.ok(c.logprobs.token_logprobs.slice(1).every((x: number) => x < 0));
  assert.equal(res.json.usage.completion_tokens, 0);
});

/**
 * `api: 'sglang'` on the simulated engine: native /generate with the newest input-logprob
 * alignment (entries for tokens s..n-1, entry 0 null), output logprobs with the EOS token,
 * max_new_tokens 0, /tokenize and /detokenize, the info endpoints, and /flush_cache (400 while a
 * request runs) — the teacher-forcing recipe (logprob_start_len = len(P) - 1) cross-checked against vLLM's.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createSimModel } from '../src/sim/model.js';
import { get, post, postStream, startSim } from './helpers/engine-sim.js';

const sim = createSimModel({ seed: 6 });
const P = sim.tokenize('The model of the cache and the state');

type Entry = [number | null, number, string | null];

test('/generate: input entries for tokens s..n-1 with entry 0 null; top-K lists; text only when asked', async (t) => {
  const engine = await startSim(t, { seed: 6 }, { api: 'sglang' });
  for (const s of [0, 3, P.length - 1]) {
    const res = await post(engine.url, '/generate', {
      input_ids: P,
      sampling_params: { max_new_tokens: 2, temperature: 0 },
      return_logprob: true,
      logprob_start_len: s,
      top_logprobs_num: 3,
    });
    assert.equal(res.status, 200);
    const m = res.json.meta_info;
    assert.deepEqual(Object.keys(res.json), ['text', 'output_ids', 'meta_info']);
    const input = m.input_token_logprobs as Entry[];
    assert.equal(input.length, P.length - s, `s=${s}`);
    assert.deepEqual(input[0], [null, P[s], null]);
    input.forEach((e, k) => assert.equal(e[1], P[s + k], 'entry k is token s+k'));
    assert.equal(m.input_top_logprobs[0], null);
    for (const top of m.input_top_logprobs.slice(1))
      assert.equal(top.length, 3, 'exactly K, the actual token not added');
    assert.equal(m.output_token_logprobs.length, 2);
    assert.equal(m.output_top_logprobs.length, 2);
    assert.equal(m.prompt_tokens, P.length);
    assert.equal(m.completion_tokens, 2);
    assert.deepEqual(m.finish_reason, { type: 'length', length: 2 });
  }
  const text = await post(engine.url, '/generate', {
    text: 'The model',
    sampling_params: { max_new_tokens: 1, temperature: 0 },
    return_logprob: true,
    return_text_in_logprobs: true,
  });
  const out = text.json.meta_info.output_token_logprobs[0] as Entry;
  assert.equal(out[2], sim.tokenText(out[1]));
  assert.equal(text.json.meta_info.input_token_logprobs.length, 1, 'default logprob_start_len -1: output only');
});

test('/generate scores a fixed sequence like vLLM prompt_logprobs does, bit for bit (same engine, two APIs)', async (t) => {
  const sg = await startSim(t, { seed: 6 }, { api: 'sglang' });
  const vl = await startSim(t, { seed: 6 }, { api: 'vllm' });
  const gen = await post(vl.url, '/v1/completions', {
    prompt: P,
    max_tokens: 6,
    temperature: 0,
    return_token_ids: true,
  });
  const C = gen.json.choices[0].token_ids as number[];
  const full = [...P, ...C];
  const v = await post(vl.url, '/v1/completions', { prompt: full, max_tokens: 1, temperature: 0, prompt_logprobs: 2 });
  const g = await post(sg.url, '/generate', {
    input_ids: full,
    sampling_params: { max_new_tokens: 1, temperature: 0 },
    return_logprob: true,
    logprob_start_len: P.length - 1,
    top_logprobs_num: 2,
  });
  const input = g.json.meta_info.input_token_logprobs as Entry[];
  const scored = input.slice(-C.length);
  C.forEach((id, j) => {
    assert.equal(scored[j]![1], id);
    assert.equal(scored[j]![0], v.json.choices[0].prompt_logprobs[P.length + j][String(id)].logprob);
  });
});

test('max_new_tokens 0 is a prefill-only request; negative is refused in SGLang words; the EOS token is an output', async (t) => {
  const engine = await startSim(t, { seed: 6 }, { api: 'sglang' });
  const zero = await post(engine.url, '/generate', {
    input_ids: P,
    sampling_params: { max_new_tokens: 0 },
    return_logprob: true,
    logprob_start_len: 0,
  });
  assert.equal(zero.json.text, '');
  assert.deepEqual(zero.json.output_ids, []);
  assert.deepEqual(zero.json.meta_info.finish_reason, { type: 'length', length: 0 });
  assert.equal(zero.json.meta_info.input_token_logprobs.length, P.length);
  const neg = await post(engine.url, '/generate', { text: 'x', sampling_params: { max_new_tokens: -1 } });
  assert.equal(neg.status, 400);
  assert.deepEqual(neg.json, { error: { message: 'max_new_tokens must be at least 0, got -1.' } });
  const far = await post(engine.url, '/generate', { input_ids: P, return_logprob: true, logprob_start_len: P.length });
  assert.equal(far.status, 400);
  assert.match(far.json.error.message, /is higher than the number of input tokens/);
  // Prompts that end: find one whose greedy continuation stops on EOS within 80 tokens.
  for (let i = 0; i < 40; i++) {
    const res = await post(engine.url, '/generate', {
      text: `Prompt ${i}: the end`,
      sampling_params: { max_new_tokens: 80, temperature: 0 },
      return_logprob: true,
    });
    const m = res.json.meta_info;
    if (m.finish_reason.type !== 'stop') continue;
    assert.equal(m.finish_reason.matched, sim.eosToken);
    assert.equal(res.json.output_ids.at(-1), sim.eosToken, 'output_ids end with the EOS token');
    assert.equal(m.completion_tokens, res.json.output_ids.length);
    assert.equal(m.output_token_logprobs.length, res.json.output_ids.length);
    return;
  }
  assert.fail('no prompt ended with EOS');
});

test('/tokenize, /v1/tokenize, /detokenize; /get_model_info, /model_info, /get_server_info, /server_info', async (t) => {
  const engine = await startSim(t, { seed: 6 }, { api: 'sglang' });
  for (const path of ['/tokenize', '/v1/tokenize']) {
    const res = await post(engine.url, path, { prompt: 'The model' });
    assert.deepEqual(Object.keys(res.json), ['tokens', 'count', 'max_model_len']);
    assert.deepEqual(res.json.tokens, sim.tokenize('The model'));
  }
  assert.deepEqual((await post(engine.url, '/v1/tokenize', { prompt: ['a', 'bc'] })).json.count, [1, 2]);
  assert.deepEqual((await post(engine.url, '/detokenize', { tokens: sim.tokenize('The model') })).json, {
    text: 'The model',
  });
  for (const path of ['/get_model_info', '/model_info'])
    assert.equal((await get(engine.url, path)).json.is_generation, true);
  for (const path of ['/get_server_info', '/server_info']) {
    const info = (await get(engine.url, path)).json;
    assert.equal(typeof info.version, 'string');
    assert.equal(info.tp_size, 1);
    assert.equal(info.disable_radix_cache, false);
  }
});

test('the radix cache: meta_info.cached_tokens, never beyond logprob_start_len; /flush_cache 200, and 400 while a request runs', async (t) => {
  const engine = await startSim(t, { seed: 6 }, { api: 'sglang', tokenDelayMs: 20 });
  const body = { input_ids: P, sampling_params: { max_new_tokens: 2, temperature: 0 } };
  assert.equal((await post(engine.url, '/generate', body)).json.meta_info.cached_tokens, 0);
  assert.equal((await post(engine.url, '/generate', body)).json.meta_info.cached_tokens, P.length - 1);
  const limited = await post(engine.url, '/generate', { ...body, return_logprob: true, logprob_start_len: 2 });
  assert.equal(limited.json.meta_info.cached_tokens, 2);
  const flushed = await get(engine.url, '/flush_cache', 'POST');
  assert.equal(flushed.status, 200);
  assert.match(flushed.text, /^Cache flushed\.\n/);
  assert.equal((await post(engine.url, '/generate', body)).json.meta_info.cached_tokens, 0);
  const running = post(engine.url, '/generate', { ...body, sampling_params: { max_new_tokens: 20, temperature: 0 } });
  await new Promise((r) => setTimeout(r, 100));
  const busy = await get(engine.url, '/flush_cache');
  assert.equal(busy.status, 400);
  assert.match(busy.text, /When there are running or waiting requests, the operation will not be performed/);
  await running;
});

test('--enable-cache-report: usage.prompt_tokens_details.cached_tokens on the OpenAI routes only with the flag and only above 0; meta_info.cached_tokens on /generate always', async (t) => {
  const prompt = sim.tokenize('The cache holds the key and the value of the model');
  const body = { prompt, max_tokens: 2, temperature: 0 };
  const report = await startSim(t, { seed: 6 }, { api: 'sglang', enableCacheReport: true });
  assert.equal(
    (await post(report.url, '/v1/completions', body)).json.usage.prompt_tokens_details,
    null,
    'a cold 0 is not reported',
  );
  assert.deepEqual((await post(report.url, '/v1/completions', body)).json.usage.prompt_tokens_details, {
    cached_tokens: prompt.length - 1,
  });
  const messages = [{ role: 'user', content: 'The cache holds the key' }];
  assert.equal(
    (await post(report.url, '/v1/chat/completions', { messages, max_tokens: 2 })).json.usage.prompt_tokens_details,
    null,
  );
  const warmChat = await postStream(report.url, '/v1/chat/completions', {
    messages,
    max_tokens: 2,
    stream_options: { include_usage: true },
  });
  assert.ok(warmChat.chunks.at(-1).usage.prompt_tokens_details.cached_tokens > 0, 'streamed usage too');
  assert.equal((await get(report.url, '/server_info')).json.enable_cache_report, true);

  const quiet = await startSim(t, { seed: 6 }, { api: 'sglang' });
  await post(quiet.url, '/v1/completions', body);
  const warm = await post(quiet.url, '/v1/completions', body);
  assert.equal(warm.json.usage.prompt_tokens_details, null, 'no count without the flag');
  const gen = await post(quiet.url, '/generate', { input_ids: prompt, sampling_params: { max_new_tokens: 1 } });
  assert.equal(gen.json.meta_info.cached_tokens, prompt.length - 1, 'native /generate reports it regardless');
});

test('/flush_cache?timeout=S waits for idle up to S seconds, then flushes (200) — or answers 400 if the engine is still busy; a bad timeout is a 422', async (t) => {
  const engine = await startSim(t, { seed: 6 }, { api: 'sglang', tokenDelayMs: 20 });
  const body = { input_ids: P, sampling_params: { max_new_tokens: 2, temperature: 0 } };
  const long = { ...body, sampling_params: { max_new_tokens: 15, temperature: 0 } };
  const during = async (path: string): Promise<{ status: number; ms: number; runDone: boolean }> => {
    let runDone = false;
    const run = post(engine.url, '/generate', long).then(() => (runDone = true));
    await new Promise((r) => setTimeout(r, 80));
    const t0 = performance.now();
    const res = await get(engine.url, path, 'POST');
    const seen = { status: res.status, ms: performance.now() - t0, runDone };
    await run;
    return seen;
  };
  await post(engine.url, '/generate', body);
  const short = await during('/flush_cache?timeout=0.05');
  assert.equal(short.status, 400, 'still busy after 50 ms');
  assert.equal(
    (await post(engine.url, '/generate', body)).json.meta_info.cached_tokens,
    P.length - 1,
    'nothing flushed',
  );
  const waited = await during('/flush_cache?timeout=5');
  assert.equal(waited.status, 200);
  assert.ok(waited.runDone, 'it answered once the running request was done');
  assert.equal((await post(engine.url, '/generate', body)).json.meta_info.cached_tokens, 0, 'flushed');
  assert.equal((await during('/flush_cache')).status, 400, 'no timeout: fail fast');
  const bad = await get(engine.url, '/flush_cache?timeout=soon', 'POST');
  assert.equal(bad.status, 422);
  assert.equal(bad.json.detail[0].loc[1], 'timeout');
});

async function keyed(
  base: string,
  path: string,
  key: string | null,
  body?: unknown,
): Promise<{ status: number; json: unknown }> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (key !== null) headers.authorization = `Bearer ${key}`;
  const res = await fetch(base + path, {
    method: 'POST',
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  try {
    return { status: res.status, json: JSON.parse(text) as unknown };
  } catch {
    return { status: res.status, json: null }; // flush_cache's plain text
  }
}

test('--api-key / --admin-api-key (auth.py decide_request_auth): /flush_cache is ADMIN_OPTIONAL — the admin key only when set, the plain key refused 401; other routes the plain key; /health open', async (t) => {
  const gen = { input_ids: P, sampling_params: { max_new_tokens: 1 } };
  const both = await startSim(t, { seed: 6 }, { api: 'sglang', apiKey: 'user-key', adminApiKey: 'admin-key' });
  assert.deepEqual(await keyed(both.url, '/generate', null, gen), { status: 401, json: { error: 'Unauthorized' } });
  assert.equal(
    (await keyed(both.url, '/generate', 'admin-key', gen)).status,
    401,
    'the admin key does not open a normal route',
  );
  assert.equal((await keyed(both.url, '/generate', 'user-key', gen)).status, 200);
  assert.deepEqual(await keyed(both.url, '/flush_cache', 'user-key'), { status: 401, json: { error: 'Unauthorized' } });
  assert.equal((await keyed(both.url, '/flush_cache', 'admin-key')).status, 200);
  assert.equal((await fetch(`${both.url}/health`)).status, 200, '/health needs no key');
  assert.equal((await keyed(both.url, '/no_such_route', null)).status, 401, 'the key is checked before routing');
  const x = await fetch(`${both.url}/flush_cache`, { method: 'POST', headers: { 'x-api-key': 'admin-key' } });
  assert.equal(x.status, 200, 'x-api-key works as well');

  const plain = await startSim(t, { seed: 6 }, { api: 'sglang', apiKey: 'user-key' });
  assert.equal((await keyed(plain.url, '/flush_cache', null)).status, 401);
  assert.equal(
    (await keyed(plain.url, '/flush_cache', 'user-key')).status,
    200,
    'no admin key: the plain one opens it',
  );

  const admin = await startSim(t, { seed: 6 }, { api: 'sglang', adminApiKey: 'admin-key' });
  assert.equal((await keyed(admin.url, '/generate', null, gen)).status, 200, 'admin key only: normal routes are open');
  assert.equal((await keyed(admin.url, '/flush_cache', null)).status, 401);
  assert.equal((await keyed(admin.url, '/flush_cache', 'admin-key')).status, 200);
});

test('prompt logprobs: the reused prefix is capped at logprob_start_len (schedule_batch.py), so logprob_start_len 0 reads nothing from a warm cache', async (t) => {
  const clean = await startSim(t, { seed: 6 }, { api: 'sglang' });
  const bad = await startSim(t, { seed: 6, cacheHitShift: 0.6 }, { api: 'sglang' });
  const warmup = { input_ids: P, sampling_params: { max_new_tokens: 2, temperature: 0 } };
  const scoring = {
    input_ids: P,
    sampling_params: { max_new_tokens: 1, temperature: 0 },
    return_logprob: true,
    logprob_start_len: 0,
    top_logprobs_num: 2,
  };
  const ref = (await post(clean.url, '/generate', scoring)).json.meta_info;
  await post(bad.url, '/generate', warmup);
  const cold = (await post(bad.url, '/generate', scoring)).json.meta_info;
  assert.equal(cold.cached_tokens, 0, 'nothing read');
  assert.deepEqual(cold.input_token_logprobs, ref.input_token_logprobs, 'no cache-hit fault: computed cold');
  const late = (await post(bad.url, '/generate', { ...scoring, logprob_start_len: P.length - 2 })).json.meta_info;
  assert.equal(late.cached_tokens, P.length - 2, 'a later start reads up to it');
  assert.notDeepEqual(
    late.input_token_logprobs.slice(1),
    ref.input_token_logprobs.slice(P.length - 1),
    'and the fault shows there',
  );
});

test('/tokenize takes messages from 0.5.4 (TokenizeRequest): the ids the chat route feeds the model; 0.5.0 takes text only; /server_info reports the release', async (t) => {
  const messages = [{ role: 'user', content: 'The model of the cache' }];
  const now = await startSim(t, { seed: 6 }, { api: 'sglang', engineVersion: '0.5.4' });
  assert.equal((await get(now.url, '/server_info')).json.version, '0.5.4');
  const tok = await post(now.url, '/v1/tokenize', { messages });
  assert.equal(tok.status, 200, tok.text);
  const chat = await post(now.url, '/v1/chat/completions', { messages, max_tokens: 1 });
  assert.equal(tok.json.count, chat.json.usage.prompt_tokens);
  assert.equal(tok.json.tokens.length, tok.json.count);
  const open = await post(now.url, '/tokenize', { messages, add_generation_prompt: false });
  assert.ok(open.json.count < tok.json.count, 'without the generation prompt: fewer tokens');
  assert.equal((await post(now.url, '/tokenize', { messages, prompt: 'x' })).status, 400);

  const old = await startSim(t, { seed: 6 }, { api: 'sglang' });
  assert.equal((await get(old.url, '/get_server_info')).json.version, '0.5.0');
  const refused = await post(old.url, '/v1/tokenize', { messages });
  assert.equal(refused.status, 400, 'text only before');
});

test('--enable-deterministic-inference turns --batch-noise off: co-resident copies of a greedy request are bitwise the one alone', async (t) => {
  const body = { input_ids: P, sampling_params: { max_new_tokens: 6, temperature: 0 }, return_logprob: true };
  const lps = (r: { json: { meta_info: { output_token_logprobs: Array<[number, number, null]> } } }): number[] =>
    r.json.meta_info.output_token_logprobs.map((e) => e[0]);
  const noisy = await startSim(t, { seed: 6, batchNoise: 0.05 }, { api: 'sglang', tokenDelayMs: 2 });
  const solo = lps(await post(noisy.url, '/generate', body));
  assert.deepEqual(lps(await post(noisy.url, '/generate', body)), solo, 'alone: bit for bit');
  const crowd = await Promise.all(Array.from({ length: 6 }, () => post(noisy.url, '/generate', body)));
  assert.ok(crowd.filter((r) => JSON.stringify(lps(r)) !== JSON.stringify(solo)).length >= 3, 'batched: they move');
  const det = await startSim(
    t,
    { seed: 6, batchNoise: 0.05 },
    { api: 'sglang', tokenDelayMs: 2, batchInvariant: true },
  );
  assert.equal((await get(det.url, '/server_info')).json.enable_deterministic_inference, true);
  for (const r of await Promise.all(Array.from({ length: 6 }, () => post(det.url, '/generate', body))))
    assert.deepEqual(lps(r), solo);
});

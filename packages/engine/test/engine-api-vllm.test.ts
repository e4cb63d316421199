/**
 * `api: 'vllm'` on the simulated engine: the scoring path of the vLLM profile in vLLM's shapes
 * and words — /tokenize (prompt or messages through the engine's
 * template), token-id prompts, prompt_logprobs, echo with max_tokens 0, token_id:N rendering,
 * return_token_ids, the 20 cap, dev-mode /reset_prefix_cache, and prompt logprobs skipping the
 * prefix cache.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createSimModel } from '../src/sim/model.js';
import { get, post, postStream, startSim } from './helpers/engine-sim.js';

const sim = createSimModel({ seed: 5 });
const P = sim.tokenize('The model of the cache and the state');

test('/tokenize: a prompt, or messages through the chat template (the ids chat feeds the model); /detokenize; /version', async (t) => {
  const engine = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const tok = await post(engine.url, '/tokenize', { prompt: 'The model of the cache' });
  assert.deepEqual(Object.keys(tok.json), ['count', 'max_model_len', 'tokens', 'token_strs']);
  assert.deepEqual(tok.json.tokens, sim.tokenize('The model of the cache'));
  assert.equal(tok.json.count, tok.json.tokens.length);
  assert.equal(tok.json.token_strs, null);
  assert.equal(
    (await post(engine.url, '/tokenize', { prompt: [1, 2] })).status,
    400,
    'a token-id list is not accepted',
  );
  const messages = [{ role: 'user', content: 'What is in the cache?' }];
  const chatIds = (await post(engine.url, '/tokenize', { messages })).json.tokens as number[];
  const chat = await post(engine.url, '/v1/chat/completions', {
    messages,
    max_tokens: 4,
    temperature: 0,
    logprobs: true,
    top_logprobs: 3,
  });
  assert.equal(chat.json.usage.prompt_tokens, chatIds.length);
  const scored = await post(engine.url, '/v1/completions', {
    prompt: chatIds,
    max_tokens: 4,
    temperature: 0,
    logprobs: 3,
  });
  assert.deepEqual(
    scored.json.choices[0].logprobs.token_logprobs,
    chat.json.choices[0].logprobs.content.map((c: { logprob: number }) => c.logprob),
  );
  const both = await post(engine.url, '/tokenize', { messages, continue_final_message: true });
  assert.equal(both.status, 400);
  assert.match(both.json.error.message, /Cannot set both `continue_final_message` and `add_generation_prompt` to True/);
  const strs = await post(engine.url, '/tokenize', { prompt: 'The cache', return_token_strs: true });
  assert.deepEqual(strs.json.token_strs, ['The', ' cache']);
  assert.deepEqual((await post(engine.url, '/detokenize', { tokens: tok.json.tokens })).json, {
    prompt: 'The model of the cache',
  });
  const version = await get(engine.url, '/version');
  assert.match(version.json.version, /^\d+\.\d+\.\d+/);
});

test('prompt_logprobs: null first, then token-id keys — the actual token plus the top K — with logprob, rank, decoded_token', async (t) => {
  const engine = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const res = await post(engine.url, '/v1/completions', {
    prompt: P,
    max_tokens: 1,
    temperature: 0,
    prompt_logprobs: 3,
  });
  assert.equal(res.status, 200);
  assert.deepEqual(Object.keys(res.json), [
    'id',
    'object',
    'created',
    'model',
    'choices',
    'service_tier',
    'system_fingerprint',
    'usage',
    'kv_transfer_params',
  ]);
  assert.deepEqual(Object.keys(res.json.choices[0]), [
    'index',
    'text',
    'logprobs',
    'finish_reason',
    'stop_reason',
    'prompt_logprobs',
  ]);
  assert.deepEqual(Object.keys(res.json.usage), [
    'prompt_tokens',
    'total_tokens',
    'completion_tokens',
    'prompt_tokens_details',
  ]);
  const pl = res.json.choices[0].prompt_logprobs as Array<Record<
    string,
    { logprob: number; rank: number; decoded_token: string }
  > | null>;
  assert.equal(pl.length, P.length);
  assert.equal(pl[0], null);
  // JSON.parse reorders integer-like keys: read the raw key order for "actual token first".
  const raw = res.text.slice(res.text.indexOf('"prompt_logprobs":'));
  const firstKeys = [...raw.matchAll(/\{"(\d+)":\{"logprob"/g)].map((m) => Number(m[1]));
  for (let i = 1; i < P.length; i++) {
    const entry = pl[i]!;
    const keys = Object.keys(entry);
    assert.ok(keys.length === 3 || keys.length === 4, `position ${i}: ${keys.length} keys`);
    assert.ok(String(P[i]) in entry, 'the actual prompt token is always present');
    assert.equal(firstKeys[i - 1], P[i], 'and first');
    const ranks = Object.entries(entry)
      .filter(([k]) => k !== String(P[i]) || entry[k]!.rank <= 3)
      .map(([, v]) => v.rank);
    for (const r of [1, 2, 3]) assert.ok(ranks.includes(r), `rank ${r} at ${i}`);
    assert.equal(entry[String(P[i])]!.decoded_token, sim.tokenText(P[i]!));
  }
  // Teacher forcing: the prompt logprobs of a continuation are what generating it gave.
  const gen = await post(engine.url, '/v1/completions', {
    prompt: P,
    max_tokens: 5,
    temperature: 0,
    logprobs: 0,
    return_token_ids: true,
  });
  const C = gen.json.choices[0].token_ids as number[];
  const forced = await post(engine.url, '/v1/completions', {
    prompt: [...P, ...C],
    max_tokens: 1,
    temperature: 0,
    prompt_logprobs: 0,
  });
  const fpl = forced.json.choices[0].prompt_logprobs;
  C.forEach((id, j) =>
    assert.equal(fpl[P.length + j][String(id)].logprob, gen.json.choices[0].logprobs.token_logprobs[j]),
  );
});

test('the errors in vLLM words: max_tokens 0 without echo, the 20 cap on both kinds, prompt_logprobs with stream', async (t) => {
  const engine = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const zero = await post(engine.url, '/v1/completions', { prompt: P, max_tokens: 0 });
  assert.equal(zero.status, 400);
  assert.deepEqual(zero.json, {
    error: {
      message: 'max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)',
      type: 'BadRequestError',
      param: 'max_tokens',
      code: 400,
    },
  });
  const cases: Array<[Record<string, unknown>, string]> = [
    [
      { logprobs: 21 },
      'Requested sample logprobs of 21, which is greater than max allowed: 20 (parameter=logprobs, value=21)',
    ],
    [
      { prompt_logprobs: 21 },
      'Requested prompt logprobs of 21, which is greater than max allowed: 20 (parameter=prompt_logprobs, value=21)',
    ],
    [
      { prompt_logprobs: -1 },
      `Requested prompt logprobs of ${sim.vocabSize}, which is greater than max allowed: 20 (parameter=prompt_logprobs, value=${sim.vocabSize})`,
    ],
    [{ prompt_logprobs: 2, stream: true }, '`prompt_logprobs` are not available when `stream=True`.'],
  ];
  for (const [extra, message] of cases) {
    const res = await post(engine.url, '/v1/completions', { prompt: P, max_tokens: 1, ...extra });
    assert.equal(res.status, 400, JSON.stringify(extra));
    assert.equal(res.json.error.message, message);
  }
  const chat = await post(engine.url, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'x' }],
    logprobs: true,
    top_logprobs: 21,
  });
  assert.match(chat.json.error.message, /^Requested sample logprobs of 21, which is greater than max allowed: 20/);
});

test('echo + logprobs + max_tokens 0: the prompt alone, first entry null, prompt_logprobs beside it; token_id:N and return_token_ids', async (t) => {
  const engine = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const res = await post(engine.url, '/v1/completions', {
    prompt: 'The model of the cache',
    echo: true,
    max_tokens: 0,
    logprobs: 2,
    return_tokens_as_token_ids: true,
    return_token_ids: true,
  });
  assert.equal(res.status, 200);
  const c = res.json.choices[0];
  const ids = sim.tokenize('The model of the cache');
  assert.equal(c.text, '', 'with return_token_ids the echoed text is empty');
  assert.deepEqual(
    c.logprobs.tokens,
    ids.map((id) => `token_id:${id}`),
  );
  assert.equal(c.logprobs.token_logprobs[0], null);
  assert.equal(c.logprobs.top_logprobs[0], null);
  assert.equal(c.logprobs.text_offset[0], 0);
  for (const d of c.logprobs.top_logprobs.slice(1))
    assert.ok(Object.keys(d).every((k) => /^token_id:\d+$/.test(k)) && Object.keys(d).length <= 3);
  assert.deepEqual(c.prompt_token_ids, ids);
  assert.equal(c.token_ids.length, 1, 'one token generated inside');
  assert.equal(res.json.usage.completion_tokens, 1);
  assert.equal(c.prompt_logprobs.length, ids.length);
  const chat = await post(engine.url, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 2,
    logprobs: true,
    top_logprobs: 2,
    return_tokens_as_token_ids: true,
  });
  const item = chat.json.choices[0].logprobs.content[0];
  assert.match(item.token, /^token_id:\d+$/);
  assert.deepEqual(item.bytes, [...Buffer.from(item.token)]);
  assert.ok(item.top_logprobs.every((e: { token: string }) => /^token_id:\d+$/.test(e.token)));
  assert.deepEqual(Object.keys(chat.json.choices[0].logprobs), ['content'], 'no refusal on vLLM');
  assert.equal(chat.json.choices[0].stop_reason, null);
});

test('the prefix cache: whole 16-token blocks, reported with --enable-prompt-tokens-details; prompt_logprobs never read it', async (t) => {
  const prompt = sim.tokenize(
    'The cache holds the key and the value of the model, and the state of the model is the cache',
  );
  assert.ok(prompt.length > 17);
  const clean = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const bad = await startSim(
    t,
    { seed: 5, cacheHitShift: 0.6 },
    { api: 'vllm', promptTokensDetails: true, devMode: true },
  );
  const body = { prompt, max_tokens: 3, temperature: 0, logprobs: 2 };
  const ref = await post(clean.url, '/v1/completions', body);
  const cold = await post(bad.url, '/v1/completions', body);
  assert.equal(cold.json.usage.prompt_tokens_details, null);
  assert.deepEqual(cold.json.choices[0].logprobs, ref.json.choices[0].logprobs);
  const warm = await post(bad.url, '/v1/completions', body);
  const cached = warm.json.usage.prompt_tokens_details.cached_tokens;
  assert.equal(cached, Math.floor((prompt.length - 1) / 16) * 16);
  assert.notDeepEqual(
    warm.json.choices[0].logprobs.token_logprobs,
    ref.json.choices[0].logprobs.token_logprobs,
    'the cache-hit stand-in moved the warm request',
  );
  const scoring = { prompt, max_tokens: 1, temperature: 0, prompt_logprobs: 2 };
  const a = await post(bad.url, '/v1/completions', scoring);
  assert.deepEqual(
    a.json.choices[0].prompt_logprobs,
    (await post(clean.url, '/v1/completions', scoring)).json.choices[0].prompt_logprobs,
  );
  assert.equal(a.json.usage.prompt_tokens_details, null, 'prompt_logprobs skip reading the prefix cache');
  // dev mode: /reset_prefix_cache empties it (200, empty body); without dev mode it is a 404.
  const reset = await post(bad.url, '/reset_prefix_cache', '');
  assert.equal(reset.status, 200);
  assert.equal(reset.text, '');
  assert.equal(
    (await post(bad.url, '/v1/completions', body)).json.usage.prompt_tokens_details,
    null,
    'cold after the reset',
  );
  assert.deepEqual(await post(clean.url, '/reset_prefix_cache', ''), {
    status: 404,
    contentType: 'application/json',
    text: '{"detail":"Not Found"}',
    json: { detail: 'Not Found' },
  });
});

test('a vLLM completions stream: one token per chunk, finish_reason and stop_reason on the last, usage chunk, [DONE]', async (t) => {
  const engine = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const s = await postStream(engine.url, '/v1/completions', {
    prompt: P,
    max_tokens: 4,
    temperature: 0,
    logprobs: 1,
    stream_options: { include_usage: true },
  });
  assert.equal(s.chunks.length, 5);
  for (const c of s.chunks.slice(0, 4))
    assert.deepEqual(Object.keys(c.choices[0]), ['index', 'text', 'logprobs', 'finish_reason', 'stop_reason']);
  assert.equal(s.chunks[3].choices[0].finish_reason, 'length');
  assert.deepEqual(s.chunks[4].choices, []);
  assert.equal(s.chunks[4].usage.completion_tokens, 4);
  const full = await post(engine.url, '/v1/completions', { prompt: P, max_tokens: 4, temperature: 0, logprobs: 1 });
  assert.equal(
    s.chunks
      .slice(0, 4)
      .map((c) => c.choices[0].text)
      .join(''),
    full.json.choices[0].text,
  );
});

test('chat with return_token_ids (vLLM ≥ 0.10.2): choices[0].token_ids are the generated ids and prompt_token_ids the templated prompt /tokenize gives', async (t) => {
  const engine = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const messages = [{ role: 'user', content: 'The model of the cache' }];
  const res = await post(engine.url, '/v1/chat/completions', {
    messages,
    max_tokens: 6,
    temperature: 0,
    logprobs: true,
    top_logprobs: 2,
    return_token_ids: true,
  });
  assert.equal(res.status, 200);
  const ids = res.json.choices[0].token_ids as number[];
  assert.equal(ids.length, res.json.usage.completion_tokens);
  assert.deepEqual(
    ids.map((id) => sim.tokenText(id)),
    res.json.choices[0].logprobs.content.map((c: { token: string }) => c.token),
  );
  const tok = await post(engine.url, '/tokenize', { messages, add_generation_prompt: true, add_special_tokens: false });
  assert.deepEqual(res.json.prompt_token_ids, tok.json.tokens);
  const plain = await post(engine.url, '/v1/chat/completions', { messages, max_tokens: 2 });
  assert.equal('token_ids' in plain.json.choices[0], false, 'only when asked');
  assert.equal('prompt_token_ids' in plain.json, false);
});

test('cached_tokens: only with --enable-prompt-tokens-details; a 0 dropped before 0.21.0 (`and num_cached_tokens:`), reported from it (`is not None`); /version says the release', async (t) => {
  const long = sim.tokenize(
    'The cache holds the key and the value of the model, and the state of the model is the cache',
  );
  const body = { prompt: long, max_tokens: 2, temperature: 0 };
  const warmCount = Math.floor((long.length - 1) / 16) * 16;
  const old = await startSim(t, { seed: 5 }, { api: 'vllm', promptTokensDetails: true });
  assert.deepEqual((await get(old.url, '/version')).json, { version: '0.11.0' });
  assert.equal(
    (await post(old.url, '/v1/completions', body)).json.usage.prompt_tokens_details,
    null,
    'a cold 0 is dropped',
  );
  assert.deepEqual((await post(old.url, '/v1/completions', body)).json.usage.prompt_tokens_details, {
    cached_tokens: warmCount,
  });
  const chatOld = await post(old.url, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 1,
  });
  assert.equal(chatOld.json.usage.prompt_tokens_details, null, 'chat: a short prompt never fills a block, 0 dropped');

  const now = await startSim(t, { seed: 5 }, { api: 'vllm', promptTokensDetails: true, engineVersion: '0.21.0' });
  assert.deepEqual((await get(now.url, '/version')).json, { version: '0.21.0' });
  assert.deepEqual((await post(now.url, '/v1/completions', body)).json.usage.prompt_tokens_details, {
    cached_tokens: 0,
  });
  assert.deepEqual((await post(now.url, '/v1/completions', body)).json.usage.prompt_tokens_details, {
    cached_tokens: warmCount,
  });
  const scored = await post(now.url, '/v1/completions', { ...body, max_tokens: 1, prompt_logprobs: 1 });
  assert.deepEqual(
    scored.json.usage.prompt_tokens_details,
    { cached_tokens: 0 },
    'prompt logprobs read no cache: a reported 0',
  );
  const chat = await post(now.url, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 1,
  });
  assert.deepEqual(chat.json.usage.prompt_tokens_details, { cached_tokens: 0 });
  const s = await postStream(now.url, '/v1/completions', {
    prompt: [1, 2, 3],
    max_tokens: 1,
    stream_options: { include_usage: true },
  });
  assert.deepEqual(s.chunks.at(-1).usage.prompt_tokens_details, { cached_tokens: 0 });

  const off = await startSim(t, { seed: 5 }, { api: 'vllm', engineVersion: '0.21.0' });
  await post(off.url, '/v1/completions', body);
  assert.equal(
    (await post(off.url, '/v1/completions', body)).json.usage.prompt_tokens_details,
    null,
    'never without the flag',
  );
});

test('--max-logprobs N: logprobs, chat top_logprobs and prompt_logprobs above N refused in vLLM words and envelope; -1 lets the whole vocabulary through', async (t) => {
  const five = await startSim(t, { seed: 5 }, { api: 'vllm', maxLogprobs: 5 });
  const refused: Array<[string, Record<string, unknown>, string, string]> = [
    [
      '/v1/completions',
      { prompt: P, max_tokens: 1, logprobs: 6 },
      'Requested sample logprobs of 6, which is greater than max allowed: 5 (parameter=logprobs, value=6)',
      'logprobs',
    ],
    [
      '/v1/completions',
      { prompt: P, max_tokens: 1, prompt_logprobs: 6 },
      'Requested prompt logprobs of 6, which is greater than max allowed: 5 (parameter=prompt_logprobs, value=6)',
      'prompt_logprobs',
    ],
    [
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'x' }], logprobs: true, top_logprobs: 6 },
      'Requested sample logprobs of 6, which is greater than max allowed: 5 (parameter=logprobs, value=6)',
      'logprobs',
    ],
  ];
  for (const [path, body, message, param] of refused) {
    const res = await post(five.url, path, body);
    assert.equal(res.status, 400, JSON.stringify(body));
    assert.deepEqual(res.json, { error: { message, type: 'BadRequestError', param, code: 400 } });
  }
  const ok = await post(five.url, '/v1/completions', { prompt: P, max_tokens: 1, logprobs: 5, prompt_logprobs: 5 });
  assert.equal(ok.status, 200);
  assert.equal(
    (
      await post(five.url, '/v1/chat/completions', {
        messages: [{ role: 'user', content: 'x' }],
        max_tokens: 1,
        logprobs: true,
        top_logprobs: 5,
      })
    ).status,
    200,
  );

  const wide = await startSim(t, { seed: 5 }, { api: 'vllm', maxLogprobs: -1 });
  const all = await post(wide.url, '/v1/completions', { prompt: P, max_tokens: 1, prompt_logprobs: -1, logprobs: 30 });
  assert.equal(all.status, 200, all.text.slice(0, 200));
  const chat = await post(wide.url, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 1,
    logprobs: true,
    top_logprobs: 25,
  });
  assert.equal(chat.status, 200, chat.text.slice(0, 200));
  // The default is vLLM's 20.
  const dflt = await startSim(t, { seed: 5 }, { api: 'vllm' });
  assert.match(
    (await post(dflt.url, '/v1/completions', { prompt: P, max_tokens: 1, logprobs: 21 })).json.error.message,
    /max allowed: 20 /,
  );
});

test('/reset_prefix_cache (dev mode) answers 200 while a running request keeps it from resetting; ?reset_running_requests=true resets', async (t) => {
  const long = sim.tokenize(
    'The cache holds the key and the value of the model, and the state of the model is the cache',
  );
  const warmCount = Math.floor((long.length - 1) / 16) * 16;
  const engine = await startSim(
    t,
    { seed: 5 },
    { api: 'vllm', devMode: true, promptTokensDetails: true, tokenDelayMs: 20 },
  );
  const body = { prompt: long, max_tokens: 2, temperature: 0 };
  const running = { ...body, max_tokens: 20 };
  await post(engine.url, '/v1/completions', body);
  const during = async (path: string): Promise<{ status: number; text: string }> => {
    const run = post(engine.url, '/v1/completions', running);
    await new Promise((r) => setTimeout(r, 100));
    const reset = await post(engine.url, path, '');
    await run;
    return reset;
  };
  const refused = await during('/reset_prefix_cache');
  assert.deepEqual([refused.status, refused.text], [200, ''], 'a 200 with nothing to say');
  assert.deepEqual(
    (await post(engine.url, '/v1/completions', body)).json.usage.prompt_tokens_details,
    { cached_tokens: warmCount },
    'the cache was not reset',
  );
  const forced = await during('/reset_prefix_cache?reset_running_requests=true');
  assert.equal(forced.status, 200);
  assert.equal(
    (await post(engine.url, '/v1/completions', body)).json.usage.prompt_tokens_details,
    null,
    'reset: cold again',
  );
  assert.equal((await post(engine.url, '/reset_prefix_cache?reset_running_requests=maybe', '')).status, 422);
  assert.deepEqual((await get(engine.url, '/reset_prefix_cache')).json, { detail: 'Method Not Allowed' });
});

test('prompt_logprobs skip reading the prefix cache (skip_reading_prefix_cache) but still write it; echo with logprobs likewise', async (t) => {
  const long = sim.tokenize(
    'The cache holds the key and the value of the model, and the state of the model is the cache',
  );
  const warmCount = Math.floor((long.length - 1) / 16) * 16;
  const clean = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const bad = await startSim(t, { seed: 5, cacheHitShift: 0.6 }, { api: 'vllm', promptTokensDetails: true });
  const scoring = { prompt: long, max_tokens: 1, temperature: 0, prompt_logprobs: 2 };
  const ref = (await post(clean.url, '/v1/completions', scoring)).json.choices[0].prompt_logprobs;
  assert.deepEqual((await post(bad.url, '/v1/completions', scoring)).json.choices[0].prompt_logprobs, ref);
  const plain = await post(bad.url, '/v1/completions', { prompt: long, max_tokens: 2, temperature: 0 });
  assert.deepEqual(
    plain.json.usage.prompt_tokens_details,
    { cached_tokens: warmCount },
    'the scoring request wrote the cache',
  );
  const again = await post(bad.url, '/v1/completions', scoring);
  assert.deepEqual(again.json.choices[0].prompt_logprobs, ref, 'a warm cache is not read: no cache-hit fault');
  assert.equal(again.json.usage.prompt_tokens_details, null, 'no cached tokens counted');
  const echo = await post(bad.url, '/v1/completions', { prompt: long, max_tokens: 0, echo: true, logprobs: 1 });
  assert.equal(echo.json.usage.prompt_tokens_details, null, 'echo + logprobs asks for prompt logprobs: cold too');
});

test('the V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1): prompt logprobs of the prompt token only, no top-k; sample logprobs keep theirs', async (t) => {
  const v1 = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const v2 = await startSim(t, { seed: 5 }, { api: 'vllm', v2ModelRunner: true });
  const body = { prompt: P, max_tokens: 1, temperature: 0, prompt_logprobs: 3 };
  const full = (await post(v1.url, '/v1/completions', body)).json.choices[0].prompt_logprobs;
  const bare = (await post(v2.url, '/v1/completions', body)).json.choices[0].prompt_logprobs;
  assert.equal(bare[0], null);
  for (let i = 1; i < P.length; i++) {
    assert.deepEqual(Object.keys(bare[i]), [String(P[i])], `position ${i}: the prompt token alone`);
    assert.deepEqual(bare[i][String(P[i])], full[i][String(P[i])]);
    assert.ok(Object.keys(full[i]).length >= 3, 'V1 lists the top 3 beside it');
  }
  const echo = (
    await post(v2.url, '/v1/completions', { prompt: P, max_tokens: 2, temperature: 0, echo: true, logprobs: 3 })
  ).json.choices[0].logprobs;
  for (const d of echo.top_logprobs.slice(1, P.length))
    assert.equal(Object.keys(d).length, 1, 'echoed prompt positions: one entry');
  for (const d of echo.top_logprobs.slice(P.length))
    assert.ok(Object.keys(d).length >= 3, 'generated positions: the top 3');
});

test('--batch-noise: a request alone is bitwise the same every time, among co-resident ones it moves; VLLM_BATCH_INVARIANT=1 (--batch-invariant) keeps it exact', async (t) => {
  const body = { prompt: P, max_tokens: 8, temperature: 0, logprobs: 1 };
  const lps = (r: { json: { choices: Array<{ logprobs: { token_logprobs: number[] } }> } }): number[] =>
    r.json.choices[0]!.logprobs.token_logprobs;
  for (const [name, options] of [
    ['cache on (served in turn, the waiting ones batched)', {}],
    ['cache off, all at once', { prefixCache: false, concurrency: 0 }],
  ] as const) {
    const noisy = await startSim(t, { seed: 5, batchNoise: 0.05 }, { api: 'vllm', tokenDelayMs: 2, ...options });
    const solo = lps(await post(noisy.url, '/v1/completions', body));
    assert.deepEqual(lps(await post(noisy.url, '/v1/completions', body)), solo, `${name}: alone, bit for bit`);
    const crowd = await Promise.all(Array.from({ length: 8 }, () => post(noisy.url, '/v1/completions', body)));
    const moved = crowd.filter((r) => JSON.stringify(lps(r)) !== JSON.stringify(solo)).length;
    assert.ok(moved >= 4, `${name}: ${moved} of 8 co-resident copies moved`);

    const exact = await startSim(
      t,
      { seed: 5, batchNoise: 0.05 },
      { api: 'vllm', tokenDelayMs: 2, batchInvariant: true, ...options },
    );
    const crowd2 = await Promise.all(Array.from({ length: 8 }, () => post(exact.url, '/v1/completions', body)));
    for (const r of crowd2) assert.deepEqual(lps(r), solo, `${name}: batch-invariant`);
  }
});

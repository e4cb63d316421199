/**
 * Generation controls through the server: a stream assembles to the non-streamed answer, and
 * stop, max_tokens, include_usage, echo, temperature and seed behave as on OpenAI.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { post, postStream, rawTopDicts, sseData, startSim } from './helpers/engine-sim.js';

const CHAT = {
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Tell me about the cache.' },
  ],
  temperature: 0,
  logprobs: true,
  top_logprobs: 5,
};

test('a chat stream assembles to the same text, tokens and logprobs as the non-streamed answer', async (t) => {
  const engine = await startSim(t, { seed: 21 });
  const full = await post(engine.url, '/v1/chat/completions', { ...CHAT, max_tokens: 40 });
  const stream = await postStream(engine.url, '/v1/chat/completions', { ...CHAT, max_tokens: 40 });
  const tokenChunks = stream.chunks.slice(1, -1);
  assert.equal(stream.chunks.at(-1).choices[0].finish_reason, full.json.choices[0].finish_reason);
  assert.equal(tokenChunks.map((c) => c.choices[0].delta.content).join(''), full.json.choices[0].message.content);
  assert.deepEqual(
    tokenChunks.flatMap((c) => c.choices[0].logprobs.content),
    full.json.choices[0].logprobs.content,
  );
});

test('a completions stream assembles to the same text, tokens, logprobs and offsets', async (t) => {
  const engine = await startSim(t, { seed: 21 });
  const body = { prompt: 'The weights of the model', max_tokens: 30, temperature: 0, logprobs: 3 };
  const full = await post(engine.url, '/v1/completions', body);
  const stream = await postStream(engine.url, '/v1/completions', body);
  const tokenChunks = stream.chunks.slice(0, -1);
  const lp = full.json.choices[0].logprobs;
  assert.equal(tokenChunks.map((c) => c.choices[0].text).join(''), full.json.choices[0].text);
  for (const key of ['tokens', 'token_logprobs', 'text_offset'] as const) {
    assert.deepEqual(
      tokenChunks.flatMap((c) => c.choices[0].logprobs[key]),
      lp[key],
      key,
    );
  }
  const streamedDicts = sseData(stream.text)
    .slice(0, -2)
    .flatMap((d) => rawTopDicts(d));
  assert.deepEqual(streamedDicts, rawTopDicts(full.text));
});

test('max_tokens stops with finish_reason length and usage counts the tokens', async (t) => {
  const engine = await startSim(t, { seed: 2 });
  for (const max of [1, 5, 17]) {
    const res = await post(engine.url, '/v1/completions', {
      prompt: 'The state of the cache',
      max_tokens: max,
      temperature: 0,
      logprobs: 0,
    });
    assert.equal(res.json.choices[0].finish_reason, 'length');
    assert.equal(res.json.choices[0].logprobs.tokens.length, max);
    assert.deepEqual(res.json.usage, { prompt_tokens: 5, completion_tokens: max, total_tokens: 5 + max });
    // logprobs 0: the chosen token only.
    assert.ok((res.json.choices[0].logprobs.top_logprobs as object[]).every((d) => Object.keys(d).length === 1));
  }
  const chat = await post(engine.url, '/v1/chat/completions', { ...CHAT, max_completion_tokens: 3, max_tokens: 50 });
  assert.equal(chat.json.usage.completion_tokens, 3, 'max_completion_tokens wins over max_tokens');
});

test('stop strings end the text before the stop, with finish_reason stop, streamed or not', async (t) => {
  const engine = await startSim(t, { seed: 2 });
  const base = { prompt: 'Once upon a time', max_tokens: 40, temperature: 0, logprobs: 1 };
  const free = await post(engine.url, '/v1/completions', base);
  const text: string = free.json.choices[0].text;
  const tokens: string[] = free.json.choices[0].logprobs.tokens;
  // A stop string that starts inside the text: the 3 characters from the middle of token 6.
  const start = tokens.slice(0, 6).join('').length + 1;
  const stop = text.slice(start, start + 3);
  assert.equal(stop.length, 3);
  const cut = text.indexOf(stop);
  for (const stream of [false, true]) {
    const body = { ...base, stop: ['never-appears', stop] };
    const res = stream
      ? await postStream(engine.url, '/v1/completions', body)
      : await post(engine.url, '/v1/completions', body);
    const chunks = 'chunks' in res ? res.chunks : [res.json];
    const got = chunks.map((c: any) => c.choices[0]?.text ?? '').join('');
    assert.equal(got, text.slice(0, cut), `stream=${stream}`);
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
    // The logprobs cover the tokens that contributed text before the stop.
    const listed = chunks.flatMap((c: any) => c.choices[0]?.logprobs?.tokens ?? []);
    assert.equal(listed.join('').startsWith(got), true);
    assert.ok(listed.length <= 7);
  }
  const single = await post(engine.url, '/v1/chat/completions', { ...CHAT, max_tokens: 40, stop: 'e' });
  assert.ok(!single.json.choices[0].message.content.includes('e'));
  assert.equal(single.json.choices[0].finish_reason, 'stop');
});

test('include_usage adds a usage chunk with no choices before [DONE]; without it there is none', async (t) => {
  const engine = await startSim(t, { seed: 2 });
  for (const path of ['/v1/completions', '/v1/chat/completions']) {
    const body = path === '/v1/completions' ? { prompt: 'x', max_tokens: 4 } : { ...CHAT, max_tokens: 4 };
    const with_ = await postStream(engine.url, path, { ...body, stream_options: { include_usage: true } });
    const last = with_.chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 4);
    assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + 4);
    const without = await postStream(engine.url, path, body);
    assert.ok(without.chunks.every((c) => !('usage' in c)));
  }
});

test('echo returns the prompt with prompt logprobs, the first one null', async (t) => {
  const engine = await startSim(t, { seed: 2 });
  const res = await post(engine.url, '/v1/completions', {
    prompt: 'The artificial layer',
    max_tokens: 3,
    temperature: 0,
    logprobs: 2,
    echo: true,
  });
  const lp = res.json.choices[0].logprobs;
  assert.ok(res.json.choices[0].text.startsWith('The artificial layer'));
  assert.deepEqual(lp.tokens.slice(0, 3), ['The', ' artificial', ' layer']);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  assert.ok(lp.token_logprobs[1] < 0);
  assert.deepEqual(lp.text_offset.slice(0, 4), [0, 3, 14, 20]);
  assert.equal(lp.tokens.length, 6);
  const plain = await post(engine.url, '/v1/completions', {
    prompt: 'The artificial layer',
    max_tokens: 3,
    echo: true,
    temperature: 0,
  });
  assert.equal(plain.json.choices[0].text, res.json.choices[0].text);
});

test('temperature > 0 samples: reproducible with a seed, varied without; greedy ignores the seed', async (t) => {
  const engine = await startSim(t, { seed: 2 });
  const body = { prompt: 'Sampling', max_tokens: 12, temperature: 1 };
  const a = await post(engine.url, '/v1/completions', { ...body, seed: 42 });
  const b = await post(engine.url, '/v1/completions', { ...body, seed: 42 });
  assert.equal(a.json.choices[0].text, b.json.choices[0].text);
  const texts = new Set<string>();
  for (let i = 0; i < 6; i++) texts.add((await post(engine.url, '/v1/completions', body)).json.choices[0].text);
  assert.ok(texts.size > 1, 'unseeded samples all equal');
  const greedy = await post(engine.url, '/v1/completions', { ...body, temperature: 0 });
  const greedySeeded = await post(engine.url, '/v1/completions', { ...body, temperature: 0, seed: 7 });
  assert.equal(greedySeeded.json.choices[0].text, greedy.json.choices[0].text);
  // top_k 1 is greedy too; a tiny top_p keeps only the most likely token.
  const topK = await post(engine.url, '/v1/completions', { ...body, top_k: 1 });
  const topP = await post(engine.url, '/v1/completions', { ...body, top_p: 1e-9 });
  assert.equal(topK.json.choices[0].text, greedy.json.choices[0].text);
  assert.equal(topP.json.choices[0].text, greedy.json.choices[0].text);
});

test('completions accept token-id prompts and arrays of prompts (the first is answered)', async (t) => {
  const engine = await startSim(t, { seed: 2 });
  const text = await post(engine.url, '/v1/completions', {
    prompt: 'The cache',
    max_tokens: 5,
    temperature: 0,
    logprobs: 1,
  });
  const ids = await post(engine.url, '/v1/completions', { prompt: [85, 305], max_tokens: 5, temperature: 0 });
  const list = await post(engine.url, '/v1/completions', {
    prompt: ['The cache', 'other'],
    max_tokens: 5,
    temperature: 0,
  });
  assert.equal(list.json.choices[0].text, text.json.choices[0].text);
  assert.equal(ids.status, 200);
  assert.equal(ids.json.usage.prompt_tokens, 2);
});

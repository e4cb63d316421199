/**
 * The engine's bodies have exactly the shapes of the recorded OpenAI bodies in test/fixtures:
 * the same keys in the same order at every level, chunk by chunk.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { post, postStream, rawTopDicts, shape, sseData, startSim } from './helpers/engine-sim.js';

const fixture = (name: string): string => readFileSync(new URL(`./fixtures/${name}`, import.meta.url), 'utf8');

test("chat, non-streamed, logprobs with top_logprobs 2: the shape of OpenAI's example", async (t) => {
  const engine = await startSim(t, { seed: 1 });
  const expected = JSON.parse(fixture('openai_chat_nonstream_top_logprobs2.json'));
  const res = await post(engine.url, '/v1/chat/completions', {
    model: 'gpt-4o-mini',
    messages: [{ role: 'user', content: 'Hello!' }],
    logprobs: true,
    top_logprobs: 2,
    max_tokens: 9,
    temperature: 0,
  });
  assert.equal(res.status, 200);
  assert.match(res.contentType ?? '', /^application\/json/);
  // The example predates `refusal`, which the current schema requires next to `content` (and
  // which the recorded stream and today's API carry): the one key the engine adds.
  const { refusal, ...logprobs } = res.json.choices[0].logprobs;
  assert.equal(refusal, null);
  assert.deepEqual(Object.keys(res.json.choices[0].logprobs), ['content', 'refusal']);
  const withoutRefusal = { ...res.json, choices: [{ ...res.json.choices[0], logprobs }] };
  assert.deepEqual(shape(withoutRefusal), shape(expected));
  const content = res.json.choices[0].logprobs.content as Array<{
    token: string;
    bytes: number[];
    top_logprobs: unknown[];
  }>;
  assert.equal(content.length, res.json.usage.completion_tokens);
  for (const item of content) {
    assert.equal(item.top_logprobs.length, 2);
    assert.deepEqual(item.bytes, [...Buffer.from(item.token)]);
  }
  assert.equal(res.json.choices[0].message.content, content.map((c) => c.token).join(''));
});

test('chat, streamed, logprobs without top_logprobs, include_usage: the chunks of the recorded stream', async (t) => {
  const engine = await startSim(t, { seed: 1 });
  const raw = fixture('openai_chat_stream_logprobs.sse');
  const expected = sseData(raw);
  // The recorded stream has two tokens and ends by stop; ask for two tokens (ended by length).
  const res = await postStream(engine.url, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'Say Foo!' }],
    logprobs: true,
    max_tokens: 2,
    temperature: 0,
    stream_options: { include_usage: true },
  });
  assert.equal(res.status, 200);
  assert.match(res.contentType ?? '', /^text\/event-stream/);
  const got = sseData(res.text);
  assert.equal(got.length, expected.length);
  assert.equal(got.at(-1), '[DONE]');
  got
    .slice(0, -1)
    .forEach((d, i) => assert.deepEqual(shape(JSON.parse(d)), shape(JSON.parse(expected[i] as string)), `chunk ${i}`));
  // Event framing: "data: …" then a blank line, exactly as recorded.
  assert.ok(res.text.endsWith('\n\ndata: [DONE]\n\n'));
  assert.equal(res.text.split('\n\n').length, raw.split('\n\n').length);
  assert.deepEqual(res.chunks[0].choices[0].delta, { role: 'assistant', content: '', refusal: null });
  assert.deepEqual(res.chunks[0].choices[0].logprobs, { content: [], refusal: null });
  assert.deepEqual(res.chunks[3].choices[0].delta, {});
  assert.equal(res.chunks[3].choices[0].logprobs, null);
  assert.deepEqual(res.chunks[4].choices, []);
});

test('completions, streamed, logprobs 5: one token per chunk, a trailing chunk with empty arrays, [DONE]', async (t) => {
  const engine = await startSim(t, { seed: 1 });
  const expected = sseData(fixture('openai_completions_stream_logprobs5.sse'));
  const res = await postStream(engine.url, '/v1/completions', {
    prompt: 'Say this is a test',
    max_tokens: 16,
    logprobs: 5,
    temperature: 0,
  });
  const got = sseData(res.text);
  assert.equal(got.length, expected.length, 'token chunks, the trailing chunk, [DONE]');
  got.slice(0, -1).forEach((d, i) => {
    const mine = JSON.parse(d);
    const theirs = JSON.parse(expected[i] as string);
    // The top_logprobs dict is keyed by token text: compare everything else key by key.
    const strip = (c: any): unknown =>
      shape({ ...c, choices: c.choices.map((ch: any) => ({ ...ch, logprobs: { ...ch.logprobs, top_logprobs: [] } })) });
    assert.deepEqual(strip(mine), strip(theirs), `chunk ${i}`);
  });
  const tokenChunks = res.chunks.slice(0, -1);
  tokenChunks.forEach((c, i) => {
    const lp = c.choices[0].logprobs;
    assert.equal(lp.tokens.length, 1);
    assert.equal(c.choices[0].text, lp.tokens[0]);
    const dict = rawTopDicts(got[i] as string)[0] ?? [];
    assert.deepEqual(dict[0], [lp.tokens[0], lp.token_logprobs[0]], 'the chosen token is the first key');
    assert.equal(dict.length, 5);
  });
  // As in the recording: the last token chunk and the trailing chunk both carry finish_reason.
  assert.equal(tokenChunks.at(-1).choices[0].finish_reason, 'length');
  assert.deepEqual(res.chunks.at(-1).choices[0], {
    text: '',
    index: 0,
    logprobs: { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] },
    finish_reason: 'length',
  });
  // text_offset counts from the start of the prompt, as OpenAI's does.
  assert.equal(tokenChunks[0].choices[0].logprobs.text_offset[0], 'Say this is a test'.length);
});

test("completions, non-streamed: OpenAI's body with the streamed logprobs object", async (t) => {
  const engine = await startSim(t, { seed: 1 });
  const res = await post(engine.url, '/v1/completions', {
    prompt: 'Say this is a test',
    max_tokens: 7,
    logprobs: 2,
    temperature: 0,
  });
  assert.deepEqual(Object.keys(res.json), ['id', 'object', 'created', 'model', 'choices', 'usage']);
  assert.deepEqual(Object.keys(res.json.choices[0]), ['text', 'index', 'logprobs', 'finish_reason']);
  assert.deepEqual(Object.keys(res.json.choices[0].logprobs), [
    'tokens',
    'token_logprobs',
    'top_logprobs',
    'text_offset',
  ]);
  assert.deepEqual(Object.keys(res.json.usage), ['prompt_tokens', 'completion_tokens', 'total_tokens']);
  assert.equal(res.json.object, 'text_completion');
  assert.match(res.json.id, /^cmpl-/);
});

test('without logprobs, every logprobs field is null', async (t) => {
  const engine = await startSim(t, { seed: 1 });
  const chat = await post(engine.url, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 3,
  });
  assert.equal(chat.json.choices[0].logprobs, null);
  const comp = await post(engine.url, '/v1/completions', { prompt: 'x', max_tokens: 3 });
  assert.equal(comp.json.choices[0].logprobs, null);
  const stream = await postStream(engine.url, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 3,
  });
  assert.ok(stream.chunks.every((c) => c.choices[0].logprobs === null));
});

test('a digit token among the alternatives stays after the chosen token in the raw dict', async (t) => {
  const engine = await startSim(t, { seed: 1 });
  // JavaScript objects list integer-like keys first; the engine must not.
  for (let i = 0; i < 40; i++) {
    const res = await post(engine.url, '/v1/completions', {
      prompt: `Count ${i}:`,
      max_tokens: 8,
      logprobs: 20,
      temperature: 0,
    });
    const tokens = res.json.choices[0].logprobs.tokens as string[];
    const dicts = rawTopDicts(res.text);
    dicts.forEach((d, k) => assert.equal(d[0]?.[0], tokens[k]));
    if (dicts.some((d, k) => !/^\d+$/.test(tokens[k] as string) && d.some(([key]) => /^\d+$/.test(key)))) return;
  }
  assert.fail('no step with a digit token among the alternatives');
});

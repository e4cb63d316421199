/**
 * vLLM's `/v1/responses` on the vLLM double (vllm/entrypoints/openai/serving_responses.py,
 * protocol.py `ResponsesRequest` / `ResponsesResponse`, api_router.py
 * `_convert_stream_to_sse_events`): the body and its field order, logprobs with `include`, the
 * release before vllm-project/vllm#23319 (no logprobs), `store` and `previous_response_id`, and
 * the named-event stream.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createSimModel } from '../src/sim/model.js';
import { applyChatTemplate } from '../src/chat-template.js';
import { get, post, startSim } from './helpers/engine-sim.js';

const LOGPROBS = ['message.output_text.logprobs'];

test('non-stream: vLLM ResponsesResponse fields in order, output_text logprobs with top_logprobs, sampled first', async (t) => {
  const e = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const r = await post(e.url, '/v1/responses', {
    model: 'm',
    input: 'The quick brown fox',
    max_output_tokens: 6,
    temperature: 0,
    include: LOGPROBS,
    top_logprobs: 3,
  });
  assert.equal(r.status, 200, r.text);
  const b = r.json;
  assert.deepEqual(Object.keys(b), [
    'id',
    'created_at',
    'incomplete_details',
    'instructions',
    'metadata',
    'model',
    'object',
    'output',
    'parallel_tool_calls',
    'temperature',
    'tool_choice',
    'tools',
    'top_p',
    'background',
    'max_output_tokens',
    'max_tool_calls',
    'previous_response_id',
    'prompt',
    'reasoning',
    'service_tier',
    'status',
    'text',
    'top_logprobs',
    'truncation',
    'usage',
    'user',
    'input_messages',
    'output_messages',
  ]);
  assert.match(b.id, /^resp_[0-9a-f]{32}$/);
  assert.equal(b.object, 'response');
  assert.equal(b.status, 'completed');
  assert.equal(b.max_output_tokens, 6);
  assert.equal(b.top_logprobs, 3);
  assert.equal(b.temperature, 0);
  const item = b.output[0];
  assert.deepEqual(Object.keys(item), ['id', 'content', 'role', 'status', 'type']);
  assert.match(item.id, /^msg_[0-9a-f]{32}$/);
  assert.equal(item.type, 'message');
  const text = item.content[0];
  assert.deepEqual(Object.keys(text), ['annotations', 'text', 'type', 'logprobs']);
  assert.equal(text.type, 'output_text');
  assert.equal(text.logprobs.length, b.usage.output_tokens);
  for (const lp of text.logprobs) {
    assert.deepEqual(Object.keys(lp), ['token', 'bytes', 'logprob', 'top_logprobs']);
    assert.deepEqual(lp.bytes, Array.from(Buffer.from(lp.token, 'utf8')));
    assert.equal(lp.top_logprobs.length, 3);
    assert.deepEqual(Object.keys(lp.top_logprobs[0]), ['token', 'bytes', 'logprob']);
    // Greedy: the sampled token is the top one, listed first.
    assert.equal(lp.top_logprobs[0].token, lp.token);
    assert.equal(lp.top_logprobs[0].logprob, lp.logprob);
  }
  assert.equal(text.text, text.logprobs.map((l: { token: string }) => l.token).join(''));
  // The same tokens and numbers as the chat route's logprobs.
  const chat = await post(e.url, '/v1/chat/completions', {
    model: 'm',
    messages: [{ role: 'user', content: 'The quick brown fox' }],
    max_tokens: 6,
    temperature: 0,
    logprobs: true,
    top_logprobs: 3,
  });
  assert.deepEqual(
    chat.json.choices[0].logprobs.content.map((c: { logprob: number }) => c.logprob),
    text.logprobs.map((c: { logprob: number }) => c.logprob),
  );
  assert.deepEqual(Object.keys(b.usage), [
    'input_tokens',
    'input_tokens_details',
    'output_tokens',
    'output_tokens_details',
    'total_tokens',
  ]);
  assert.equal(b.usage.input_tokens_details.cached_tokens >= 0, true);
  assert.equal(b.usage.total_tokens, b.usage.input_tokens + b.usage.output_tokens);
});

test('input as messages with input_text parts and instructions: the chat prompt vLLM builds', async (t) => {
  const e = await startSim(t, { seed: 5 }, { api: 'vllm', prefixCache: false });
  const r = await post(e.url, '/v1/responses', {
    input: [
      {
        role: 'user',
        content: [
          { type: 'input_text', text: 'Hello' },
          { type: 'input_text', text: 'there' },
        ],
      },
    ],
    instructions: 'Be brief.',
    max_output_tokens: 2,
  });
  assert.equal(r.status, 200, r.text);
  const prompt = applyChatTemplate([
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hello\nthere' },
  ]);
  assert.equal(r.json.usage.input_tokens, createSimModel({ seed: 5 }).tokenize(prompt).length);
  assert.equal(r.json.instructions, 'Be brief.');
  // Without include, no logprobs: null in the output text, top_logprobs null.
  assert.equal(r.json.top_logprobs, null);
  if (r.json.output.length > 0) assert.equal(r.json.output[0].content[0].logprobs, null);
});

test('before vllm-project/vllm#23319 (engine version 0.10.1): logprobs asked, none returned', async (t) => {
  const e = await startSim(t, { seed: 5 }, { api: 'vllm', engineVersion: '0.10.1' });
  const body = {
    input: 'The quick brown fox',
    max_output_tokens: 4,
    temperature: 0,
    include: LOGPROBS,
    top_logprobs: 2,
  };
  const r = await post(e.url, '/v1/responses', body);
  assert.equal(r.status, 200);
  assert.equal(r.json.output[0].content[0].logprobs, null);
  const s = await fetch(`${e.url}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  const deltas = events(await s.text()).filter((x) => x.event === 'response.output_text.delta');
  assert.ok(deltas.length > 0);
  assert.ok(deltas.every((d) => Array.isArray(d.data.logprobs) && d.data.logprobs.length === 0));
  // The current release returns them.
  const now = await startSim(t, { seed: 5 }, { api: 'vllm', engineVersion: '0.11.0' });
  assert.equal((await post(now.url, '/v1/responses', body)).json.output[0].content[0].logprobs.length, 4);
});

test('store: ignored without VLLM_ENABLE_RESPONSES_API_STORE, so previous_response_id is a 404; kept with it', async (t) => {
  const plain = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const first = await post(plain.url, '/v1/responses', { input: 'Hello', max_output_tokens: 3 });
  assert.equal(first.status, 200);
  const next = await post(plain.url, '/v1/responses', {
    input: 'And then?',
    previous_response_id: first.json.id,
    max_output_tokens: 3,
  });
  assert.equal(next.status, 404);
  assert.deepEqual(next.json, {
    error: {
      message: `Response with id '${first.json.id}' not found.`,
      type: 'invalid_request_error',
      param: null,
      code: 404,
    },
  });
  assert.equal((await get(plain.url, `/v1/responses/${first.json.id}`)).status, 404);

  const stored = await startSim(t, { seed: 5 }, { api: 'vllm', responsesStore: true, prefixCache: false });
  const a = await post(stored.url, '/v1/responses', { input: 'Hello', max_output_tokens: 3, temperature: 0 });
  const got = await get(stored.url, `/v1/responses/${a.json.id}`);
  assert.equal(got.status, 200);
  assert.deepEqual(got.json, a.json);
  const b = await post(stored.url, '/v1/responses', {
    input: 'And then?',
    previous_response_id: a.json.id,
    max_output_tokens: 3,
  });
  assert.equal(b.status, 200, b.text);
  assert.equal(b.json.previous_response_id, a.json.id);
  // The prompt is the stored turn, its answer as the assistant's, then the new input.
  const answer = a.json.output.length > 0 ? (a.json.output[0].content[0].text as string) : null;
  const messages = [
    { role: 'user', content: 'Hello' },
    ...(answer === null ? [] : [{ role: 'assistant', content: answer }]),
    { role: 'user', content: 'And then?' },
  ];
  assert.equal(b.json.usage.input_tokens, createSimModel({ seed: 5 }).tokenize(applyChatTemplate(messages)).length);
  // store: false is not kept.
  const c = await post(stored.url, '/v1/responses', { input: 'x', store: false, max_output_tokens: 1 });
  assert.equal((await get(stored.url, `/v1/responses/${c.json.id}`)).status, 404);
});

interface Ev {
  event: string;
  data: any;
}

function events(text: string): Ev[] {
  return text
    .split('\n\n')
    .filter((e) => e.trim() !== '')
    .map((e) => {
      const lines = e.split('\n');
      assert.equal(lines.length, 2, e);
      assert.ok(lines[0]?.startsWith('event: '));
      assert.ok(lines[1]?.startsWith('data: '));
      return { event: (lines[0] as string).slice(7), data: JSON.parse((lines[1] as string).slice(6)) };
    });
}

test('stream: named events numbered from 0, logprobs per delta, the completed response whole; no [DONE]', async (t) => {
  const e = await startSim(t, { seed: 5 }, { api: 'vllm' });
  const res = await fetch(`${e.url}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      input: 'The quick brown fox',
      max_output_tokens: 4,
      temperature: 0,
      include: LOGPROBS,
      top_logprobs: 2,
      stream: true,
    }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
  const text = await res.text();
  assert.doesNotMatch(text, /\[DONE\]/);
  const ev = events(text);
  assert.deepEqual(
    ev.map((x) => x.event),
    [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...Array(4).fill('response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ],
  );
  ev.forEach((x, i) => {
    assert.equal(x.data.type, x.event);
    assert.equal(x.data.sequence_number, i);
  });
  assert.equal(ev[0]?.data.response.status, 'in_progress');
  assert.deepEqual(ev[0]?.data.response.output, []);
  assert.equal(ev[0]?.data.response.usage, null);
  const deltas = ev.filter((x) => x.event === 'response.output_text.delta');
  assert.deepEqual(Object.keys(deltas[0]?.data), [
    'content_index',
    'delta',
    'item_id',
    'logprobs',
    'output_index',
    'sequence_number',
    'type',
  ]);
  // vLLM counts the content index up with every delta.
  assert.deepEqual(
    deltas.map((d) => d.data.content_index),
    [1, 2, 3, 4],
  );
  for (const d of deltas) {
    assert.equal(d.data.logprobs.length, 1);
    assert.deepEqual(Object.keys(d.data.logprobs[0]), ['token', 'logprob', 'top_logprobs']);
    assert.equal(d.data.logprobs[0].top_logprobs.length, 2);
    assert.deepEqual(Object.keys(d.data.logprobs[0].top_logprobs[0]), ['token', 'logprob']);
  }
  const done = ev.find((x) => x.event === 'response.output_text.done')?.data;
  assert.equal(done.text, deltas.map((d) => d.data.delta).join(''));
  assert.deepEqual(done.logprobs, []);
  const completed = ev.at(-1)?.data.response;
  assert.equal(completed.status, 'completed');
  assert.equal(completed.output[0].content[0].text, done.text);
  assert.deepEqual(
    completed.output[0].content[0].logprobs.map((l: { logprob: number }) => l.logprob),
    deltas.map((d) => d.data.logprobs[0].logprob),
  );
  assert.equal(completed.usage.output_tokens, 4);
});

test('top_logprobs above --max-logprobs: the sampling params refusal', async (t) => {
  const e = await startSim(t, {}, { api: 'vllm' });
  const r = await post(e.url, '/v1/responses', { input: 'x', include: LOGPROBS, top_logprobs: 21 });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /Requested sample logprobs of 21, which is greater than max allowed: 20/);
});

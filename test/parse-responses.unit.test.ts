import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseResponse } from '../src/core/index.js';

// The Responses API's logprobs (`include: ["message.output_text.logprobs"]`): output_text parts of
// message items, as a body and as the SSE events a streamed answer sends.

const lp = (token: string, logprob: number, top: Array<[string, number]>) => ({
  token,
  bytes: [...Buffer.from(token)],
  logprob,
  top_logprobs: top.map(([t, l]) => ({ token: t, bytes: [...Buffer.from(t)], logprob: l })),
});

const items = [
  lp('Hello', -0.1, [
    ['Hello', -0.1],
    ['Hi', -2.5],
  ]),
  lp(' world', -0.4, [
    [' world', -0.4],
    [' there', -1.3],
  ]),
];

const body = {
  id: 'resp_1',
  object: 'response',
  created_at: 1,
  model: 'm',
  status: 'completed',
  output: [
    { type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: 'thinking' }] },
    {
      type: 'message',
      id: 'msg_1',
      role: 'assistant',
      status: 'completed',
      content: [{ type: 'output_text', text: 'Hello world', annotations: [], logprobs: items }],
    },
  ],
  usage: { input_tokens: 5, output_tokens: 2, total_tokens: 7 },
};

test('a Responses body: the message output_text logprobs are the steps; reasoning items add nothing', () => {
  const p = parseResponse(body);
  assert.equal(p.format, 'responses');
  assert.equal(p.error, undefined);
  assert.equal(p.text, 'Hello world');
  assert.deepEqual(
    p.steps.map((s) => [s.token, s.logprob, s.top.length]),
    [
      ['Hello', -0.1, 2],
      [' world', -0.4, 2],
    ],
  );
  assert.equal(p.model, 'm');
});

test('a Responses body without logprobs (vLLM before they were filled in) says so', () => {
  const none = structuredClone(body);
  (none.output[1] as { content: Array<{ logprobs: unknown[] }> }).content[0]!.logprobs = [];
  const p = parseResponse(none);
  assert.equal(p.format, 'responses');
  assert.equal(p.steps.length, 0);
  assert.equal(p.error, 'no logprobs in the response');
});

test('a streamed Responses answer: the deltas carry the logprobs, response.completed does not repeat them', () => {
  const ev = (type: string, data: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  const sse =
    ev('response.created', { response: { ...body, status: 'in_progress', output: [] } }) +
    ev('response.output_text.delta', {
      item_id: 'msg_1',
      output_index: 1,
      content_index: 0,
      delta: 'Hello',
      logprobs: [items[0]],
    }) +
    ev('response.output_text.delta', {
      item_id: 'msg_1',
      output_index: 1,
      content_index: 0,
      delta: ' world',
      logprobs: [items[1]],
    }) +
    ev('response.output_text.done', { item_id: 'msg_1', output_index: 1, content_index: 0, text: 'Hello world' }) +
    ev('response.completed', { response: body });
  const p = parseResponse(sse);
  assert.equal(p.format, 'responses');
  assert.equal(p.stream, true);
  assert.equal(p.text, 'Hello world');
  assert.deepEqual(
    p.steps.map((s) => s.token),
    ['Hello', ' world'],
  );
  // Deltas without logprobs: the closing response's are read.
  const bare =
    ev('response.output_text.delta', { delta: 'Hello' }) +
    ev('response.output_text.delta', { delta: ' world' }) +
    ev('response.completed', { response: body });
  const q = parseResponse(bare);
  assert.deepEqual(
    q.steps.map((s) => s.token),
    ['Hello', ' world'],
  );
  assert.equal(q.text, 'Hello world');
});

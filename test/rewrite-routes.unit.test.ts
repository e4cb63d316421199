import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  requestKind,
  responsesAsChat,
  responsesMessages,
  rewriteForMirror,
  scoringSource,
  stateSkip,
} from '../src/backend/rewrite.js';

// The Responses API and SGLang's native /generate, made greedy with logprobs forced.

const OPTS = { topLogprobs: 5, maxTokens: 64, seed: 1234, extraParams: {} };

test('routes: /v1/responses and /generate are request kinds of their own', () => {
  assert.equal(requestKind('/v1/responses'), 'responses');
  assert.equal(requestKind('/generate'), 'generate');
  assert.equal(requestKind('/v1/chat/completions'), 'chat');
  assert.equal(requestKind('/v1/completions'), 'completions');
  assert.equal(requestKind('/v1/models'), null);
});

test('a Responses copy: greedy, top_logprobs and the include entry that returns them, output capped, store false, not streamed', () => {
  const out = rewriteForMirror(
    'responses',
    {
      model: 'm',
      input: 'hi',
      temperature: 0.7,
      top_p: 0.9,
      stream: true,
      max_output_tokens: 500,
      include: ['reasoning.encrypted_content'],
      background: true,
    },
    OPTS,
  );
  assert.deepEqual(out, {
    model: 'm',
    input: 'hi',
    temperature: 0,
    top_p: 1,
    stream: false,
    store: false,
    top_logprobs: 5,
    include: ['reasoning.encrypted_content', 'message.output_text.logprobs'],
    max_output_tokens: 64,
  });
  // Asked already: not added twice.
  const again = rewriteForMirror('responses', { input: 'x', include: ['message.output_text.logprobs'] }, OPTS);
  assert.deepEqual(again.include, ['message.output_text.logprobs']);
});

test('a Responses request that continues stored state is skipped with the reason', () => {
  assert.match(stateSkip('responses', { input: 'x', previous_response_id: 'resp_1' })!, /previous_response_id/);
  assert.match(stateSkip('responses', { input: 'x', conversation: 'conv_1' })!, /conversation/);
  assert.equal(stateSkip('responses', { input: 'x' }), null);
  assert.equal(stateSkip('chat', { previous_response_id: 'x' }), null);
});

test('a /generate copy: greedy sampling_params with max_new_tokens capped, return_logprob with top_logprobs_num, not streamed', () => {
  const out = rewriteForMirror(
    'generate',
    { text: 'Once', sampling_params: { temperature: 0.8, max_new_tokens: 300, stop: ['\n'] }, stream: true },
    OPTS,
  );
  assert.deepEqual(out, {
    text: 'Once',
    sampling_params: {
      temperature: 0,
      max_new_tokens: 64,
      stop: ['\n'],
      top_p: 1,
      top_k: -1,
      min_p: 0,
      n: 1,
      presence_penalty: 0,
      frequency_penalty: 0,
      repetition_penalty: 1,
    },
    stream: false,
    return_logprob: true,
    top_logprobs_num: 5,
    return_text_in_logprobs: true,
  });
});

test('what scoring sees: a Responses request as chat messages, a /generate request as a completions prompt', () => {
  const body = {
    model: 'm',
    instructions: 'Be brief.',
    input: [
      { role: 'user', content: [{ type: 'input_text', text: 'Hello' }] },
      { type: 'message', role: 'assistant', content: 'Hi' },
      { type: 'function_call_output', call_id: 'c', output: '{}' },
      { role: 'developer', content: 'Answer in French.' },
    ],
  };
  assert.deepEqual(responsesMessages(body), [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hello' },
    { role: 'assistant', content: 'Hi' },
    { role: 'system', content: 'Answer in French.' },
  ]);
  assert.deepEqual(scoringSource('responses', body), {
    kind: 'chat',
    body: { model: 'm', messages: responsesMessages(body) },
  });
  assert.deepEqual(scoringSource('generate', { input_ids: [1, 2, 3] }), {
    kind: 'completions',
    body: { prompt: [1, 2, 3] },
  });
  assert.deepEqual(scoringSource('generate', { text: 'Once' }), { kind: 'completions', body: { prompt: 'Once' } });
  const chat = responsesAsChat({ model: 'm', input: 'Hello', max_output_tokens: 10 }, OPTS);
  assert.equal(chat.max_tokens, 10);
  assert.equal(chat.logprobs, true);
  assert.equal(chat.top_logprobs, 5);
  assert.deepEqual(chat.messages, [{ role: 'user', content: 'Hello' }]);
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { requestKind, rewriteForMirror } from '../src/backend/rewrite.js';
import { Sampler, hashFraction } from '../src/mirror/sampler.js';

const OPTS = { topLogprobs: 5, maxTokens: 64, seed: 1234, extraParams: {} };

test('requestKind tells chat from completions and rejects other routes', () => {
  assert.equal(requestKind('/v1/chat/completions'), 'chat');
  assert.equal(requestKind('/v1/completions'), 'completions');
  assert.equal(requestKind('/openai/v1/chat/completions'), 'chat');
  assert.equal(requestKind('/v1/embeddings'), null);
});

test('a sampled streaming chat request becomes greedy, non-streaming, with top logprobs, field by field', () => {
  const client = {
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    temperature: 0.9,
    top_p: 0.8,
    n: 3,
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: 500,
    presence_penalty: 0.5,
    frequency_penalty: 0.7,
    repetition_penalty: 1.3,
    logit_bias: { '42': 5 },
    seed: 7,
    user: 'u-1',
  };
  const frozen = structuredClone(client);
  const out = rewriteForMirror('chat', client, OPTS);
  assert.deepEqual(client, frozen, 'the client object is not modified');
  assert.equal(out.temperature, 0);
  assert.equal(out.top_p, 1);
  assert.equal(out.n, 1);
  assert.equal(out.stream, false);
  assert.ok(!('stream_options' in out));
  assert.equal(out.max_tokens, 64);
  assert.equal(out.logprobs, true);
  assert.equal(out.top_logprobs, 5);
  assert.equal(out.presence_penalty, 0);
  assert.equal(out.frequency_penalty, 0);
  assert.equal(out.repetition_penalty, 1);
  assert.ok(!('logit_bias' in out));
  assert.equal(out.seed, 1234);
  assert.equal(out.model, 'm');
  assert.equal(out.user, 'u-1');
  assert.deepEqual(out.messages, client.messages);
});

test('completions get logprobs: K; a smaller client max_tokens is kept; echo and best_of are removed', () => {
  const out = rewriteForMirror(
    'completions',
    { prompt: 'x', max_tokens: 10, logprobs: 2, echo: true, best_of: 4 },
    OPTS,
  );
  assert.equal(out.logprobs, 5);
  assert.equal(out.max_tokens, 10);
  assert.ok(!('echo' in out));
  assert.ok(!('best_of' in out));
  assert.ok(!('top_logprobs' in out));
  const noMax = rewriteForMirror('completions', { prompt: 'x' }, OPTS);
  assert.equal(noMax.max_tokens, 64);
});

test('chat max_completion_tokens is capped instead of adding max_tokens', () => {
  const out = rewriteForMirror('chat', { messages: [], max_completion_tokens: 1000 }, OPTS);
  assert.equal(out.max_completion_tokens, 64);
  assert.ok(!('max_tokens' in out));
});

test('extraParams are merged last and win', () => {
  const out = rewriteForMirror(
    'completions',
    { prompt: 'x', top_k: 40 },
    { ...OPTS, extraParams: { top_k: 1, temperature: 0.0, custom: 'y' } },
  );
  assert.equal(out.top_k, 1);
  assert.equal(out.custom, 'y');
});

test('topLogprobs below 1 is raised to 1 (logprobs must be on)', () => {
  assert.equal(rewriteForMirror('chat', { messages: [] }, { ...OPTS, topLogprobs: 0 }).top_logprobs, 1);
});

test('sampling: routes, methods, the header, the rate and the body hash', () => {
  let r = 0.5;
  const s = new Sampler({ sampleRate: 0.3, sampleBy: 'random', routes: ['/v1/completions'], random: () => r });
  assert.equal(s.wantsBody('POST', '/v1/completions', undefined), false, '0.5 ≥ 0.3');
  r = 0.1;
  assert.equal(s.wantsBody('POST', '/v1/completions', undefined), true);
  assert.equal(s.wantsBody('GET', '/v1/completions', true), false, 'only POST');
  assert.equal(s.wantsBody('POST', '/v1/embeddings', true), false, 'only configured routes');
  assert.equal(s.wantsBody('POST', '/v1/completions', false), false, 'header 0 wins over the rate');
  r = 0.99;
  assert.equal(s.wantsBody('POST', '/v1/completions', true), true, 'header 1 wins over the rate');

  const h = new Sampler({ sampleRate: 0.5, sampleBy: 'hash', routes: ['/v1/completions'] });
  const bodies = Array.from({ length: 400 }, (_, i) => Buffer.from(`{"prompt":"p${i}"}`));
  const first = bodies.map((b) => h.decide(b, undefined));
  const second = bodies.map((b) => h.decide(Buffer.from(b), undefined));
  assert.deepEqual(first, second, 'the same body gets the same decision');
  const share = first.filter(Boolean).length / bodies.length;
  assert.ok(share > 0.4 && share < 0.6, `about half mirrored (${share})`);
  assert.equal(h.decide(bodies[0]!, true), true);
  assert.ok(hashFraction(Buffer.from('a')) >= 0 && hashFraction(Buffer.from('a')) < 1);
});

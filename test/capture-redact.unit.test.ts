import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { buildRecord, recordLine } from '../src/capture/record.js';
import { secretValues } from '../src/log/redact.js';
import { compare, DEFAULT_THRESHOLDS } from '../src/core/index.js';
import { makePair } from './helpers/capture.js';

const THRESHOLDS = { gapAmbiguous: 0.3, gapSystematic: 0.4, globalFraction: 0.8, minAligned: 3 };
const SECRET = 'sk-live-Zq81TopSecretValue';
const COOKIE = 'sess-7f3a9c2b1d0e';
const API_KEY = 'sk-baseline-0123456789';

test('no credential survives: headers dropped, credential fields redacted anywhere, secret values scrubbed from every string', () => {
  const pair = makePair(1, {
    headers: {
      authorization: `Bearer ${SECRET}`,
      cookie: `session=${COOKIE}; theme=dark`,
      'x-api-key': SECRET,
      'proxy-authorization': `Basic ${SECRET}`,
    },
    request: {
      model: 'm',
      messages: [{ role: 'user', content: `my key is ${SECRET}, my session ${COOKIE}` }],
      api_key: 'in-body-key-123456',
      metadata: { Authorization: 'x' },
    },
  });
  // A backend that echoes secrets back must not leak them into the capture either.
  pair.candidate.error = `ECONNRESET: reset while sending Bearer ${API_KEY}`;
  pair.baseline!.serverHeaders = { server: 'x', 'x-engine-version': `1 ${API_KEY}` };
  const record = buildRecord(pair, { includePrompts: true, thresholds: THRESHOLDS, secrets: [API_KEY] });
  const text = JSON.stringify(record);
  for (const s of [SECRET, COOKIE, API_KEY, 'in-body-key-123456'])
    assert.ok(!text.includes(s), `${s} is not in the record`);
  assert.deepEqual(
    record.clientHeaders,
    { 'user-agent': 'test/1', 'content-type': 'application/json' },
    'only harmless client headers',
  );
  assert.equal(record.request.api_key, '[redacted]');
  assert.deepEqual(record.request.metadata, { Authorization: '[redacted]' });
  assert.equal(
    (record.request.messages as Array<{ content: string }>)[0]!.content,
    'my key is [redacted], my session [redacted]',
  );
  assert.equal(record.candidate.error, 'ECONNRESET: reset while sending Bearer [redacted]');
  assert.equal(record.baseline!.serverHeaders?.['x-engine-version'], '1 [redacted]');
  // The writer's fast path (search the serialised line, scrub only on a hit) gives the same line.
  const options = { includePrompts: true, thresholds: THRESHOLDS, secrets: [API_KEY] };
  assert.equal(recordLine(pair, options), text);
  const clean = makePair(2, { headers: { authorization: `Bearer ${SECRET}` } });
  assert.equal(recordLine(clean, options), JSON.stringify(buildRecord(clean, options)));
  const quoted = makePair(3, {
    headers: { authorization: 'Bearer a"b\\c<d>e-long' },
    request: { model: 'm', messages: [{ role: 'user', content: 'x a"b\\c<d>e-long y' }] },
  });
  assert.ok(!recordLine(quoted, options).includes('<d>e-long'), 'a secret that JSON escapes is found too');
});

test('redaction never changes what analyze re-runs: a token spelled like a credential field, or a short cookie value, keeps its logprob', () => {
  const body = (lp: number) => ({
    object: 'text_completion',
    model: 'm',
    choices: [
      {
        index: 0,
        text: 'cookie dark',
        logprobs: {
          tokens: ['cookie', ' dark'],
          token_logprobs: [lp, -0.2],
          top_logprobs: [
            { cookie: lp, authorization: -3 },
            { ' dark': -0.2, ' light': -2 },
          ],
          text_offset: [0, 6],
        },
        finish_reason: 'length',
      },
    ],
  });
  const pair = makePair(2, { headers: { cookie: 'theme=dark' } });
  pair.route = '/v1/completions';
  pair.candidate.body = body(-0.5);
  pair.baseline!.body = body(-0.1);
  pair.analysis = compare(pair.candidate.body, pair.baseline!.body, DEFAULT_THRESHOLDS);
  const record = buildRecord(pair, { includePrompts: true, thresholds: THRESHOLDS });
  assert.deepEqual(record.candidate.body, pair.candidate.body, 'the response body is unchanged');
  assert.equal(
    compare(record.candidate.body, record.baseline!.body, DEFAULT_THRESHOLDS).verdict,
    pair.analysis.verdict,
  );
});

test('includePrompts: false replaces prompts and messages by their SHA-256 and marks the record; the completion stays', () => {
  const sha = (s: string) => `sha256:${createHash('sha256').update(s, 'utf8').digest('hex')}`;
  const chat = makePair(3);
  const r1 = buildRecord(chat, { includePrompts: false, thresholds: THRESHOLDS });
  assert.equal(r1.request.messages, sha(JSON.stringify(chat.request.messages)));
  assert.equal(r1.promptsHashed, true);
  assert.ok(!JSON.stringify(r1).includes('question 3'));
  assert.deepEqual(r1.candidate.body, chat.candidate.body, 'generated tokens are kept: analyze needs them');

  const completion = makePair(4, { request: { model: 'm', prompt: 'The secret plan is', max_tokens: 5 } });
  completion.candidate.body = {
    ...(completion.candidate.body as object),
    prompt_logprobs: [null, { 791: { logprob: -1 } }],
  };
  const r2 = buildRecord(completion, { includePrompts: false, thresholds: THRESHOLDS });
  assert.equal(r2.request.prompt, sha('The secret plan is'), 'printf %s "$prompt" | sha256sum gives the same');
  assert.match(
    String((r2.candidate.body as Record<string, unknown>).prompt_logprobs),
    /^sha256:[0-9a-f]{64}$/,
    'echoed prompt hashed',
  );
  assert.equal(buildRecord(completion, { includePrompts: true, thresholds: THRESHOLDS }).promptsHashed, undefined);
});

test('secret values: full header values, bearer tokens, cookie values; short ones are not searched for', () => {
  const s = secretValues(
    {
      authorization: 'Bearer abcdefgh12345',
      cookie: 'a=1; session=zzzzyyyyxxxx',
      'user-agent': 'curl/8.0.0-long-enough',
    },
    ['baseline-key-1', null, 'short'],
  );
  assert.ok(s.includes('abcdefgh12345'));
  assert.ok(s.includes('Bearer abcdefgh12345'));
  assert.ok(s.includes('zzzzyyyyxxxx'));
  assert.ok(s.includes('baseline-key-1'));
  assert.ok(!s.includes('1') && !s.includes('short'), 'short values would blank out ordinary words');
  assert.ok(!s.some((v) => v.includes('curl')), 'only credential headers');
  assert.deepEqual(
    [...s].sort((a, b) => b.length - a.length),
    s,
    'longest first',
  );
});

/**
 * Server-level faults, each as a proxy would meet it upstream: a 500 envelope, a 200 that is not
 * JSON, a reset connection, a slow answer, a stalled stream, answers without logprobs — and the
 * side routes staying healthy meanwhile.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { test } from 'node:test';
import { parseServerFaults } from '../src/faults.js';
import { post, postStream, startSim } from './helpers/engine-sim.js';

const COMPLETION = { prompt: 'fault', max_tokens: 4, temperature: 0, logprobs: 2 };
const CHAT = {
  messages: [{ role: 'user', content: 'fault' }],
  max_tokens: 4,
  temperature: 0,
  logprobs: true,
  top_logprobs: 2,
};

test('http500: every generation request is a 500 envelope; /health stays 200', async (t) => {
  const engine = await startSim(t, {}, { faults: 'http500' });
  for (const [path, body] of [
    ['/v1/completions', COMPLETION],
    ['/v1/chat/completions', { ...CHAT, stream: true }],
  ] as const) {
    const res = await post(engine.url, path, body);
    assert.equal(res.status, 500);
    assert.equal(res.json.error.type, 'server_error');
    assert.deepEqual(Object.keys(res.json.error), ['message', 'type', 'param', 'code']);
  }
  assert.equal((await fetch(`${engine.url}/health`)).status, 200);
});

test('garbage: 200 with a body that is not JSON (and a stream whose data is not JSON)', async (t) => {
  const engine = await startSim(t, {}, { faults: 'garbage' });
  const res = await post(engine.url, '/v1/completions', COMPLETION);
  assert.equal(res.status, 200);
  assert.match(res.contentType ?? '', /application\/json/);
  assert.throws(() => JSON.parse(res.text));
  const stream = await post(engine.url, '/v1/chat/completions', { ...CHAT, stream: true });
  assert.equal(stream.status, 200);
  assert.match(stream.contentType ?? '', /text\/event-stream/);
  const data = stream.text.split('\n\n')[0]?.replace(/^data: /, '') ?? '';
  assert.throws(() => JSON.parse(data));
});

test('reset: the connection is destroyed without a response, and not counted as a client abort', async (t) => {
  const engine = await startSim(t, {}, { faults: 'reset' });
  const err = await new Promise<NodeJS.ErrnoException>((resolve, reject) => {
    const req = request(
      `${engine.url}/v1/completions`,
      { method: 'POST', headers: { 'content-type': 'application/json' } },
      () => reject(new Error('got a response')),
    );
    req.on('error', resolve);
    req.end(JSON.stringify(COMPLETION));
  });
  assert.equal(err.code, 'ECONNRESET');
  assert.equal(engine.requests.length, 1, 'the request was still recorded');
  assert.equal(engine.aborted, 0);
});

test('slow:MS delays the answer (before the status line); combined with nologprobs', async (t) => {
  const engine = await startSim(t, { seed: 1 }, { faults: ['slow:250', 'nologprobs'] });
  const t0 = Date.now();
  const res = await fetch(`${engine.url}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({ ...COMPLETION, stream: true }),
  });
  const headersAfter = Date.now() - t0;
  const text = await res.text();
  assert.ok(headersAfter >= 240, `headers after ${headersAfter} ms`);
  assert.match(text, /"logprobs":null/);
  assert.doesNotMatch(text, /token_logprobs/);
  const fast = await startSim(t, { seed: 1 });
  const t1 = Date.now();
  await post(fast.url, '/v1/completions', COMPLETION);
  assert.ok(Date.now() - t1 < 200);
});

test('stall:MS pauses a stream once after its first token chunk', async (t) => {
  const engine = await startSim(t, { seed: 1 }, { faults: 'stall:300' });
  const arrivals: number[] = [];
  const t0 = Date.now();
  await new Promise<void>((resolve, reject) => {
    const req = request(`${engine.url}/v1/chat/completions`, { method: 'POST' }, (res) => {
      res.on('data', () => arrivals.push(Date.now() - t0));
      res.on('end', resolve);
    });
    req.on('error', reject);
    req.end(JSON.stringify({ ...CHAT, stream: true, max_tokens: 6 }));
  });
  assert.ok((arrivals[0] ?? Infinity) < 200, `first bytes after ${arrivals[0]} ms`);
  assert.ok((arrivals.at(-1) ?? 0) >= 290, `last bytes after ${arrivals.at(-1)} ms`);
});

test('nologprobs: normal answers with logprobs null everywhere', async (t) => {
  const clean = await startSim(t, { seed: 1 });
  const engine = await startSim(t, { seed: 1 }, { faults: 'nologprobs' });
  const comp = await post(engine.url, '/v1/completions', COMPLETION);
  assert.equal(comp.json.choices[0].logprobs, null);
  assert.equal(comp.json.choices[0].text, (await post(clean.url, '/v1/completions', COMPLETION)).json.choices[0].text);
  const chat = await post(engine.url, '/v1/chat/completions', CHAT);
  assert.equal(chat.json.choices[0].logprobs, null);
  assert.ok(chat.json.choices[0].message.content.length > 0);
  for (const path of ['/v1/completions', '/v1/chat/completions']) {
    const s = await postStream(engine.url, path, path === '/v1/completions' ? COMPLETION : CHAT);
    assert.ok(s.chunks.length > 3);
    assert.ok(
      s.chunks.every((c) => c.choices[0].logprobs === null),
      path,
    );
  }
});

test('faults can be changed at run time, and bad fault strings are rejected with a reason', async (t) => {
  const engine = await startSim(t);
  assert.equal((await post(engine.url, '/v1/completions', COMPLETION)).status, 200);
  engine.setFaults('http500');
  assert.equal((await post(engine.url, '/v1/completions', COMPLETION)).status, 500);
  engine.setFaults([]);
  assert.equal((await post(engine.url, '/v1/completions', COMPLETION)).status, 200);
  assert.throws(() => parseServerFaults('slow'), /slow:MS/);
  assert.throws(() => parseServerFaults('slow:fast'), /milliseconds/);
  assert.throws(() => parseServerFaults('http500:1'), /takes no argument/);
  assert.throws(() => parseServerFaults('teapot'), /unknown fault "teapot"/);
  assert.deepEqual(parseServerFaults('http500,slow:5'), {
    http500: true,
    garbage: false,
    reset: false,
    slowMs: 5,
    stallMs: 0,
    nologprobs: false,
  });
});

/**
 * The engine server itself: OpenAI error envelopes, the side routes, request recording (in
 * memory and as JSON lines), one-at-a-time admission in arrival order, and a client disconnect
 * that stops generation.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { post, startSim } from './helpers/engine-sim.js';

test('bad requests are 400s in the OpenAI envelope naming the field', async (t) => {
  const engine = await startSim(t);
  const cases: Array<[string, unknown, string | null]> = [
    ['/v1/completions', '{"prompt": "x", ', null],
    ['/v1/completions', '[1, 2]', null],
    ['/v1/completions', { prompt: 'x', n: 2 }, 'n'],
    ['/v1/completions', { prompt: 'x', max_tokens: 'ten' }, 'max_tokens'],
    ['/v1/completions', { prompt: 'x', logprobs: 21 }, 'logprobs'],
    ['/v1/completions', { prompt: 'x', logprobs: true }, 'logprobs'],
    ['/v1/completions', { prompt: 'x', temperature: -1 }, 'temperature'],
    ['/v1/completions', { prompt: 'x', stop: 3 }, 'stop'],
    ['/v1/completions', { prompt: 42 }, 'prompt'],
    ['/v1/completions', { prompt: [1, 99999] }, 'prompt'],
    ['/v1/completions', { prompt: 'x', stream_options: { include_usage: true } }, 'stream_options'],
    ['/v1/chat/completions', { messages: [] }, 'messages'],
    ['/v1/chat/completions', { messages: [{ content: 'no role' }] }, 'messages[0]'],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], top_logprobs: 3 }, 'top_logprobs'],
    [
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'x' }], logprobs: true, top_logprobs: 21 },
      'top_logprobs',
    ],
    [
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] },
      'messages[0].content',
    ],
  ];
  for (const [path, body, param] of cases) {
    const res = await post(engine.url, path, body);
    assert.equal(res.status, 400, `${JSON.stringify(body)} → ${res.text}`);
    assert.deepEqual(Object.keys(res.json.error), ['message', 'type', 'param', 'code']);
    assert.equal(res.json.error.type, 'invalid_request_error');
    assert.equal(res.json.error.param, param, JSON.stringify(body));
    assert.ok(res.json.error.message.length > 5);
  }
});

test('unknown paths are 404s, wrong methods 405s, in the envelope; /health and /v1/models answer', async (t) => {
  const engine = await startSim(t, { id: 'my-sim' });
  const notFound = await post(engine.url, '/v1/embeddings', { input: 'x' });
  assert.equal(notFound.status, 404);
  assert.equal(notFound.json.error.type, 'invalid_request_error');
  const get = await fetch(`${engine.url}/v1/completions`);
  assert.equal(get.status, 405);
  assert.ok(((await get.json()) as { error: { message: string } }).error.message);
  const health = await fetch(`${engine.url}/health`);
  assert.equal(health.status, 200);
  assert.deepEqual(await health.json(), { status: 'ok' });
  const models = (await (await fetch(`${engine.url}/v1/models`)).json()) as {
    object: string;
    data: Array<{ id: string }>;
  };
  assert.equal(models.object, 'list');
  assert.equal(models.data[0]?.id, 'my-sim');
  const done = await post(engine.url, '/v1/completions', { prompt: 'x', max_tokens: 1 });
  assert.equal(done.json.model, 'my-sim');
});

test('every request is recorded in memory and, with requestLog, as one JSON line', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'logprobe-engine-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'requests.jsonl');
  const engine = await startSim(t, {}, { requestLog: file, recordLimit: 3 });
  const raw = '{"prompt":"recorded", "max_tokens":2}';
  await fetch(`${engine.url}/v1/completions?x=1`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-test' },
    body: raw,
  });
  await fetch(`${engine.url}/health`);
  assert.equal(engine.requests.length, 2);
  const first = engine.requests[0];
  assert.equal(first?.method, 'POST');
  assert.equal(first?.path, '/v1/completions');
  assert.equal(first?.body, raw, 'the raw bytes, not a re-serialisation');
  assert.equal(first?.headers.authorization, 'Bearer sk-test');
  assert.ok(Math.abs((first?.receivedAt ?? 0) - Date.now()) < 10_000);
  for (let i = 0; i < 5; i++) await fetch(`${engine.url}/health`);
  assert.ok(engine.requests.length <= 4, 'bounded');
  assert.equal(engine.requests.at(-1)?.path, '/health');
  await engine.close();
  const lines = (await readFile(file, 'utf8'))
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.equal(lines.length, 7);
  assert.deepEqual(Object.keys(lines[0]), ['method', 'path', 'headers', 'body', 'receivedAt']);
  assert.equal(lines[0].body, raw);
  assert.equal(lines[0].headers.authorization, 'Bearer sk-test');
});

test('with concurrency 1, requests are served one at a time in arrival order', async (t) => {
  const engine = await startSim(t, { seed: 1 }, { concurrency: 1, faults: 'slow:60' });
  const finished: number[] = [];
  const t0 = Date.now();
  await Promise.all(
    [0, 1, 2].map(async (i) => {
      await new Promise((r) => setTimeout(r, i * 10));
      await post(engine.url, '/v1/completions', { prompt: `request ${i}`, max_tokens: 2 });
      finished.push(i);
    }),
  );
  assert.deepEqual(finished, [0, 1, 2]);
  assert.ok(Date.now() - t0 >= 170, `three 60 ms requests took ${Date.now() - t0} ms: not one at a time`);
  const parallel = await startSim(t, { seed: 1 }, { concurrency: 0, faults: 'slow:60' });
  const t1 = Date.now();
  await Promise.all(
    [0, 1, 2].map((i) => post(parallel.url, '/v1/completions', { prompt: `request ${i}`, max_tokens: 2 })),
  );
  assert.ok(Date.now() - t1 < 170, 'unlimited concurrency still queued');
});

test('a client disconnect mid-stream stops generation and is counted', async (t) => {
  const engine = await startSim(t, { seed: 1 }, { maxContext: 10_000_000 });
  const aborted = new Promise<{ path: string }>((resolve) => engine.events.once('aborted', resolve));
  const chunks = await new Promise<number>((resolve, reject) => {
    const body = JSON.stringify({ prompt: 'forever', max_tokens: 5_000_000, stream: true, temperature: 0 });
    const req = request(
      `${engine.url}/v1/completions`,
      { method: 'POST', headers: { 'content-type': 'application/json' } },
      (res) => {
        let n = 0;
        res.on('data', () => {
          if (++n === 3) {
            req.destroy();
            resolve(n);
          }
        });
      },
    );
    req.on('error', () => {});
    req.end(body);
    setTimeout(() => reject(new Error('no data')), 5000);
  });
  assert.equal(chunks, 3);
  assert.deepEqual(await aborted, { method: 'POST', path: '/v1/completions' });
  assert.equal(engine.aborted, 1);
  // Generation really stopped: the engine is idle and answers the next request at once.
  const t0 = Date.now();
  const next = await post(engine.url, '/v1/completions', { prompt: 'next', max_tokens: 2 });
  assert.equal(next.status, 200);
  assert.ok(Date.now() - t0 < 1000);
  assert.equal(engine.completed, 1);
});

test('a non-streamed request abandoned while queued never runs', async (t) => {
  const engine = await startSim(t, { seed: 1 }, { concurrency: 1, faults: 'slow:300' });
  const first = post(engine.url, '/v1/completions', { prompt: 'first', max_tokens: 1 });
  await new Promise((r) => setTimeout(r, 50));
  const controller = new AbortController();
  const second = fetch(`${engine.url}/v1/completions`, {
    method: 'POST',
    body: '{"prompt":"second","max_tokens":1}',
    signal: controller.signal,
  }).catch((e: Error) => e.name);
  await new Promise((r) => setTimeout(r, 50));
  controller.abort();
  assert.equal(await second, 'AbortError');
  assert.equal((await first).status, 200);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(engine.aborted, 1);
  assert.equal(engine.completed, 1);
});

test('tokenDelayMs paces generation token by token', async (t) => {
  const engine = await startSim(t, { seed: 1 }, { tokenDelayMs: 30 });
  const arrivals: number[] = [];
  const t0 = Date.now();
  await new Promise<void>((resolve, reject) => {
    const req = request(`${engine.url}/v1/chat/completions`, { method: 'POST' }, (res) => {
      res.on('data', () => arrivals.push(Date.now() - t0));
      res.on('end', resolve);
    });
    req.on('error', reject);
    req.end(JSON.stringify({ messages: [{ role: 'user', content: 'pace' }], max_tokens: 6, stream: true }));
  });
  assert.ok((arrivals.at(-1) ?? 0) >= 140, `6 tokens at 30 ms took ${arrivals.at(-1)} ms`);
  assert.ok(arrivals.length >= 5, `${arrivals.length} separate arrivals: tokens were not flushed one by one`);
});

test('a body over the limit is a 413 envelope, and the server stays up', async (t) => {
  const engine = await startSim(t, {}, { bodyLimitBytes: 1000 });
  const res = await post(engine.url, '/v1/completions', { prompt: 'x'.repeat(5000) });
  assert.equal(res.status, 413);
  assert.match(res.json.error.message, /exceeds 1000 bytes/);
  assert.equal((await post(engine.url, '/v1/completions', { prompt: 'x', max_tokens: 1 })).status, 200);
});

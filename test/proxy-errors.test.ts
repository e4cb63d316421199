import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { startUpstream } from './helpers/upstream.js';
import { startLogprobe } from './helpers/logprobe.js';

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

function assertEnvelope(body: unknown, code: string): void {
  const b = body as { error?: { message?: unknown; type?: unknown; param?: unknown; code?: unknown } };
  assert.ok(b.error, 'OpenAI error envelope');
  assert.equal(typeof b.error.message, 'string');
  assert.equal(typeof b.error.type, 'string');
  assert.ok('param' in b.error);
  assert.equal(b.error.code, code);
}

test('an unreachable candidate gives 502 in the OpenAI error envelope', async (t) => {
  const port = await freePort();
  const lp = await startLogprobe({ candidate: { url: `http://127.0.0.1:${port}` } });
  t.after(() => lp.close());
  const res = await request(`${lp.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    body: '{}',
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(res.statusCode, 502);
  assert.match(String(res.headers['content-type']), /application\/json/);
  assertEnvelope(await res.body.json(), 'LOGPROBE_BAD_GATEWAY');
});

test('a candidate that does not answer in candidate.timeoutMs gives 504', async (t) => {
  const up = await startUpstream(async (_req, res) => {
    await new Promise((r) => setTimeout(r, 1500));
    res.end('late');
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url, timeoutMs: 200 } });
  t.after(() => lp.close());
  const started = Date.now();
  const res = await request(`${lp.proxyUrl}/v1/completions`, {
    method: 'POST',
    body: '{}',
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(res.statusCode, 504);
  assertEnvelope(await res.body.json(), 'LOGPROBE_GATEWAY_TIMEOUT');
  assert.ok(Date.now() - started < 1400, 'answered at the timeout, not when the upstream finally did');
});

test('a body over limits.bodyMB gives 413, with or without content-length, and never reaches the candidate', async (t) => {
  const up = await startUpstream((_req, res) => res.end('ok'));
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, limits: { bodyMB: 0.01 } });
  t.after(() => lp.close());
  const big = Buffer.alloc(20_000, 0x61);

  const withLength = await request(`${lp.proxyUrl}/v1/completions`, {
    method: 'POST',
    body: big,
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(withLength.statusCode, 413);
  assertEnvelope(await withLength.body.json(), 'LOGPROBE_PAYLOAD_TOO_LARGE');

  async function* chunks() {
    for (let i = 0; i < 20; i++) yield Buffer.alloc(1000, 0x62);
  }
  const chunked = await request(`${lp.proxyUrl}/v1/completions`, {
    method: 'POST',
    body: Readable.from(chunks()),
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(chunked.statusCode, 413);
  assertEnvelope(await chunked.body.json(), 'LOGPROBE_PAYLOAD_TOO_LARGE');

  const small = await request(`${lp.proxyUrl}/v1/completions`, {
    method: 'POST',
    body: Buffer.alloc(100, 0x63),
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(small.statusCode, 200);
  await small.body.dump();
  assert.equal(up.seen.length, 1, 'only the small body was forwarded');
});

test('upstream error statuses are passed through untouched, not rewritten', async (t) => {
  const up = await startUpstream((_req, res) => {
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"bad","type":"BadRequestError","param":"logprobs","code":400}}');
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url } });
  t.after(() => lp.close());
  const res = await request(`${lp.proxyUrl}/v1/completions`, {
    method: 'POST',
    body: '{}',
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(res.statusCode, 400);
  assert.equal(
    await res.body.text(),
    '{"error":{"message":"bad","type":"BadRequestError","param":"logprobs","code":400}}',
  );
});

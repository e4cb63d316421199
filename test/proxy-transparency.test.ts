import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { request } from 'undici';
import { startUpstream } from './helpers/upstream.js';
import { startLogprobe } from './helpers/logprobe.js';

/** Raw HTTP/1.1 exchange through node:http so that header names and bytes are not normalised by a client. */
function rawRequest(
  url: string,
  options: { method: string; path: string; headers: Record<string, string>; body?: Buffer | string[] },
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        method: options.method,
        path: options.path,
        headers: options.headers,
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (Array.isArray(options.body)) {
      for (const part of options.body) req.write(part);
      req.end();
    } else {
      req.end(options.body);
    }
  });
}

const ODD_JSON = Buffer.from(
  '{ "model":"m",  "prompt" : "Grüße — 🚀\\u00e9",\n"max_tokens":3 ,"temperature":0.7}  ',
  'utf8',
);

test('request bytes, method, path and query reach the candidate unchanged', async (t) => {
  const up = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{}');
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());

  const res = await rawRequest(lp.proxyUrl, {
    method: 'POST',
    path: '/v1/completions?api-version=2024-01&x=%20y',
    headers: { 'content-type': 'application/json', 'content-length': String(ODD_JSON.length) },
    body: ODD_JSON,
  });
  assert.equal(res.status, 200);
  assert.equal(up.seen.length, 1);
  const seen = up.seen[0]!;
  assert.equal(seen.method, 'POST');
  assert.equal(seen.url, '/v1/completions?api-version=2024-01&x=%20y');
  assert.deepEqual(seen.body, ODD_JSON);
});

test('a chunked request body is forwarded byte for byte', async (t) => {
  const up = await startUpstream((_req, res) => res.end('ok'));
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());
  const parts = ['{"prompt":', '"a', 'b"}'];
  await rawRequest(lp.proxyUrl, {
    method: 'POST',
    path: '/v1/completions',
    headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
    body: parts,
  });
  assert.equal(up.seen[0]!.body.toString('utf8'), parts.join(''));
});

test('response status, headers and body bytes are those of the candidate, hop-by-hop headers removed', async (t) => {
  const payload = Buffer.from('{"id":"x", "text": "ünïcode"}\n', 'utf8');
  const up = await startUpstream((_req, res) => {
    res.writeHead(418, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': String(payload.length),
      'x-request-id': 'upstream-1',
      'x-vllm-version': '0.9.0',
      'set-cookie': ['a=1', 'b=2'],
      'keep-alive': 'timeout=5',
      connection: 'keep-alive, x-upstream-hop',
      'x-upstream-hop': 'must go',
    });
    res.end(payload);
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());

  const direct = await rawRequest(up.url, { method: 'GET', path: '/v1/models', headers: {} });
  const proxied = await rawRequest(lp.proxyUrl, { method: 'GET', path: '/v1/models', headers: {} });
  assert.equal(proxied.status, 418);
  assert.deepEqual(proxied.body, direct.body);
  assert.equal(proxied.headers['content-type'], 'application/json; charset=utf-8');
  assert.equal(proxied.headers['content-length'], String(payload.length));
  assert.equal(proxied.headers['x-request-id'], 'upstream-1');
  assert.equal(proxied.headers['x-vllm-version'], '0.9.0');
  assert.deepEqual(proxied.headers['set-cookie'], ['a=1', 'b=2']);
  assert.equal(proxied.headers['x-upstream-hop'], undefined, 'a header named in Connection is hop-by-hop');
});

test('request headers are forwarded; hop-by-hop ones and x-logprobe-mirror are not', async (t) => {
  const up = await startUpstream((_req, res) => res.end('ok'));
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());
  await rawRequest(lp.proxyUrl, {
    method: 'POST',
    path: '/v1/chat/completions',
    headers: {
      'content-type': 'application/json',
      authorization: 'Bearer sk-client',
      'x-custom': 'kept',
      'openai-organization': 'org-1',
      connection: 'keep-alive, x-client-hop',
      'x-client-hop': 'dropped',
      'keep-alive': 'timeout=5',
      te: 'trailers',
      'proxy-authorization': 'Basic abc',
      'x-logprobe-mirror': '0',
      'content-length': '2',
    },
    body: Buffer.from('{}'),
  });
  const h = up.seen[0]!.headers;
  assert.equal(h['authorization'], 'Bearer sk-client');
  assert.equal(h['x-custom'], 'kept');
  assert.equal(h['openai-organization'], 'org-1');
  assert.equal(h['content-type'], 'application/json');
  assert.equal(h['content-length'], '2');
  for (const gone of ['x-client-hop', 'keep-alive', 'te', 'proxy-authorization', 'x-logprobe-mirror']) {
    assert.equal(h[gone], undefined, `${gone} must not be forwarded`);
  }
  assert.equal(h['host'], new URL(up.url).host);
});

test('SSE passes through event by event, with no buffering', async (t) => {
  // The upstream sends the next event only after the client has received the previous one;
  // a proxy that buffered would deadlock and time out.
  let release: (() => void) | null = null;
  const up = await startUpstream(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    for (let i = 0; i < 3; i++) {
      res.write(`data: {"i":${i}}\n\n`);
      await new Promise<void>((r) => (release = r));
    }
    res.end('data: [DONE]\n\n');
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());

  const res = await request(`${lp.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    body: '{"stream":true}',
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(res.headers['content-type'], 'text/event-stream');
  const received: string[] = [];
  for await (const chunk of res.body) {
    received.push(String(chunk));
    const r = release as (() => void) | null;
    release = null;
    r?.();
  }
  const text = received.join('');
  assert.equal(text, 'data: {"i":0}\n\ndata: {"i":1}\n\ndata: {"i":2}\n\ndata: [DONE]\n\n');
  assert.ok(received.length >= 3, `events arrived in ${received.length} chunks`);
});

test('an upstream base path is kept in front of the request path', async (t) => {
  const up = await startUpstream((_req, res) => res.end('ok'));
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: `${up.url}/prefix` }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());
  await rawRequest(lp.proxyUrl, { method: 'GET', path: '/v1/models?a=1', headers: {} });
  assert.equal(up.seen[0]!.url, '/prefix/v1/models?a=1');
});

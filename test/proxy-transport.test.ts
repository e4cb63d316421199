import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { Agent, request } from 'undici';
import { startLogprobe } from './helpers/logprobe.js';
import { listenLocal, startUpstream } from './helpers/upstream.js';
import { metricValue } from './helpers/sim.js';

// One transport (issue #13): node:http (llhttp) reads every client request, undici sends it on.
// These tests pin what that transport promises: request smuggling refused at the edge, one head
// limit and one head timeout everywhere, no hidden cap on upstream connections, and the
// configured limits answered with 503 at once.

/** Writes bytes on a raw socket and collects everything until the proxy closes it. */
function rawExchange(
  port: number,
  bytes: Buffer | string,
  timeoutMs = 5000,
): Promise<{ text: string; closed: boolean; ms: number }> {
  return paced(port, [bytes], 0, timeoutMs);
}

const SMUGGLED = 'GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n';
const bytes = (...parts: Array<string | number[]>): Buffer =>
  Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p, 'latin1') : Buffer.from(p))));

/**
 * Framing that llhttp refuses; a lax reader would forward a request hidden behind each. 400,
 * or 501 for a Transfer-Encoding other than exactly chunked (as nginx).
 */
const SMUGGLING: Array<[string, Buffer, number?]> = [
  [
    'Content-Length with Transfer-Encoding',
    bytes(
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`,
    ),
  ],
  [
    'Transfer-Encoding in an obs-fold',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`),
  ],
  [
    'Content-Length with a trailing U+00A0',
    bytes('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5', [0xa0], `\r\n\r\nhello${SMUGGLED}`),
  ],
  [
    'Transfer-Encoding chunked with a trailing U+00A0',
    bytes(
      'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked',
      [0xa0],
      `\r\n\r\n0\r\n\r\n${SMUGGLED}`,
    ),
    501,
  ],
  [
    'Content-Length with a vertical tab',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\x0b\r\n\r\nhello${SMUGGLED}`),
  ],
  [
    'Content-Length after a form feed',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length:\x0c5\r\n\r\nhello${SMUGGLED}`),
  ],
  [
    'Transfer-Encoding after a vertical tab',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \x0bchunked\r\n\r\n0\r\n\r\n${SMUGGLED}`),
  ],
  [
    'Transfer-Encoding with a bare CR',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\r\n\r\n0\r\n\r\n${SMUGGLED}`),
  ],
  [
    'Transfer-Encoding chunked, identity',
    bytes(
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\nContent-Length: 3\r\n\r\n0\r\n\r\n${SMUGGLED}`,
    ),
    501,
  ],
  [
    'two Content-Length values that differ',
    bytes(
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 38\r\n\r\nhello${SMUGGLED}`,
    ),
  ],
  [
    'a Content-Length list',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 38\r\n\r\nhello${SMUGGLED}`),
  ],
  [
    'whitespace before the colon',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nhello${SMUGGLED}`),
  ],
  [
    'a chunk size that overflows 64 bits',
    bytes(
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000005\r\nhello\r\n0\r\n\r\n${SMUGGLED}`,
    ),
  ],
  [
    'a bare LF ending the head lines',
    bytes(`POST /v1/completions HTTP/1.1\nHost: x\nContent-Length: 5\n\nhello${SMUGGLED}`),
  ],
  [
    'a bare LF after one field',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\nContent-Length: 5\r\n\r\nhello${SMUGGLED}`),
  ],
  [
    'a bare LF after a chunk size',
    bytes(
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n${SMUGGLED}`,
    ),
  ],
];

test('request smuggling is refused at the edge: 400 (501 for a Transfer-Encoding other than chunked) in the OpenAI envelope, the connection closed, nothing reaches the candidate', async (t) => {
  const up = await startUpstream((_req, res) => res.end('ok'));
  t.after(() => up.close());
  // Sampled for the mirror too: the mirror's copy of a body must not open another way in.
  const lp = await startLogprobe({ candidate: { url: up.url }, baseline: { url: up.url }, mirror: { sampleRate: 1 } });
  t.after(() => lp.close());
  const port = Number(new URL(lp.proxyUrl).port);
  for (const [name, attack, status = 400] of SMUGGLING) {
    const r = await rawExchange(port, attack);
    assert.ok(r.closed, `${name}: the connection is closed`);
    assert.match(r.text, new RegExp(`^HTTP/1\\.1 ${status} `), `${name}: ${JSON.stringify(r.text.slice(0, 40))}`);
    const body = JSON.parse(r.text.slice(r.text.indexOf('\r\n\r\n') + 4)) as {
      error: { message: string; code: string };
    };
    assert.equal(typeof body.error.message, 'string', `${name}: the OpenAI envelope`);
    assert.equal(r.text.split('HTTP/1.1 ').length - 1, 1, `${name}: one answer, not two`);
  }
  await lp.runtime.mirror!.idle();
  assert.deepEqual(up.seen, [], 'no request of any of them reached the candidate');
  const ok = await request(`${lp.proxyUrl}/v1/models`);
  assert.equal(await ok.body.text(), 'ok', 'the proxy keeps serving');
});

test('a head trickled in slower than limits.headTimeoutMs gets 408 in time, and the connection closes', async (t) => {
  const up = await startUpstream((_req, res) => res.end('ok'));
  t.after(() => up.close());
  const lp = await startLogprobe({
    candidate: { url: up.url },
    mirror: { sampleRate: 0 },
    limits: { headTimeoutMs: 1500 },
  });
  t.after(() => lp.close());
  const port = Number(new URL(lp.proxyUrl).port);
  const started = performance.now();
  const result = await new Promise<{ text: string; ms: number }>((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    const head = 'GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(100);
    let i = 0;
    // One byte every 200 ms: the connection never goes idle, the head never completes.
    const timer = setInterval(() => {
      if (sock.writable && i < head.length) sock.write(head[i++]!);
    }, 200);
    let text = '';
    sock.on('data', (d: Buffer) => (text += d.toString()));
    sock.on('error', () => undefined);
    sock.on('close', () => {
      clearInterval(timer);
      resolve({ text, ms: performance.now() - started });
    });
  });
  assert.match(result.text, /^HTTP\/1\.1 408 /);
  assert.match(result.text, /"error":\{"message":"request not received in time"/);
  assert.ok(result.ms >= 1400 && result.ms < 4000, `answered after ${Math.round(result.ms)} ms (limit 1500 ms)`);
  assert.deepEqual(up.seen, []);
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  assert.equal(metricValue(metrics, 'logprobe_proxy_refused_total', { reason: 'head_timeout' }), 1);
});

/** An upstream that records every request head it gets (before any body), and answers `ok` once the body is in. */
async function startHeadRecorder(t: {
  after(fn: () => unknown): void;
}): Promise<{ url: string; heads: string[]; bodies: number[] }> {
  const heads: string[] = [];
  const bodies: number[] = [];
  const server = http.createServer((req, res) => {
    heads.push(`${req.method} ${req.url}`);
    let n = 0;
    req.on('data', (c: Buffer) => (n += c.length));
    req.on('end', () => {
      bodies.push(n);
      res.end('ok');
    });
  });
  const { url } = await listenLocal(server);
  t.after(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
  return { url, heads, bodies };
}

/** Writes `parts` on a raw socket, one every `everyMs`, and collects the answer until the proxy closes the connection. */
function paced(
  port: number,
  parts: Array<Buffer | string>,
  everyMs: number,
  timeoutMs = 8000,
): Promise<{ text: string; closed: boolean; ms: number }> {
  const started = performance.now();
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let i = 0;
    const next = () => {
      if (i < parts.length && sock.writable) sock.write(parts[i++]!);
      if (i < parts.length) pacer = setTimeout(next, everyMs);
    };
    let pacer = setTimeout(() => undefined, 0);
    sock.on('connect', next);
    let text = '';
    const timer = setTimeout(() => {
      sock.destroy();
      resolve({ text, closed: false, ms: performance.now() - started });
    }, timeoutMs);
    sock.on('data', (d: Buffer) => (text += d.toString('latin1')));
    sock.on('error', () => undefined);
    sock.on('close', () => {
      clearTimeout(timer);
      clearTimeout(pacer);
      resolve({ text, closed: true, ms: performance.now() - started });
    });
  });
}

function envelopeOf(text: string): { error: { message: string; type: string; param: unknown; code: string | null } } {
  return JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)) as {
    error: { message: string; type: string; param: unknown; code: string | null };
  };
}

const BIG = 100_000;

test('limits.bodyTimeoutMs: a body stalled mid-way gets 408 in the OpenAI envelope and the connection closes, on every read path and in shadow mode; counted', async (t) => {
  const up = await startHeadRecorder(t);
  const TIMEOUT = 600;
  const lp = await startLogprobe({
    candidate: { url: up.url },
    baseline: { url: up.url },
    mirror: { sampleRate: 1 },
    limits: { bodyTimeoutMs: TIMEOUT },
  });
  t.after(() => lp.close());
  const shadow = await startLogprobe({
    mode: 'shadow',
    candidate: { url: up.url },
    baseline: { url: up.url },
    mirror: { sampleRate: 1 },
    limits: { bodyTimeoutMs: TIMEOUT },
  });
  t.after(() => shadow.close());
  const port = (u: string) => Number(new URL(u).port);
  const head = (path: string, framing: string) =>
    `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${framing}\r\n\r\n`;
  const cases: Array<[string, number, string]> = [
    // Mirrored route, sampled: the body is kept for the mirror (readBody).
    ['kept for the mirror', port(lp.proxyUrl), head('/v1/completions', 'Content-Length: 20') + '{"a":'],
    // Not a mirrored route, small: read ahead before the upstream request (readBody).
    ['read ahead', port(lp.proxyUrl), head('/v1/embeddings', 'Content-Length: 20') + '{"a":'],
    ['chunked', port(lp.proxyUrl), head('/v1/embeddings', 'Transfer-Encoding: chunked') + '5\r\n{"a":\r\n'],
    // Large, not kept: streamed to the candidate by undici.
    ['streamed', port(lp.proxyUrl), head('/v1/embeddings', `Content-Length: ${BIG}`) + ' '.repeat(70_000)],
    ['shadow, kept', port(shadow.proxyUrl), head('/v1/completions', 'Content-Length: 20') + '{"a":'],
    ['shadow, dropped', port(shadow.proxyUrl), head('/v1/embeddings', 'Content-Length: 20') + '{"a":'],
  ];
  const results = await Promise.all(cases.map(([, p, bytes]) => rawExchange(p, bytes, 8000)));
  for (const [i, [name]] of cases.entries()) {
    const r = results[i]!;
    assert.ok(r.closed, `${name}: the connection is closed`);
    assert.match(r.text, /^HTTP\/1\.1 408 /, `${name}: ${JSON.stringify(r.text.slice(0, 60))}`);
    assert.equal(r.text.split('HTTP/1.1 ').length - 1, 1, `${name}: one answer`);
    assert.match(r.text, /\r\nconnection: close\r\n/i, name);
    const body = envelopeOf(r.text);
    assert.equal(body.error.code, 'LOGPROBE_BODY_TIMEOUT', name);
    assert.match(body.error.message, /limits\.bodyTimeoutMs/, name);
    assert.equal(body.error.type, 'invalid_request_error', name);
    assert.ok(
      r.ms >= TIMEOUT - 50 && r.ms < TIMEOUT + 2500,
      `${name}: answered after ${Math.round(r.ms)} ms (limit ${TIMEOUT} ms)`,
    );
  }
  const inline = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  assert.equal(metricValue(inline, 'logprobe_proxy_refused_total', { reason: 'body_timeout' }), 4);
  const shadowed = await (await request(`${shadow.adminUrl}/metrics`)).body.text();
  assert.equal(metricValue(shadowed, 'logprobe_proxy_refused_total', { reason: 'body_timeout' }), 2);
  // Only the streamed body's head reached the candidate (its upload was cut), and no body did.
  assert.deepEqual(up.heads, ['POST /v1/embeddings'], 'the streamed request was under way, no other');
  assert.deepEqual(up.bodies, [], 'no body completed at the candidate');
  const ok = await request(`${lp.proxyUrl}/v1/models`);
  assert.equal(await ok.body.text(), 'ok', 'the proxy keeps serving');
});

test('limits.bodyTimeoutMs is an idle timer, not a deadline: a body trickled in slower than the limit in total but faster than it per byte is served', async (t) => {
  const up = await startHeadRecorder(t);
  const TIMEOUT = 500;
  const lp = await startLogprobe({
    candidate: { url: up.url },
    baseline: { url: up.url },
    mirror: { sampleRate: 1 },
    limits: { bodyTimeoutMs: TIMEOUT },
  });
  t.after(() => lp.close());
  const port = Number(new URL(lp.proxyUrl).port);
  const body = '{"model":"m","n":1}\n';
  assert.equal(body.length, 20);
  const trickle = (h: string, prefix = '') => [h + prefix, ...body.split('')];
  const head = (path: string, cl: number) =>
    `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${cl}\r\nConnection: close\r\n\r\n`;
  // 20 bytes, one per 150 ms: 3 s in all, six times the limit.
  const [kept, readAhead, streamed] = await Promise.all([
    paced(port, trickle(head('/v1/completions', 20)), 150),
    paced(port, trickle(head('/v1/embeddings', 20)), 150),
    paced(port, trickle(head('/v1/embeddings', BIG), ' '.repeat(BIG - 20)), 150),
  ]);
  for (const [name, r] of [
    ['kept for the mirror', kept],
    ['read ahead', readAhead],
    ['streamed', streamed],
  ] as const) {
    assert.match(r.text, /^HTTP\/1\.1 200 /, `${name}: ${JSON.stringify(r.text.slice(0, 80))}`);
    assert.ok(r.ms > 6 * TIMEOUT, `${name}: the upload took ${Math.round(r.ms)} ms`);
  }
  // The mirror's copies of the kept one reach the upstream too, rewritten (longer than 20 bytes).
  assert.equal(
    up.bodies.filter((n) => n === 20).length,
    2,
    `the small bodies reached the candidate whole: ${JSON.stringify(up.bodies)}`,
  );
  assert.equal(
    up.bodies.filter((n) => n === BIG).length,
    1,
    `the streamed body reached the candidate whole: ${JSON.stringify(up.bodies)}`,
  );
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  assert.equal(metricValue(metrics, 'logprobe_proxy_refused_total', { reason: 'body_timeout' }), 0);
});

test('limits.bodyTimeoutMs times the client only: a streamed body waiting for a candidate connection (candidate.maxConnections) longer than the limit is served', async (t) => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let bodyBytes = 0;
  const up = await startUpstream(async (req, res, body) => {
    if (req.url === '/v1/models') await gate;
    else bodyBytes = body.length;
    res.end('ok');
  });
  t.after(() => up.close());
  const TIMEOUT = 400;
  const lp = await startLogprobe({
    candidate: { url: up.url, maxConnections: 1, maxPending: 1 },
    mirror: { sampleRate: 0 },
    limits: { bodyTimeoutMs: TIMEOUT },
  });
  t.after(() => lp.close());
  const port = Number(new URL(lp.proxyUrl).port);
  // The one connection is held by a request the candidate answers only when released.
  const held = request(`${lp.proxyUrl}/v1/models`);
  await new Promise((r) => setTimeout(r, 200));
  // The whole body is sent at once; the proxy reads it only once a connection is free.
  const waiting = rawExchange(
    port,
    `POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: ${BIG}\r\nConnection: close\r\n\r\n${' '.repeat(BIG)}`,
    8000,
  );
  await new Promise((r) => setTimeout(r, 3 * TIMEOUT));
  release();
  const r = await waiting;
  assert.match(r.text, /^HTTP\/1\.1 200 /, JSON.stringify(r.text.slice(0, 80)));
  assert.equal(bodyBytes, BIG, 'the body reached the candidate whole');
  assert.equal((await held).statusCode, 200);
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  assert.equal(metricValue(metrics, 'logprobe_proxy_refused_total', { reason: 'body_timeout' }), 0);
});

test('limits.bodyTimeoutMs times the client only: a streamed body held back by a candidate that reads slower than the limit is served', async (t) => {
  const TIMEOUT = 400;
  const SIZE = 16 * 1024 * 1024;
  let received = 0;
  const server = http.createServer((req, res) => {
    // The candidate takes no byte for three times the limit: undici pauses the client's body.
    req.pause();
    setTimeout(() => {
      req.on('data', (c: Buffer) => (received += c.length));
      req.on('end', () => res.end('ok'));
      req.resume();
    }, 3 * TIMEOUT);
  });
  const { url } = await listenLocal(server);
  t.after(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
  const lp = await startLogprobe({ candidate: { url }, mirror: { sampleRate: 0 }, limits: { bodyTimeoutMs: TIMEOUT } });
  t.after(() => lp.close());
  const res = await request(`${lp.proxyUrl}/v1/embeddings`, {
    method: 'POST',
    body: Buffer.alloc(SIZE, 0x20),
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(res.statusCode, 200);
  assert.equal(await res.body.text(), 'ok');
  assert.equal(received, SIZE, 'the body reached the candidate whole');
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  assert.equal(metricValue(metrics, 'logprobe_proxy_refused_total', { reason: 'body_timeout' }), 0);
});

/**
 * Framing llhttp accepts, or hands over before refusing, that the edge still refuses as nginx
 * does; each with a second request hidden behind it.
 */
const REFUSED_FRAMING: Array<[string, Buffer, number, string]> = [
  [
    'Transfer-Encoding gzip, chunked (llhttp accepts it; undici would drop the gzip)',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`),
    501,
    'LOGPROBE_UNSUPPORTED_TRANSFER_ENCODING',
  ],
  [
    'Transfer-Encoding gzip and chunked on two lines',
    bytes(
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`,
    ),
    501,
    'LOGPROBE_UNSUPPORTED_TRANSFER_ENCODING',
  ],
  [
    'Transfer-Encoding gzip alone (the head is handed over, then llhttp refuses)',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n${SMUGGLED}`),
    501,
    'LOGPROBE_UNSUPPORTED_TRANSFER_ENCODING',
  ],
  [
    'Transfer-Encoding chunked with parameters',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked;q=1\r\n\r\n0\r\n\r\n${SMUGGLED}`),
    501,
    'LOGPROBE_UNSUPPORTED_TRANSFER_ENCODING',
  ],
  [
    'Transfer-Encoding chunked, chunked (llhttp refuses it in the head)',
    bytes(
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`,
    ),
    501,
    'HPE_INVALID_TRANSFER_ENCODING',
  ],
  [
    'Transfer-Encoding identity',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n${SMUGGLED}`),
    501,
    'LOGPROBE_UNSUPPORTED_TRANSFER_ENCODING',
  ],
  [
    'two Host fields',
    bytes(`GET /v1/models HTTP/1.1\r\nHost: x\r\nHost: evil.example\r\n\r\n${SMUGGLED}`),
    400,
    'LOGPROBE_BAD_REQUEST',
  ],
  [
    'two Host fields, the same value',
    bytes(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nhost: x\r\nContent-Length: 2\r\n\r\n{}${SMUGGLED}`),
    400,
    'LOGPROBE_BAD_REQUEST',
  ],
  [
    'CONNECT',
    bytes(`CONNECT candidate.internal:443 HTTP/1.1\r\nHost: candidate.internal:443\r\n\r\n${SMUGGLED}`),
    400,
    'LOGPROBE_BAD_REQUEST',
  ],
  // The client waits for 100 Continue before its body: it must get the 413 instead, and no 100.
  [
    'Expect: 100-continue with a Content-Length over limits.bodyMB',
    bytes(
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: ${2 * 1024 * 1024}\r\n\r\n`,
    ),
    413,
    'LOGPROBE_PAYLOAD_TOO_LARGE',
  ],
];

test('framing nginx refuses is refused at the edge: TE other than chunked 501, two Host 400, CONNECT 400, Expect over the limit 413 without 100; nothing reaches the candidate', async (t) => {
  const up = await startHeadRecorder(t);
  const lp = await startLogprobe({
    candidate: { url: up.url },
    baseline: { url: up.url },
    mirror: { sampleRate: 1 },
    limits: { bodyMB: 1 },
  });
  t.after(() => lp.close());
  const port = Number(new URL(lp.proxyUrl).port);
  for (const [name, attack, status, code] of REFUSED_FRAMING) {
    const r = await rawExchange(port, attack);
    assert.ok(r.closed, `${name}: the connection is closed`);
    assert.match(r.text, new RegExp(`^HTTP/1\\.1 ${status} `), `${name}: ${JSON.stringify(r.text.slice(0, 40))}`);
    assert.equal(r.text.split('HTTP/1.1 ').length - 1, 1, `${name}: one answer, not two (and no 100 Continue)`);
    const body = envelopeOf(r.text);
    assert.equal(typeof body.error.message, 'string', `${name}: the OpenAI envelope`);
    assert.equal(body.error.code, code, name);
    assert.ok('param' in body.error && 'type' in body.error, name);
  }
  await lp.runtime.mirror!.idle();
  assert.deepEqual(up.heads, [], 'no request of any of them reached the candidate');
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  for (const [reason, n] of [
    ['transfer_encoding', 6],
    ['duplicate_host', 2],
    ['connect', 1],
    ['body_too_large', 1],
  ] as const)
    assert.equal(metricValue(metrics, 'logprobe_proxy_refused_total', { reason }), n, reason);

  // Controls: exactly chunked (any case) and one Host are served; Expect within the limit gets its 100, then the answer.
  const chunkedOk = await rawExchange(
    port,
    `POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n`,
  );
  assert.match(chunkedOk.text, /^HTTP\/1\.1 200 /);
  const expected = await new Promise<string>((resolve) => {
    const sock = net.connect(port, '127.0.0.1', () =>
      sock.write(
        'POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\n',
      ),
    );
    let text = '';
    sock.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      if (text === 'HTTP/1.1 100 Continue\r\n\r\n') sock.write('{}');
    });
    sock.on('close', () => resolve(text));
  });
  assert.match(expected, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
  assert.deepEqual(up.heads, ['POST /v1/embeddings', 'POST /v1/embeddings']);
  const ok = await request(`${lp.proxyUrl}/v1/models`);
  assert.equal(await ok.body.text(), 'ok', 'the proxy keeps serving');
});

test('a client that aborts its upload is logged at debug without a stack and counted as aborted, on the read and the streamed path', async (t) => {
  const up = await startHeadRecorder(t);
  const lp = await startLogprobe(
    { candidate: { url: up.url }, baseline: { url: up.url }, mirror: { sampleRate: 1 } },
    { level: 'debug' },
  );
  t.after(() => lp.close());
  const port = Number(new URL(lp.proxyUrl).port);
  const abortAfter = (bytes: string) =>
    new Promise<void>((resolve) => {
      const sock = net.connect(port, '127.0.0.1', () => sock.write(bytes, () => setTimeout(() => sock.destroy(), 200)));
      sock.on('error', () => undefined);
      sock.on('close', () => resolve());
    });
  await abortAfter(
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":',
  );
  await abortAfter(
    `POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${BIG}\r\n\r\n${' '.repeat(70_000)}`,
  );
  const aborted = async () =>
    metricValue(await (await request(`${lp.adminUrl}/metrics`)).body.text(), 'logprobe_proxy_requests_total', {
      status_class: 'aborted',
    });
  const deadline = Date.now() + 3000;
  while ((await aborted()) !== 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  assert.equal(await aborted(), 2, 'both counted in logprobe_proxy_requests_total{status_class="aborted"}');
  const lines = lp.logs.lines;
  const bad = lines.filter((l) => (l.level as number) >= 40);
  assert.deepEqual(bad, [], 'nothing at warn or above');
  assert.ok(!lp.logs.text().includes('"stack"'), 'no stack trace in any line');
  const requests = lines.filter((l) => l.msg === 'request' && l.aborted === true);
  assert.equal(requests.length, 2, `the request lines say aborted: ${lp.logs.text()}`);
  const ok = await request(`${lp.proxyUrl}/v1/models`);
  assert.equal(await ok.body.text(), 'ok', 'the proxy keeps serving');
});

test('one head limit everywhere: limits.maxHeaderKB holds for sampled and unsampled requests and for the upstream response head', async (t) => {
  const up = await startUpstream(
    (req, res) => {
      if (req.url === '/big-answer') res.setHeader('x-big', 'b'.repeat(40 * 1024));
      res.end('ok');
    },
    { maxHeaderSize: 256 * 1024 },
  );
  t.after(() => up.close());
  const lp = await startLogprobe({
    candidate: { url: up.url },
    baseline: { url: up.url },
    mirror: { sampleRate: 1 },
    limits: { maxHeaderKB: 32 },
  });
  t.after(() => lp.close());
  const port = Number(new URL(lp.proxyUrl).port);
  for (const path of ['/v1/models', '/v1/completions']) {
    const method = path === '/v1/models' ? 'GET' : 'POST';
    const body = method === 'POST' ? '{"prompt":"x"}' : '';
    const head = (size: number) =>
      `${method} ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nX-Pad: ${'p'.repeat(size)}\r\nConnection: close\r\n\r\n${body}`;
    const small = await rawExchange(port, head(24 * 1024));
    assert.match(small.text, /^HTTP\/1\.1 200 /, `${path}: a 24 KB field under a 32 KB limit passes`);
    const big = await rawExchange(port, head(40 * 1024));
    assert.match(big.text, /^HTTP\/1\.1 431 /, `${path}: a 40 KB field over a 32 KB limit is refused`);
    assert.ok(big.closed);
  }
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  assert.equal(metricValue(metrics, 'logprobe_proxy_refused_total', { reason: 'header_too_large' }), 2);
  // The upstream's head is held to the same limit: over it, the client gets a 502, not a hang.
  const res = await request(`${lp.proxyUrl}/big-answer`);
  assert.equal(res.statusCode, 502);
  const err = (await res.body.json()) as { error: { type: string } };
  assert.equal(err.error.type, 'upstream_error');
});

test('no hidden cap: 700 concurrent streams each get their own upstream connection and their first byte before any finishes', async (t) => {
  const N = 700;
  let open = 0;
  let peak = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const up = await startUpstream(async (_req, res) => {
    open++;
    peak = Math.max(peak, open);
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: {"first":true}\n\n');
    await gate;
    res.end('data: [DONE]\n\n');
    open--;
  });
  const connections = new Set<unknown>();
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, mirror: { sampleRate: 0 }, log: { level: 'warn' } });
  t.after(() => lp.close());
  const client = new Agent({ connections: null, pipelining: 1 });
  t.after(() => client.close());
  let firstBytes = 0;
  const streams = Array.from({ length: N }, async () => {
    const res = await request(`${lp.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      body: '{"stream":true}',
      headers: { 'content-type': 'application/json' },
      dispatcher: client,
    });
    connections.add(res);
    let text = '';
    let counted = false;
    for await (const chunk of res.body) {
      text += (chunk as Buffer).toString();
      if (!counted) {
        counted = true;
        if (++firstBytes === N) release();
      }
    }
    return text;
  });
  // Every stream must see its first event while all the others are still open: with a cap of
  // C connections, stream C+1 would wait for the gate and the test would time out.
  const timer = setTimeout(release, 20_000);
  const texts = await Promise.all(streams);
  clearTimeout(timer);
  assert.equal(firstBytes, N, `${firstBytes} of ${N} streams got their first byte while all were open`);
  assert.equal(peak, N, `the upstream held ${peak} streams at once`);
  for (const text of texts) assert.ok(text.endsWith('data: [DONE]\n\n'));
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  assert.ok(
    metricValue(metrics, 'logprobe_upstream_connections', { backend: 'candidate' })! >= N,
    'the gauge counts the open upstream connections',
  );
  assert.equal(metricValue(metrics, 'logprobe_proxy_overflow_total', { reason: 'connections' }), 0);
});

test("a request read in the same turn as another stream's end takes that stream's upstream connection, not a new one", async (t) => {
  // Under load one poll phase reads a stream's end from the candidate and the next request from
  // another client. undici frees the connection only in that turn's check phase; dispatched at
  // once, the request would open a second connection (and N streams that end and restart would
  // hold ~2N). Built here deterministically: the end and the request are written in one
  // synchronous block, so the proxy (in this process) reads both in its next poll phase.
  let accepted = 0;
  const ends: Array<() => void> = [];
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"n":1}\n\n');
      ends.push(() => res.end('data: [DONE]\n\n'));
    });
  });
  server.on('connection', () => accepted++);
  const { url } = await listenLocal(server);
  t.after(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
  const lp = await startLogprobe({ candidate: { url }, mirror: { sampleRate: 0 }, log: { level: 'warn' } });
  t.after(() => lp.close());
  const port = Number(new URL(lp.proxyUrl).port);
  const body = '{"stream":true,"messages":[]}';
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
  const open = (): Promise<net.Socket> =>
    new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => resolve(s));
      s.on('error', () => undefined);
    });
  const until = async (what: () => boolean, label: string): Promise<void> => {
    const end = Date.now() + 5000;
    while (!what()) {
      if (Date.now() > end) assert.fail(`timed out waiting for ${label}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  const rounds = 5;
  for (let i = 0; i < rounds; i++) {
    const a = await open();
    const b = await open();
    t.after(() => (a.destroy(), b.destroy()));
    let aText = '';
    let bText = '';
    a.on('data', (d: Buffer) => (aText += d.toString('latin1')));
    b.on('data', (d: Buffer) => (bText += d.toString('latin1')));
    a.write(head);
    await until(() => ends.length === 1, 'the first stream at the upstream');
    // The candidate ends stream A and client B sends its request, in one synchronous block.
    ends.shift()!();
    b.write(head);
    await until(() => aText.includes('0\r\n\r\n'), 'stream A to end at its client');
    await until(() => ends.length === 1, 'stream B at the upstream');
    await until(() => bText.includes('data: {"n":1}'), "stream B's first event at its client");
    ends.shift()!();
    await until(() => bText.includes('0\r\n\r\n'), 'stream B to end at its client');
  }
  assert.equal(accepted, 1, `${rounds} pairs of streams over ${accepted} upstream connection(s): each B reused A's`);
});

test('candidate.maxConnections and maxPending: a request beyond them gets 503 at once in the OpenAI envelope, counted by reason', async (t) => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const up = await startUpstream(async (_req, res) => {
    await gate;
    res.end('ok');
  });
  t.after(() => up.close());
  const client = new Agent({ connections: null });
  t.after(() => client.close());
  const send = (url: string) => request(`${url}/v1/models`, { dispatcher: client });

  // maxConnections 2 with no waiting: the third is refused, reason connections.
  const strict = await startLogprobe({
    candidate: { url: up.url, maxConnections: 2, maxPending: 0 },
    mirror: { sampleRate: 0 },
  });
  t.after(() => strict.close());
  // maxConnections 2, 1 may wait: the fourth is refused, reason pending.
  const queued = await startLogprobe({
    candidate: { url: up.url, maxConnections: 2, maxPending: 1 },
    mirror: { sampleRate: 0 },
  });
  t.after(() => queued.close());

  const held = [
    send(strict.proxyUrl),
    send(strict.proxyUrl),
    send(queued.proxyUrl),
    send(queued.proxyUrl),
    send(queued.proxyUrl),
  ];
  await new Promise((r) => setTimeout(r, 300));
  for (const [lp, reason] of [
    [strict, 'connections'],
    [queued, 'pending'],
  ] as const) {
    const started = performance.now();
    const res = await send(lp.proxyUrl);
    const ms = performance.now() - started;
    assert.equal(res.statusCode, 503, reason);
    const body = (await res.body.json()) as { error: { code: string; type: string; message: string } };
    assert.equal(body.error.code, 'LOGPROBE_UPSTREAM_OVERFLOW');
    assert.equal(body.error.type, 'upstream_error');
    assert.match(body.error.message, reason === 'pending' ? /candidate\.maxPending/ : /candidate\.maxConnections/);
    assert.ok(ms < 1000, `refused at once (${Math.round(ms)} ms), not after a wait`);
    const text = await (await request(`${lp.adminUrl}/metrics`)).body.text();
    assert.equal(metricValue(text, 'logprobe_proxy_overflow_total', { reason }), 1);
    assert.ok(
      lp.logs.lines.some((l) => l.level === 'warn' && String(l.msg).startsWith('candidate limit reached')),
      `a warn line says which limit: ${lp.logs.text()}`,
    );
  }
  release();
  for (const r of await Promise.all(held)) {
    assert.equal(r.statusCode, 200, 'the requests within the limits (the waiting one too) are served');
    await r.body.dump();
  }
  // The slots come back: the next request is served.
  const again = await send(strict.proxyUrl);
  assert.equal(again.statusCode, 200);
  await again.body.dump();
});

test('config: the limits are validated, with their paths', async () => {
  const { buildConfig } = await import('../src/config/load.js');
  assert.throws(() => buildConfig({ candidate: { maxConnections: 0 } }), /candidate\.maxConnections/);
  assert.throws(() => buildConfig({ candidate: { maxPending: -1 } }), /candidate\.maxPending/);
  assert.throws(
    () => buildConfig({ candidate: { maxPending: 5 } }),
    /candidate\.maxPending: applies only with candidate\.maxConnections/,
  );
  assert.throws(() => buildConfig({ limits: { maxHeaderKB: 0 } }), /limits\.maxHeaderKB/);
  assert.throws(() => buildConfig({ limits: { bodyTimeoutMs: 0 } }), /limits\.bodyTimeoutMs/);
  assert.throws(() => buildConfig({ baseline: { forwardHeaders: ['bad header'] } }), /baseline\.forwardHeaders\.0/);
  const c = buildConfig({});
  assert.deepEqual(
    {
      maxConnections: c.candidate.maxConnections,
      maxPending: c.candidate.maxPending,
      limits: c.limits,
      forwardHeaders: c.baseline.forwardHeaders,
    },
    {
      maxConnections: null,
      maxPending: null,
      limits: {
        bodyMB: 32,
        maxHeaderKB: 64,
        headTimeoutMs: 30_000,
        bodyTimeoutMs: 60_000,
        keepAliveTimeoutMs: 65_000,
        backlog: 4096,
      },
      forwardHeaders: [],
    },
  );
  assert.deepEqual(buildConfig({ baseline: { forwardHeaders: ['OpenAI-Organization'] } }).baseline.forwardHeaders, [
    'openai-organization',
  ]);
});

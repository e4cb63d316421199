/**
 * Bad client input through a running logprobe (mirroring on, every eligible request sampled):
 * invalid JSON, wrong content types, bodies over the limit, deep nesting, invalid UTF-8, many and
 * huge headers, HTTP/1.0, unparseable heads, pipelines mixing good and bad requests.
 *
 * The rules: what the upstream should judge is forwarded untouched (the client gets the upstream's
 * own answer, byte for byte the same as a direct request); what the proxy must refuse gets a clear
 * answer (413 in the OpenAI envelope; 431/400 for heads node:http cannot parse); nothing crashes
 * (after every case a good request is served and the admin /healthz is 200); the mirror counts a
 * bad body as `skipped` or leaves it alone, and never as an error of a backend.
 *
 * Only public surfaces are used: sockets, the admin /metrics and `runtime.mirror.idle()`.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { gunzipSync, gzipSync } from 'node:zlib';
import { request } from 'undici';
import { startLogprobe, type StartedLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';

// ---------------------------------------------------------------------------------------------
// The upstream: a strict OpenAI-ish judge that also says what bytes it received.

const FIXTURE = readFileSync(new URL('./fixtures/openai_chat_nonstream_top_logprobs2.json', import.meta.url));
const MODELS = Buffer.from('{"object":"list","data":[{"id":"m","object":"model"}]}');

interface Judged {
  status: number;
  body: Buffer;
}

function envelope(message: string): Buffer {
  return Buffer.from(JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code: null } }));
}

/**
 * What the upstream answers: 415 for a content type other than JSON, 400 for a body that is not a
 * JSON object, else a fixed chat completion with logprobs (so mirrored pairs compare `ok`).
 * `x-judge: lenient` accepts any body (the mirror then has to judge it on its own).
 */
function judge(req: http.IncomingMessage, raw: Buffer): Judged {
  if (req.method === 'GET') return { status: 200, body: MODELS };
  if (req.headers['x-judge'] === 'lenient') return { status: 200, body: FIXTURE };
  const ct = req.headers['content-type'];
  if (ct !== undefined && !/^application\/json\b/i.test(ct))
    return { status: 415, body: envelope(`unsupported content type ${ct}`) };
  let bytes = raw;
  if (req.headers['content-encoding'] === 'gzip') {
    try {
      bytes = gunzipSync(raw);
    } catch {
      return { status: 400, body: envelope('bad gzip') };
    }
  }
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    return { status: 400, body: envelope(`the request body is not valid JSON: ${(err as Error).message}`) };
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    return { status: 400, body: envelope('the request body must be a JSON object') };
  return { status: 200, body: FIXTURE };
}

interface Judge {
  url: string;
  port: number;
  /** Requests that reached the judge with their whole body. */
  seen: number;
  close(): Promise<void>;
}

async function startJudge(): Promise<Judge> {
  const state = { seen: 0 };
  // Heads up to 256 KB: the proxy's own limits are what is under test, not the upstream's.
  const server = http.createServer({ maxHeaderSize: 256 * 1024 }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      state.seen++;
      const raw = Buffer.concat(chunks);
      const { status, body } = judge(req, raw);
      res.writeHead(status, {
        'content-type': 'application/json',
        'content-length': String(body.length),
        'x-echo-sha256': createHash('sha256').update(raw).digest('hex'),
        'x-echo-length': String(raw.length),
        'x-echo-headers': String(req.rawHeaders.length / 2),
        'x-echo-version': req.httpVersion,
      });
      res.end(body);
    });
  });
  server.keepAliveTimeout = 10_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    get seen() {
      return state.seen;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

// ---------------------------------------------------------------------------------------------
// A raw HTTP/1.x client: exact bytes out, every response parsed back (pipelining included).

interface Resp {
  statusLine: string;
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** Parses one response at the start of `buf`; null when it is not complete yet. */
function parseOne(buf: Buffer, ended: boolean): { resp: Resp; used: number } | null {
  const headEnd = buf.indexOf('\r\n\r\n');
  if (headEnd < 0) return null;
  const lines = buf.toString('latin1', 0, headEnd).split('\r\n');
  const statusLine = lines[0]!;
  const status = Number(statusLine.split(' ')[1]);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const c = line.indexOf(':');
    const name = line.slice(0, c).trim().toLowerCase();
    const value = line.slice(c + 1).trim();
    headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
  }
  let pos = headEnd + 4;
  if (status === 204 || status === 304 || (status >= 100 && status < 200))
    return { resp: { statusLine, status, headers, body: Buffer.alloc(0) }, used: pos };
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
    const parts: Buffer[] = [];
    for (;;) {
      const le = buf.indexOf('\r\n', pos);
      if (le < 0) return null;
      const size = parseInt(buf.toString('latin1', pos, le), 16);
      if (size === 0) {
        const te = buf.indexOf('\r\n\r\n', le - 2 >= pos ? le : pos);
        if (te < 0) return null;
        return { resp: { statusLine, status, headers, body: Buffer.concat(parts) }, used: te + 4 };
      }
      if (buf.length < le + 2 + size + 2) return null;
      parts.push(buf.subarray(le + 2, le + 2 + size));
      pos = le + 2 + size + 2;
    }
  }
  if (headers['content-length'] !== undefined) {
    const n = Number(headers['content-length']);
    if (buf.length < pos + n) return null;
    return { resp: { statusLine, status, headers, body: buf.subarray(pos, pos + n) }, used: pos + n };
  }
  if (!ended) return null;
  return { resp: { statusLine, status, headers, body: buf.subarray(pos) }, used: buf.length };
}

interface Exchanged {
  responses: Resp[];
  /** The server closed the connection. */
  closed: boolean;
  /** Request bytes the client had written when it stopped (it stops once an answer arrives). */
  written: number;
}

/**
 * Writes `parts` on one connection (with backpressure; it stops writing once a response has
 * arrived, as HTTP clients do for an early 413) and collects responses until `want` of them
 * arrived, or the server closed, or `timeoutMs` passed (then it fails with what it got).
 */
function exchange(port: number, parts: Array<Buffer | string>, want = 1, timeoutMs = 10_000): Promise<Exchanged> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    const responses: Resp[] = [];
    let written = 0;
    let settled = false;
    const finish = (closed: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ responses, closed, written });
    };
    const drain = (ended: boolean) => {
      for (;;) {
        const r = parseOne(buf, ended);
        if (!r) return;
        responses.push(r.resp);
        buf = buf.subarray(r.used);
        if (r.used === 0) return;
      }
    };
    const timer = setTimeout(() => {
      settled = true;
      sock.destroy();
      reject(
        new Error(
          `timeout: ${responses.length}/${want} responses, pending ${JSON.stringify(buf.toString('latin1', 0, 200))}`,
        ),
      );
    }, timeoutMs);
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      drain(false);
      if (responses.length >= want) finish(false);
    });
    sock.on('error', () => undefined); // EPIPE/ECONNRESET after an early answer: the answer is what counts
    sock.on('close', () => {
      drain(true);
      finish(true);
    });
    sock.on('connect', async () => {
      for (const p of parts) {
        if (settled || sock.destroyed || (responses.length > 0 && want === 1)) break;
        const b = typeof p === 'string' ? Buffer.from(p, 'latin1') : p;
        // Large parts go in 1 MB slices so that an early answer stops the upload.
        for (let off = 0; off < b.length; off += 1 << 20) {
          if (settled || sock.destroyed || (responses.length > 0 && want === 1)) break;
          const slice = b.subarray(off, Math.min(b.length, off + (1 << 20)));
          written += slice.length;
          if (!sock.write(slice)) {
            await new Promise<void>((r) => {
              const done = () => {
                sock.off('drain', done);
                sock.off('close', done);
                r();
              };
              sock.on('drain', done);
              sock.on('close', done);
            });
          }
        }
      }
    });
  });
}

/** A request as raw bytes, with content-length unless the headers already frame the body. */
function req(
  method: string,
  path: string,
  headers: Record<string, string> | Array<[string, string]>,
  body?: Buffer | string,
  version = 'HTTP/1.1',
): Buffer {
  const list: Array<[string, string]> = Array.isArray(headers) ? [...headers] : Object.entries(headers);
  const b = body === undefined ? undefined : typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  const names = new Set(list.map(([n]) => n.toLowerCase()));
  if (!names.has('host') && version === 'HTTP/1.1') list.unshift(['Host', 'logprobe.test']);
  if (b !== undefined && !names.has('content-length') && !names.has('transfer-encoding'))
    list.push(['Content-Length', String(b.length)]);
  const head = `${method} ${path} ${version}\r\n${list.map(([n, v]) => `${n}: ${v}\r\n`).join('')}\r\n`;
  return b === undefined ? Buffer.from(head, 'latin1') : Buffer.concat([Buffer.from(head, 'latin1'), b]);
}

function chunked(body: Buffer, size: number): Buffer {
  const parts: Buffer[] = [];
  for (let i = 0; i < body.length; i += size) {
    const c = body.subarray(i, i + size);
    parts.push(Buffer.from(`${c.length.toString(16)}\r\n`), c, Buffer.from('\r\n'));
  }
  parts.push(Buffer.from('0\r\n\r\n'));
  return Buffer.concat(parts);
}

const JSON_CT = { 'Content-Type': 'application/json' };
const GOOD_CHAT = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8 });
const GOOD_COMPLETION = JSON.stringify({ model: 'm', prompt: 'hello', max_tokens: 8 });

function assertEnvelope(body: Buffer, code?: string): void {
  const b = JSON.parse(body.toString('utf8')) as { error?: Record<string, unknown> };
  assert.ok(b.error, `OpenAI error envelope: ${body.toString('utf8')}`);
  assert.equal(typeof b.error.message, 'string');
  assert.equal(typeof b.error.type, 'string');
  assert.ok('param' in b.error && 'code' in b.error, 'param and code present');
  if (code !== undefined) assert.equal(b.error.code, code);
}

// ---------------------------------------------------------------------------------------------
// One logprobe for the file: candidate and baseline are the same judge.

let upstream: Judge;
let lp: StartedLogprobe;
let proxyPort: number;

before(async () => {
  upstream = await startJudge();
  lp = await startLogprobe(
    { candidate: { url: upstream.url }, baseline: { url: upstream.url }, mirror: { sampleRate: 1 } },
    { level: 'warn' },
  );
  proxyPort = Number(new URL(lp.proxyUrl).port);
});

after(async () => {
  await lp?.close();
  await upstream?.close();
});

const OUTCOMES = [
  'ok',
  'skipped',
  'dropped',
  'candidate_error',
  'baseline_error',
  'unparseable',
  'incomparable',
] as const;
type Outcome = (typeof OUTCOMES)[number];
type Totals = Record<Outcome, number>;

async function mirrorTotals(): Promise<Totals> {
  const res = await request(`${lp.adminUrl}/metrics`);
  const text = await res.body.text();
  const out = {} as Totals;
  for (const o of OUTCOMES) out[o] = metricValue(text, 'logprobe_mirror_total', { outcome: o }) ?? 0;
  return out;
}

function delta(a: Totals, b: Totals): Totals {
  const out = {} as Totals;
  for (const o of OUTCOMES) out[o] = b[o] - a[o];
  return out;
}

/**
 * Waits until the mirror has settled what the proxy handed it (the hand-over happens when the
 * response closes, which may be just after the client read it) and returns the change since
 * `before`. `expect` is polled for: it returns true once the change is complete.
 */
async function mirrorDelta(before: Totals, expect: (d: Totals) => boolean, timeoutMs = 5000): Promise<Totals> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await new Promise((r) => setTimeout(r, 30));
    await lp.runtime.mirror!.idle();
    const d = delta(before, await mirrorTotals());
    if (expect(d) || Date.now() > deadline) return d;
  }
}

/** The mirror took no bad body for a backend error; a bad body was skipped or left alone. */
function assertBadBodiesSkipped(d: Totals, bad: number, ok = 0): void {
  assert.equal(d.ok, ok, `ok: ${JSON.stringify(d)}`);
  assert.ok(d.skipped === 0 || d.skipped === bad, `skipped ${d.skipped} of ${bad} bad bodies: ${JSON.stringify(d)}`);
  for (const o of ['dropped', 'candidate_error', 'baseline_error', 'unparseable', 'incomparable'] as const)
    assert.equal(d[o], 0, `${o}: ${JSON.stringify(d)}`);
}

/** After every case: a good request is served (and mirrored `ok`), the admin /healthz is 200. */
async function assertStillServing(): Promise<void> {
  const before = await mirrorTotals();
  const res = await request(`${lp.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    body: GOOD_CHAT,
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(res.statusCode, 200);
  assert.deepEqual(Buffer.from(await res.body.arrayBuffer()), FIXTURE);
  const raw = await exchange(proxyPort, [req('GET', '/v1/models', {})]);
  assert.equal(raw.responses[0]?.status, 200);
  const health = await request(`${lp.adminUrl}/healthz`);
  assert.equal(health.statusCode, 200);
  await health.body.dump();
  const d = await mirrorDelta(before, (x) => x.ok >= 1);
  assert.equal(d.ok, 1, `the good request was mirrored ok: ${JSON.stringify(d)}`);
}

/** Sends the same bytes directly to the upstream and through the proxy: the answers are the same. */
async function sameAsDirect(bytes: Buffer): Promise<Resp> {
  const direct = await exchange(upstream.port, [bytes]);
  const proxied = await exchange(proxyPort, [bytes]);
  const d = direct.responses[0];
  const p = proxied.responses[0];
  assert.ok(d && p, 'both answered');
  assert.equal(p.status, d.status);
  assert.deepEqual(p.body, d.body, 'body byte for byte');
  for (const h of ['content-type', 'content-length', 'x-echo-sha256', 'x-echo-length'])
    assert.equal(p.headers[h], d.headers[h], h);
  return p;
}

// ---------------------------------------------------------------------------------------------

test('invalid JSON is forwarded untouched: the client gets the upstream 400, byte for byte; the mirror skips it', async () => {
  const bodies = [
    '{"model":"m","messages":[{"role":"user","content":"hi"}',
    'not json at all',
    '{"model":"m",}',
    '{"a":1} trailing',
    '\ufeff{"model":"m","prompt":"with a BOM"}',
    "{'single':'quotes'}",
    '{"n":NaN}',
  ];
  const before = await mirrorTotals();
  for (const [i, body] of bodies.entries()) {
    const path = i % 2 === 0 ? '/v1/chat/completions' : '/v1/completions';
    const p = await sameAsDirect(req('POST', path, JSON_CT, body));
    assert.equal(p.status, 400, body);
    assert.equal(p.headers['x-echo-sha256'], createHash('sha256').update(Buffer.from(body, 'utf8')).digest('hex'));
  }
  assertBadBodiesSkipped(await mirrorDelta(before, (d) => d.skipped >= bodies.length), bodies.length);
  await assertStillServing();
});

test('a body the upstream accepts but the mirror cannot use (not JSON, not an object, gzip) is skipped by the mirror', async () => {
  const lenient = { 'Content-Type': 'application/json', 'X-Judge': 'lenient' };
  const cases: Array<[Record<string, string>, Buffer | string]> = [
    [lenient, '{"broken":'],
    [lenient, '[]'],
    [lenient, 'null'],
    [lenient, '42'],
    [lenient, '"a string"'],
    [{ 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' }, gzipSync(GOOD_CHAT)],
  ];
  const before = await mirrorTotals();
  for (const [headers, body] of cases) {
    const p = await sameAsDirect(req('POST', '/v1/chat/completions', headers, body));
    assert.equal(p.status, 200);
  }
  const d = await mirrorDelta(before, (x) => x.skipped >= cases.length);
  assert.equal(d.skipped, cases.length, `every unusable body counted as skipped: ${JSON.stringify(d)}`);
  assertBadBodiesSkipped(d, cases.length);
  await assertStillServing();
});

test('wrong content types (text/plain, multipart, none) are the upstream’s to judge', async () => {
  const boundary = 'XyZlogprobe';
  const multipart = Buffer.concat([
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n--${boundary}\r\n`),
    Buffer.from(
      'Content-Disposition: form-data; name="file"; filename="a.bin"\r\nContent-Type: application/octet-stream\r\n\r\n',
    ),
    Buffer.from([0, 1, 0xff, 0xfe, 0x0d, 0x0a, 0x2d, 0x2d]),
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  const before = await mirrorTotals();
  const plain = await sameAsDirect(req('POST', '/v1/chat/completions', { 'Content-Type': 'text/plain' }, GOOD_CHAT));
  assert.equal(plain.status, 415);
  const form = await sameAsDirect(
    req('POST', '/v1/completions', { 'Content-Type': `multipart/form-data; boundary=${boundary}` }, multipart),
  );
  assert.equal(form.status, 415);
  const urlencoded = await sameAsDirect(
    req('POST', '/v1/completions', { 'Content-Type': 'application/x-www-form-urlencoded' }, 'model=m&prompt=hi'),
  );
  assert.equal(urlencoded.status, 415);
  assertBadBodiesSkipped(await mirrorDelta(before, (d) => d.skipped >= 3), 3);

  // No content type at all: this upstream reads JSON anyway, so the copy is mirrored as usual.
  const before2 = await mirrorTotals();
  const none = await sameAsDirect(req('POST', '/v1/chat/completions', {}, GOOD_CHAT));
  assert.equal(none.status, 200);
  const d = await mirrorDelta(before2, (x) => x.ok >= 1);
  assert.equal(d.ok, 1, JSON.stringify(d));
  await assertStillServing();
});

test('a 40 MB body over the default 32 MB limit gets 413 in the OpenAI envelope, with content-length and chunked, kept for the mirror or streamed', async () => {
  assert.equal(lp.runtime.config.limits.bodyMB, 32, 'the default limit');
  const big = Buffer.alloc(40 * 1024 * 1024, 0x20);
  big.write('{"model":"m","prompt":"', 0);
  const seenBefore = upstream.seen;
  const before = await mirrorTotals();
  // /v1/chat/completions: the mirror keeps the body; /v1/embeddings: it streams through.
  for (const path of ['/v1/chat/completions', '/v1/embeddings']) {
    const withLength = await exchange(proxyPort, [req('POST', path, JSON_CT, big)], Infinity, 30_000);
    assert.equal(withLength.responses.length, 1, `${path}: one answer`);
    const r = withLength.responses[0]!;
    assert.equal(r.status, 413, path);
    assert.match(r.headers['content-type'] ?? '', /application\/json/);
    assert.equal(r.headers.connection, 'close');
    assertEnvelope(r.body, 'LOGPROBE_PAYLOAD_TOO_LARGE');
    assert.ok(withLength.closed, 'the connection is closed (the rest of the body is not read)');
    assert.ok(
      withLength.written < big.length / 2,
      `${path}: answered before the upload (${withLength.written} bytes written)`,
    );

    // Chunked: the 413 can only come once 32 MB have been read, while the client is still
    // uploading, and the proxy closes at once (no lingering close): about one upload in 15 sees
    // the connection reset (EPIPE) before it reads the 413. Up to three tries; one must read it.
    const head = req('POST', path, { ...JSON_CT, 'Transfer-Encoding': 'chunked' });
    const body = chunked(big, 256 * 1024);
    let answered: Resp | undefined;
    for (let attempt = 0; attempt < 3 && answered === undefined; attempt++) {
      const chunks = await exchange(proxyPort, [head, body], Infinity, 30_000);
      assert.ok(chunks.closed, `${path} chunked: closed`);
      assert.ok(chunks.responses.length <= 1, `${path} chunked: at most one answer`);
      answered = chunks.responses[0];
    }
    assert.ok(answered, `${path} chunked: a 413 read in three tries`);
    assert.equal(answered.status, 413, `${path} chunked`);
    assertEnvelope(answered.body, 'LOGPROBE_PAYLOAD_TOO_LARGE');
  }
  assert.equal(upstream.seen, seenBefore, 'no oversized body reached the upstream in full');
  assertBadBodiesSkipped(await mirrorDelta(before, () => false, 300), 0);
  await assertStillServing();
});

test('a body just under the limit is forwarded whole (chunked) and the proxy stays up', async () => {
  // 1 MB of JSON, chunked in odd sizes: forwarded, mirrored as usual.
  const body = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(1 << 20) }] }));
  const before = await mirrorTotals();
  const r = await exchange(proxyPort, [
    req('POST', '/v1/chat/completions', { ...JSON_CT, 'Transfer-Encoding': 'chunked' }),
    chunked(body, 65_537),
  ]);
  assert.equal(r.responses[0]?.status, 200);
  assert.equal(r.responses[0]!.headers['x-echo-sha256'], createHash('sha256').update(body).digest('hex'));
  const d = await mirrorDelta(before, (x) => x.ok >= 1);
  assert.equal(d.ok, 1, JSON.stringify(d));
  await assertStillServing();
});

const DEEP = 100_000;
const deepArrays = `{"model":"m","messages":${'['.repeat(DEEP)}${']'.repeat(DEEP)}}`;
const deepObjects = `{"model":"m","messages":[{"role":"user","content":${'{"a":'.repeat(DEEP)}1${'}'.repeat(DEEP)}}]}`;

test('deeply nested JSON (100k levels) is forwarded untouched and crashes nothing', async () => {
  const before = await mirrorTotals();
  for (const body of [deepArrays, deepObjects]) {
    const p = await sameAsDirect(req('POST', '/v1/chat/completions', JSON_CT, body));
    assert.equal(p.status, 200, 'this upstream parses it (V8 parses JSON iteratively)');
  }
  // The mirror cannot serialise a 100k-deep copy (JSON.stringify recurses): skipped or left alone.
  assertBadBodiesSkipped(await mirrorDelta(before, () => false, 500), 2);
  await assertStillServing();
});

test('deeply nested JSON is counted as skipped by the mirror, not lost silently', {}, async () => {
  const before = await mirrorTotals();
  await sameAsDirect(req('POST', '/v1/chat/completions', JSON_CT, deepArrays));
  const d = await mirrorDelta(before, (x) => x.skipped >= 1, 1000);
  assert.equal(d.skipped, 1, JSON.stringify(d));
});

test('invalid UTF-8 in the body is forwarded byte for byte', async () => {
  const bad = Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80, 0xf4, 0x90, 0x80, 0x80, 0xc0, 0xaf]);
  const inString = Buffer.concat([
    Buffer.from('{"model":"m","messages":[{"role":"user","content":"'),
    bad,
    Buffer.from('"}]}'),
  ]);
  const garbage = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919 + 13) & 0xff));
  const loneSurrogate = '{"model":"m","messages":[{"role":"user","content":"\\ud800 \\udfff"}]}';
  const before = await mirrorTotals();
  const a = await sameAsDirect(req('POST', '/v1/chat/completions', JSON_CT, inString));
  assert.equal(
    a.headers['x-echo-sha256'],
    createHash('sha256').update(inString).digest('hex'),
    'the bytes the upstream got are the client’s',
  );
  assert.equal(a.status, 200, 'this upstream decodes with U+FFFD replacement, as most do');
  const b = await sameAsDirect(req('POST', '/v1/completions', JSON_CT, garbage));
  assert.equal(b.status, 400);
  const c = await sameAsDirect(req('POST', '/v1/chat/completions', JSON_CT, loneSurrogate));
  assert.equal(c.status, 200);
  // The accepted ones are mirrored (both backends get the same U+FFFD-replaced copy), the garbage is skipped.
  const d = await mirrorDelta(before, (x) => x.ok >= 2 && x.skipped >= 1);
  assertBadBodiesSkipped(d, 1, 2);
  await assertStillServing();
});

test('500 headers reach the upstream sampled for the mirror or not', async () => {
  const before = await mirrorTotals();
  const headers: Array<[string, string]> = [['Content-Type', 'application/json']];
  for (let i = 0; i < 500; i++) headers.push([`X-Many-${i}`, `value-${i}`]);
  const mirrored = await exchange(proxyPort, [req('POST', '/v1/chat/completions', headers, GOOD_CHAT)]);
  assert.equal(mirrored.responses[0]?.status, 200);
  assert.ok(
    Number(mirrored.responses[0]!.headers['x-echo-headers']) >= 501,
    `upstream saw ${mirrored.responses[0]!.headers['x-echo-headers']} headers`,
  );
  await mirrorDelta(before, (d) => d.ok >= 1);
  const fast = await exchange(proxyPort, [req('GET', '/v1/models', headers)]);
  assert.equal(fast.responses[0]?.status, 200);
  assert.ok(Number(fast.responses[0]!.headers['x-echo-headers']) >= 501);
  await assertStillServing();
});

test('a head far over the limit (200 KB) is refused with 431 and the connection closed, sampled for the mirror or not', async () => {
  const huge = 'a'.repeat(200 * 1024);
  const seenBefore = upstream.seen;
  for (const bytes of [
    req('GET', '/v1/models', { 'X-Huge': huge }),
    req('POST', '/v1/chat/completions', { ...JSON_CT, 'X-Huge': huge }, GOOD_CHAT),
  ]) {
    const r = await exchange(proxyPort, [bytes], Infinity);
    assert.equal(r.responses.length, 1);
    assert.equal(r.responses[0]!.status, 431);
    assert.ok(r.closed);
  }
  assert.equal(upstream.seen, seenBefore);
  await assertStillServing();
});

test('a 60 KB header is forwarded, sampled for the mirror or not', async () => {
  const before = await mirrorTotals();
  const big = 'b'.repeat(60 * 1024);
  const fast = await exchange(proxyPort, [req('GET', '/v1/models', { 'X-Big': big })]);
  assert.equal(fast.responses[0]?.status, 200);
  const sampled = await exchange(proxyPort, [
    req('POST', '/v1/chat/completions', { ...JSON_CT, 'X-Big': big }, GOOD_CHAT),
  ]);
  assert.equal(sampled.responses[0]?.status, 200);
  const unsampled = await exchange(proxyPort, [
    req('POST', '/v1/chat/completions', { ...JSON_CT, 'X-Big': big, 'X-Logprobe-Mirror': '0' }, GOOD_CHAT),
  ]);
  assert.equal(unsampled.responses[0]?.status, 200);
  await mirrorDelta(before, (d) => d.ok >= 1);
  await assertStillServing();
});

test('a 100 KB head gets the same answer whether it arrives in one write or in 10 KB pieces', {}, async () => {
  const bytes = req('GET', '/v1/models', { 'X-Big': 'c'.repeat(100 * 1024) });
  const whole = await exchange(proxyPort, [bytes], 1);
  const pieces: Buffer[] = [];
  for (let i = 0; i < bytes.length; i += 10 * 1024) pieces.push(bytes.subarray(i, i + 10 * 1024));
  const trickled = await new Promise<Exchanged>((resolve, reject) => {
    // One piece every 5 ms, so each arrives in its own read.
    const sock = net.connect(proxyPort, '127.0.0.1');
    let buf = Buffer.alloc(0);
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const r = parseOne(buf, false);
      if (r) {
        sock.destroy();
        resolve({ responses: [r.resp], closed: false, written: bytes.length });
      }
    });
    sock.on('error', () => undefined);
    sock.on('close', () => {
      const r = parseOne(buf, true);
      resolve({ responses: r ? [r.resp] : [], closed: true, written: bytes.length });
    });
    sock.on('connect', async () => {
      for (const p of pieces) {
        if (sock.destroyed) return;
        sock.write(p);
        await new Promise((r) => setTimeout(r, 5));
      }
    });
    setTimeout(() => reject(new Error('no answer')), 5000).unref();
  });
  const statuses = `one write: ${whole.responses[0]?.status}, trickled: ${trickled.responses[0]?.status}`;
  assert.equal(whole.responses.length, 1, `the one write is answered (${statuses})`);
  assert.equal(trickled.responses.length, 1, `the trickled head is answered (${statuses})`);
  assert.equal(trickled.responses[0]!.status, whole.responses[0]!.status, statuses);
});

test('a 431 or 400 made for an unparseable head is in the OpenAI envelope', {}, async () => {
  const r = await exchange(proxyPort, [req('GET', '/v1/models', { 'X-Huge': 'a'.repeat(200 * 1024) })], Infinity);
  assert.equal(r.responses[0]?.status, 431);
  assertEnvelope(r.responses[0]!.body);
  const bad = await exchange(proxyPort, ['GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n'], Infinity);
  assert.equal(bad.responses[0]?.status, 400);
  assertEnvelope(bad.responses[0]!.body);
});

test('unparseable heads get 400 from the proxy (as node:http does) and reach no upstream', async () => {
  const heads = [
    'GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n',
    'GARBAGE\r\n\r\n',
    'GET /v1/models HTTP/1.1\r\nHost: x\r\n no-colon folded\r\n\r\n',
    'GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: 1\rX-B: 2\r\n\r\n',
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!',
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n',
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n',
    'GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Nul: a\0b\r\n\r\n',
  ];
  const seenBefore = upstream.seen;
  for (const h of heads) {
    const r = await exchange(proxyPort, [h], Infinity);
    assert.ok(r.closed, JSON.stringify(h));
    assert.ok(r.responses.length <= 1, JSON.stringify(h));
    assert.ok(
      r.responses.length === 0 || r.responses[0]!.status === 400,
      `${JSON.stringify(h)}: ${r.responses[0]?.statusLine}`,
    );
  }
  assert.equal(upstream.seen, seenBefore, 'no unparseable request reached the upstream');
  await assertStillServing();
});

test(
  'bytes that can never start a request (a TLS ClientHello) are refused at once, as node:http does',
  {},
  async () => {
    const hello = Buffer.from('16030100a5010000a10303' + '00'.repeat(32), 'hex');
    const r = await exchange(proxyPort, [hello], Infinity, 2000);
    assert.ok(r.closed);
    assert.ok(r.responses.length === 0 || r.responses[0]!.status === 400);
  },
);

test('HTTP/1.0 requests are served (and mirrored), with and without keep-alive', async () => {
  const before = await mirrorTotals();
  const post = await exchange(
    proxyPort,
    [req('POST', '/v1/chat/completions', JSON_CT, GOOD_CHAT, 'HTTP/1.0')],
    Infinity,
  );
  assert.equal(post.responses.length, 1);
  assert.equal(post.responses[0]!.status, 200);
  assert.deepEqual(post.responses[0]!.body, FIXTURE);
  assert.ok(post.closed, 'HTTP/1.0 without keep-alive: closed after the answer');
  const get = await exchange(proxyPort, [req('GET', '/v1/models', {}, undefined, 'HTTP/1.0')], Infinity);
  assert.equal(get.responses[0]?.status, 200);
  assert.deepEqual(get.responses[0]!.body, MODELS);

  // Keep-alive: two requests on one HTTP/1.0 connection.
  const ka = { ...JSON_CT, Connection: 'keep-alive' };
  const two = await exchange(
    proxyPort,
    [
      req('POST', '/v1/completions', ka, GOOD_COMPLETION, 'HTTP/1.0'),
      req('GET', '/v1/models', { Connection: 'keep-alive' }, undefined, 'HTTP/1.0'),
    ],
    2,
  );
  assert.deepEqual(
    two.responses.map((r) => r.status),
    [200, 200],
  );
  const d = await mirrorDelta(before, (x) => x.ok >= 2);
  assert.equal(d.ok, 2, JSON.stringify(d));
  await assertStillServing();
});

test('pipelined requests mixing good and bad are answered in order', async () => {
  const before = await mirrorTotals();
  const seq = [
    req('GET', '/v1/models', {}), // not mirrored
    req('POST', '/v1/chat/completions', JSON_CT, GOOD_CHAT), // mirrored: the body is kept
    req('POST', '/v1/chat/completions', JSON_CT, '{"model":'), // invalid JSON: the upstream's 400
    req('POST', '/v1/completions', JSON_CT, GOOD_COMPLETION),
    req('POST', '/v1/chat/completions', { 'Content-Type': 'text/plain' }, GOOD_CHAT), // 415
    req('POST', '/v1/completions', { ...JSON_CT, 'Transfer-Encoding': 'chunked' }), // chunked, invalid UTF-8
    chunked(Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), 2),
    req('GET', '/v1/models', {}),
  ];
  const r = await exchange(proxyPort, [Buffer.concat(seq)], 7);
  assert.deepEqual(
    r.responses.map((x) => x.status),
    [200, 200, 400, 200, 415, 400, 200],
  );
  assert.deepEqual(r.responses[1]!.body, FIXTURE);
  assert.deepEqual(r.responses[6]!.body, MODELS);
  const d = await mirrorDelta(before, (x) => x.ok >= 2 && x.skipped >= 3);
  assertBadBodiesSkipped(d, 3, 2);

  // A pipeline that ends with an unparseable request: the good ones are answered, then 400 and close.
  const before2 = await mirrorTotals();
  const bad = await exchange(
    proxyPort,
    [
      Buffer.concat([
        req('GET', '/v1/models', {}),
        req('POST', '/v1/completions', JSON_CT, GOOD_COMPLETION),
        Buffer.from('BROKEN\r\n\r\n'),
        req('GET', '/v1/models', {}),
      ]),
    ],
    Infinity,
  );
  assert.deepEqual(
    bad.responses.map((x) => x.status),
    [200, 200, 400],
  );
  assert.ok(bad.closed);
  await mirrorDelta(before2, (d) => d.ok >= 1);

  // And a 413 in the middle: answered, the connection closed, what followed never served.
  const cut = await exchange(
    proxyPort,
    [
      Buffer.concat([
        req('GET', '/v1/models', {}),
        req('POST', '/v1/embeddings', { ...JSON_CT, 'Content-Length': String(64 * 1024 * 1024) }),
        Buffer.alloc(1024, 0x20),
        req('GET', '/v1/models', {}),
      ]),
    ],
    Infinity,
  );
  assert.deepEqual(
    cut.responses.map((x) => x.status),
    [200, 413],
  );
  assert.ok(cut.closed);
  await assertStillServing();
});

test('header names with bytes node:http refuses are refused, not forwarded', {}, async (t) => {
  // A raw TCP upstream that accepts anything: it shows what the proxy forwards.
  const received: string[] = [];
  const server = net.createServer((s) => {
    s.on('data', (d: Buffer) => {
      received.push(d.toString('latin1'));
      s.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
    });
    s.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  const port = (server.address() as net.AddressInfo).port;
  const lax = await startLogprobe(
    {
      candidate: { url: `http://127.0.0.1:${port}` },
      baseline: { url: `http://127.0.0.1:${port}` },
      mirror: { sampleRate: 0 },
    },
    { level: 'silent' },
  );
  t.after(() => lax.close());
  const laxPort = Number(new URL(lax.proxyUrl).port);
  for (const h of [
    'GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n',
    'GET /v1/models HTTP/1.1\r\nHost: x\r\nTransfer-Encoding\x0b: chunked\r\n\r\n',
    'GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Ctl: a\x01b\r\n\r\n',
  ]) {
    const r = await exchange(laxPort, [h], 1);
    assert.equal(r.responses[0]?.status, 400, JSON.stringify(h));
  }
  assert.deepEqual(received, [], 'nothing forwarded');
});

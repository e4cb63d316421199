/**
 * Differential fuzzing of the fast path (src/proxy/raw.ts) against node's own HTTP/1.1 parser
 * (llhttp): the classic defence against request smuggling.
 *
 * fast-check builds request byte sequences S from a grammar with mutations (odd request lines,
 * Content-Length and Transfer-Encoding variants, obs-fold, whitespace before the colon, control
 * bytes, bare LF, chunked bodies with extensions, trailers and bad sizes, short bodies, a second
 * request pipelined in the same write). For each S:
 *
 *  - S goes to logprobe's proxy port; a raw TCP upstream records the exact bytes logprobe
 *    forwards (and passes them to a node:http server that answers 200 "ok");
 *  - S goes, directly, to a reference node:http server (default options): what llhttp makes of S;
 *  - the forwarded bytes are replayed into the same reference: what llhttp makes of them.
 *
 * The properties:
 *  (1) safety, always: the requests llhttp reads from the forwarded bytes are a prefix of the
 *      requests llhttp reads from S (those the proxy forwards at all: origin-form target, a method
 *      it forwards) — same method, url, headers (but for the fields a proxy changes) and body (a
 *      body cut short is a prefix of the reference's);
 *  (2) when llhttp accepts the whole of S, every request it read (up to one that ends the
 *      connection) is forwarded, complete and equal;
 *  (3) the proxy survives: after each case a plain GET through it is answered 200.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import fc from 'fast-check';
import { startLogprobe, type StartedLogprobe } from './helpers/logprobe.js';
import { CONNECTION_FIELDS, MIRROR_HEADER } from '../src/proxy/headers.js';

// ---------------------------------------------------------------------------------------------
// The reference: a plain node:http server that records what it parsed, per client connection.

interface Parsed {
  method: string;
  url: string;
  version: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  complete: boolean;
}

interface RefServer {
  port: number;
  /** Requests parsed on the connection whose client side has this local port. */
  byPort: Map<number, Parsed[]>;
  /** Last time anything happened on the server side (for the quiet wait). */
  lastActivity: { t: number };
  server: http.Server;
}

async function startRef(options: http.ServerOptions = {}): Promise<RefServer> {
  const byPort = new Map<number, Parsed[]>();
  const lastActivity = { t: performance.now() };
  const server = http.createServer(options, (req, res) => {
    lastActivity.t = performance.now();
    const rec: Parsed = { method: req.method ?? '', url: req.url ?? '', version: req.httpVersion, headers: req.headers, body: Buffer.alloc(0), complete: false };
    const list = byPort.get(req.socket.remotePort ?? -1);
    list?.push(rec);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      lastActivity.t = performance.now();
      chunks.push(c);
      rec.body = Buffer.concat(chunks);
    });
    req.on('error', () => {});
    req.on('end', () => {
      lastActivity.t = performance.now();
      rec.complete = true;
      res.writeHead(200, { 'content-length': '2' });
      res.end('ok');
    });
  });
  server.on('clientError', (err: NodeJS.ErrnoException, sock: net.Socket) => {
    lastActivity.t = performance.now();
    // node's default answer (400 and close), kept.
    if (sock.writable && err.code !== 'ECONNRESET') sock.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    else sock.destroy();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as net.AddressInfo).port, byPort, lastActivity, server };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Writes `bytes` on a fresh connection to `port` and waits until the exchange settles: the
 * connection closed, or `expect(received)` holds, or nothing happened for `quietMs`.
 */
function exchange(
  port: number,
  bytes: Buffer,
  opts: { quietMs: number; maxMs: number; activity?: () => number; onLocalPort?: (p: number) => void; expect?: (text: string) => boolean },
): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve) => {
    let text = '';
    let closed = false;
    let last = performance.now();
    const t0 = last;
    const sock = net.connect(port, '127.0.0.1', () => {
      opts.onLocalPort?.(sock.localPort as number);
      sock.write(bytes);
    });
    sock.on('data', (d: Buffer) => {
      last = performance.now();
      text += d.toString('latin1');
    });
    sock.on('error', () => {});
    sock.on('close', () => {
      closed = true;
    });
    const tick = setInterval(() => {
      const now = performance.now();
      const act = Math.max(last, opts.activity ? opts.activity() : 0);
      const settled = closed || (opts.expect !== undefined && opts.expect(text)) || now - act >= opts.quietMs;
      if (settled || now - t0 >= opts.maxMs) {
        clearInterval(tick);
        sock.destroy();
        resolve({ text, closed });
      }
    }, 3);
  });
}

/** What llhttp (a node:http server) makes of `bytes` sent on one connection. */
async function refParse(ref: RefServer, bytes: Buffer): Promise<{ reqs: Parsed[]; text: string }> {
  const reqs: Parsed[] = [];
  let localPort = -1;
  const { text } = await exchange(ref.port, bytes, {
    quietMs: 15,
    maxMs: 1000,
    activity: () => ref.lastActivity.t,
    onLocalPort: (p) => {
      localPort = p;
      ref.byPort.set(p, reqs);
    },
  });
  // Events still in flight for this connection land in `reqs` until the entry is removed.
  await sleep(1);
  ref.byPort.delete(localPort);
  return { reqs, text };
}

// ---------------------------------------------------------------------------------------------
// The raw upstream: records every byte logprobe sends, per connection and per case, and passes
// the bytes to a node:http server that answers 200 "ok" (llhttp finds the request boundaries).

interface Segment {
  conn: number;
  caseId: number;
  bytes: Buffer;
}

interface RawUpstream {
  url: string;
  segments: Segment[];
  current: { caseId: number; lastActivity: number };
  close(): Promise<void>;
}

async function startRawUpstream(): Promise<RawUpstream> {
  const answer = http.createServer((req, res) => {
    req.on('error', () => {});
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-length': '2' });
      res.end('ok');
    });
  });
  await new Promise<void>((r) => answer.listen(0, '127.0.0.1', r));
  const answerPort = (answer.address() as net.AddressInfo).port;
  const segments: Segment[] = [];
  const current = { caseId: -1, lastActivity: performance.now() };
  let nextConn = 0;
  const socks = new Set<net.Socket>();
  const server = net.createServer((sock) => {
    const conn = nextConn++;
    const inner = net.connect(answerPort, '127.0.0.1');
    socks.add(sock);
    socks.add(inner);
    sock.on('data', (d: Buffer) => {
      current.lastActivity = performance.now();
      segments.push({ conn, caseId: current.caseId, bytes: Buffer.from(d) });
      inner.write(d);
    });
    inner.on('data', (d: Buffer) => {
      current.lastActivity = performance.now();
      sock.write(d);
    });
    const down = () => {
      current.lastActivity = performance.now();
      sock.destroy();
      inner.destroy();
      socks.delete(sock);
      socks.delete(inner);
    };
    sock.on('close', down);
    inner.on('close', down);
    sock.on('end', () => inner.end());
    inner.on('end', () => sock.end());
    sock.on('error', () => {});
    inner.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    segments,
    current,
    close: async () => {
      for (const s of socks) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
      answer.closeAllConnections();
      await new Promise<void>((r) => answer.close(() => r()));
    },
  };
}

/** The bytes one case sent upstream, per upstream connection, in order of first byte. */
function bytesOfCase(up: RawUpstream, caseId: number): Buffer[] {
  const order: number[] = [];
  const by = new Map<number, Buffer[]>();
  for (const s of up.segments) {
    if (s.caseId !== caseId) continue;
    if (!by.has(s.conn)) {
      by.set(s.conn, []);
      order.push(s.conn);
    }
    by.get(s.conn)!.push(s.bytes);
  }
  return order.map((c) => Buffer.concat(by.get(c)!));
}

// ---------------------------------------------------------------------------------------------
// The grammar.

const CRLF = '\r\n';

const methodArb = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS') },
  { weight: 1, arbitrary: fc.constantFrom('get', 'Post', 'FOO', 'CONNECT', 'TRACE', 'PROPFIND', 'G\tET', 'POST ', '', 'GE\x00T', 'PURGE') },
);
const targetArb = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('/', '/a', '/v1/x?y=1&z=%20', '/second', '/a/../b', '/%00', '/a#frag') },
  { weight: 2, arbitrary: fc.constantFrom('http://example.com/a', '*', 'example.com:443', '/a b', '/a\tb', '/\xe9', '/a\x7f', '/a\x01', '//a', '', '?x') },
);
const sepArb = fc.oneof({ weight: 10, arbitrary: fc.constant(' ') }, { weight: 1, arbitrary: fc.constantFrom('  ', '\t', ' \t') });
const versionArb = fc.oneof(
  { weight: 10, arbitrary: fc.constant('HTTP/1.1') },
  { weight: 3, arbitrary: fc.constantFrom('HTTP/1.0', 'HTTP/1.2', 'HTTP/2.0', 'HTTP/0.9', 'http/1.1', 'HTTP/1.1 ', 'HTTP/1.01', 'HTTP/11', 'HTTP/1.1\t', 'HTTPS/1.1') },
);

/** A header line's text (no line end) — possibly mutated. */
const plainFieldArb = fc.constantFrom(
  'Accept: */*',
  'X-A: 1',
  'X-A: 2',
  'x-a: 3',
  'Content-Type: application/json',
  'Content-Type: text/plain',
  'Cookie: a=1',
  'Cookie: b=2',
  'Authorization: Bearer k',
  'User-Agent: fuzz',
  'Connection: keep-alive',
  'Connection: close',
  'Connection: x-secret',
  'Connection: keep-alive, X-Secret',
  'Connection: close\r\nConnection: x-secret\r\nX-Secret: hop',
  'connection: upgrade',
  'X-Secret: hop',
  'Keep-Alive: timeout=5',
  'Proxy-Connection: keep-alive',
  'TE: trailers',
  'Trailer: x-t',
  'Upgrade: websocket',
  'Proxy-Authorization: Basic eA==',
  'X-Logprobe-Mirror: 0',
  'X-Logprobe-Mirror: 1',
  'X-Request-Id: abc',
  'Expect: 100-continue',
  'X-Empty:',
  'X-Spaces:    v   ',
  'X-Obs: caf\xe9',
  'X-Tab: a\tb',
  'Host: other',
);

type Field = { text: string; end: string };

const mutatedFieldArb: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom('X-A : 1', 'X-A\t: 1', ' X-A: 1', 'X A: 1', 'X-\x01A: 1', 'X-A: a\x00b', 'X-A: a\x7fb', 'X-A: a\x0bb', 'X-A: a\rb', 'NoColon', ': empty-name', 'X-\xe9: 1', 'X-A:\x01', '"q": 1'),
  // obs-fold: a continuation line (its own line in the list).
  fc.constantFrom(' folded', '\tfolded', '  Content-Length: 5', ' chunked'),
);
const lineEndArb = fc.oneof({ weight: 30, arbitrary: fc.constant(CRLF) }, { weight: 1, arbitrary: fc.constantFrom('\n', '\r\r\n', '\r', ' \r\n') });
const fieldArb: fc.Arbitrary<Field> = fc.record({
  text: fc.oneof({ weight: 8, arbitrary: plainFieldArb }, { weight: 1, arbitrary: mutatedFieldArb }),
  end: lineEndArb,
});

/** A chunked body: chunks (sizes right or wrong, extensions), the last chunk, trailers. */
const chunkArb = fc.record({
  data: fc.constantFrom('a', 'hello', 'x'.repeat(17), '0\r\n\r\n', 'GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n'),
  sizeMut: fc.oneof(
    { weight: 10, arbitrary: fc.constant('') },
    { weight: 2, arbitrary: fc.constantFrom('upper', 'zeros', 'plus1', 'minus1', 'ws', 'bad', 'huge', 'neg', 'prefix0x', 'empty') },
  ),
  ext: fc.oneof({ weight: 6, arbitrary: fc.constant('') }, { weight: 2, arbitrary: fc.constantFrom(';a=b', ';a', ';a="q"', ' ;a', ';a=b c', ';\x01', '; a = b') }),
  end: fc.oneof({ weight: 12, arbitrary: fc.constant(CRLF) }, { weight: 1, arbitrary: fc.constantFrom('\n', '\r', '') }),
});
function sizeText(n: number, mut: string): string {
  const h = n.toString(16);
  switch (mut) {
    case 'upper':
      return h.toUpperCase();
    case 'zeros':
      return '000' + h;
    case 'plus1':
      return (n + 1).toString(16);
    case 'minus1':
      return (n - 1).toString(16);
    case 'ws':
      return h + ' ';
    case 'bad':
      return 'z' + h;
    case 'huge':
      return 'fffffffffffffffff' + h;
    case 'neg':
      return '-' + h;
    case 'prefix0x':
      return '0x' + h;
    case 'empty':
      return '';
    default:
      return h;
  }
}
const chunkedBodyArb = fc
  .record({
    chunks: fc.array(chunkArb, { maxLength: 3 }),
    lastExt: fc.constantFrom('', '', ';x=y', '00', ' '),
    trailers: fc.array(fc.constantFrom('X-T: 1', 'Content-Length: 5', 'Transfer-Encoding: chunked', 'Bad Trailer', 'X-T: a\x01'), { maxLength: 2 }),
    finalEnd: fc.oneof({ weight: 10, arbitrary: fc.constant(CRLF) }, { weight: 1, arbitrary: fc.constantFrom('\n', '', 'garbage') }),
  })
  .map(({ chunks, lastExt, trailers, finalEnd }) => {
    let s = '';
    for (const c of chunks) s += sizeText(c.data.length, c.sizeMut) + c.ext + CRLF + c.data + c.end;
    s += '0' + lastExt + CRLF;
    for (const t of trailers) s += t + CRLF;
    return s + finalEnd;
  });

const plainBodyArb = fc.constantFrom('', 'a', 'hello', '{"a":1}', 'GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n', '0\r\n\r\n');

/** The framing fields and the body. */
const framingArb: fc.Arbitrary<{ fields: string[]; body: string }> = fc.oneof(
  { weight: 3, arbitrary: fc.constant<{ fields: string[]; body: string }>({ fields: [], body: '' }) },
  {
    weight: 4,
    arbitrary: fc.record({ body: plainBodyArb, short: fc.boolean() }).map(({ body, short }) => ({
      fields: [`Content-Length: ${body.length}`],
      body: short && body.length > 0 ? body.slice(0, -1) : body,
    })),
  },
  {
    weight: 4,
    arbitrary: fc
      .record({
        body: plainBodyArb,
        variant: fc.constantFrom('dupEqual', 'dupUnequal', 'zeros', 'plus', 'spaces', 'hex', 'huge', 'unsafe', 'empty', 'list', 'neg', 'tab', 'over'),
      })
      .map(({ body, variant }) => {
        const n = body.length;
        const v: Record<string, string[]> = {
          dupEqual: [`Content-Length: ${n}`, `Content-Length: ${n}`],
          dupUnequal: [`Content-Length: ${n}`, `Content-Length: ${n + 1}`],
          zeros: [`Content-Length: 00${n}`],
          plus: [`Content-Length: +${n}`],
          spaces: [`Content-Length:    ${n}   `],
          hex: [`Content-Length: 0x${n.toString(16)}`],
          huge: ['Content-Length: 99999999999999999999999'],
          unsafe: ['Content-Length: 9007199254740993'],
          empty: ['Content-Length: '],
          list: [`Content-Length: ${n}, ${n}`],
          neg: [`Content-Length: -${n}`],
          tab: [`Content-Length:\t${n}`],
          over: ['Content-Length: 40000000'],
        };
        return { fields: v[variant]!, body };
      }),
  },
  {
    weight: 6,
    arbitrary: fc
      .record({
        body: chunkedBodyArb,
        te: fc.constantFrom(
          ['Transfer-Encoding: chunked'],
          ['Transfer-Encoding: chunked'],
          ['Transfer-Encoding: Chunked'],
          ['Transfer-Encoding: chunked, chunked'],
          ['Transfer-Encoding: gzip, chunked'],
          ['Transfer-Encoding: chunked, gzip'],
          ['Transfer-Encoding: gzip'],
          ['Transfer-Encoding: gzip', 'Transfer-Encoding: chunked'],
          ['Transfer-Encoding: chunked', 'Transfer-Encoding: chunked'],
          ['Transfer-Encoding:  chunked '],
          ['Transfer-Encoding: xchunked'],
          ['Transfer-Encoding: identity'],
          ['Transfer-Encoding: chunked', 'Content-Length: 3'],
          ['Content-Length: 3', 'Transfer-Encoding: chunked'],
        ),
      })
      .map(({ body, te }) => ({ fields: [...te], body })),
  },
);

interface Message {
  line: string;
  lineEnd: string;
  fields: Field[];
  framingAt: number;
  framing: { fields: string[]; body: string };
  hostFirst: boolean;
  noHost: boolean;
}

const messageArb: fc.Arbitrary<Message> = fc.record({
  line: fc.tuple(methodArb, sepArb, targetArb, sepArb, versionArb).map(([m, s1, t, s2, v]) => m + s1 + t + s2 + v),
  lineEnd: lineEndArb,
  fields: fc.array(fieldArb, { maxLength: 4 }),
  framingAt: fc.nat(4),
  framing: framingArb,
  hostFirst: fc.boolean(),
  noHost: fc.integer({ min: 0, max: 9 }).map((n) => n === 0),
});

function render(m: Message): string {
  const fields: Field[] = [...m.fields];
  const framing = m.framing.fields.map((text) => ({ text, end: CRLF }));
  fields.splice(Math.min(m.framingAt, fields.length), 0, ...framing);
  if (!m.noHost) fields.splice(m.hostFirst ? 0 : fields.length, 0, { text: 'Host: fuzz.example', end: CRLF });
  let s = m.line + m.lineEnd;
  for (const f of fields) s += f.text + f.end;
  return s + CRLF + m.framing.body;
}

const SECOND = 'GET /second HTTP/1.1\r\nHost: fuzz.example\r\n\r\n';

const caseArb = fc
  .record({
    first: messageArb,
    next: fc.oneof({ weight: 3, arbitrary: fc.constant(null) }, { weight: 2, arbitrary: fc.constant(SECOND) }, { weight: 1, arbitrary: messageArb.map(render) }),
  })
  .map(({ first, next }) => render(first) + (next ?? ''));

// ---------------------------------------------------------------------------------------------
// The comparison.

const FORWARDED_METHODS = new Set(['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS']);
/** Fields a proxy changes: Host (replaced), hop-by-hop, our control header, and the framing. */
const CHANGED = new Set([
  'host',
  ...CONNECTION_FIELDS,
  'transfer-encoding',
  MIRROR_HEADER,
  // Expect is answered by the proxy (node:http sends 100 Continue itself), not forwarded.
  'expect',
  // The body may be re-framed (chunked forwarded with a length, a length re-written): the body
  // bytes are compared instead.
  'content-length',
]);

function comparable(r: Parsed, conn: string | string[] | undefined): Record<string, unknown> {
  const named = new Set(
    (typeof conn === 'string' ? conn : '')
      .toLowerCase()
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  );
  const headers: Record<string, unknown> = {};
  // Whitespace around the commas of a joined value is not meaning (RFC 9110 §5.6.1); node:http
  // and undici differ there for repeated empty fields ("x: " + "x:").
  const norm = (v: unknown) => (typeof v === 'string' ? v.replace(/[ \t]*,[ \t]*/g, ',').trim() : v);
  for (const [k, v] of Object.entries(r.headers)) if (!CHANGED.has(k) && !named.has(k)) headers[k] = norm(v);
  return { method: r.method, url: r.url, headers };
}

const forwardable = (r: Parsed) => FORWARDED_METHODS.has(r.method) && r.url.charCodeAt(0) === 47;
/** The request ends the connection (HTTP/1.0 without keep-alive, or Connection: close). */
function endsConnection(r: Parsed): boolean {
  const c = String(r.headers.connection ?? '').toLowerCase().split(',').map((s) => s.trim());
  if (c.includes('close')) return true;
  return r.version === '1.0' && !c.includes('keep-alive');
}

function show(b: Buffer): string {
  return JSON.stringify(b.toString('latin1'));
}

interface Outcome {
  sent: string;
  reference: Parsed[];
  referenceText: string;
  forwardedBytes: Buffer[];
  forwarded: Parsed[];
  clientText: string;
}

/** Why forwarded request `got` cannot be llhttp's request `want`, or null when it can. */
function mismatch(got: Parsed, want: Parsed): string | null {
  const a = comparable(got, got.headers.connection);
  const b = comparable(want, want.headers.connection);
  try {
    assert.deepStrictEqual(a, b);
  } catch {
    return `forwarded ${JSON.stringify(a)} vs llhttp ${JSON.stringify(b)}`;
  }
  if (got.complete && !want.complete) return `forwarded complete (body ${show(got.body)}), llhttp never completed it (body so far ${show(want.body)})`;
  if (got.complete ? !got.body.equals(want.body) : !want.body.subarray(0, got.body.length).equals(got.body))
    return `body: forwarded ${show(got.body)}${got.complete ? '' : ' (incomplete)'}, llhttp ${show(want.body)}`;
  return null;
}

/** Property (1) and (2): returns a description of the violation, or null. */
function judge(o: Outcome): string | null {
  // (1) Every forwarded request is one llhttp read from S (the proxy may answer some itself —
  // 404 for what it does not forward, 413, an error — so a subset). Order is not compared here
  // (requests may go over different upstream connections); its own test below checks it.
  const expected = o.reference.filter(forwardable);
  const f = o.forwarded;
  const used = new Set<number>();
  for (let i = 0; i < f.length; i++) {
    let first: string | null = null;
    let j = 0;
    for (; j < expected.length; j++) {
      if (used.has(j)) continue;
      const why = mismatch(f[i]!, expected[j]!);
      if (why === null) break;
      first ??= why;
    }
    if (j === expected.length) return `forwarded request ${i} is none that llhttp read from S (${expected.length} forwardable): ${first ?? 'nothing left'}`;
    used.add(j);
  }
  // (2) llhttp accepted all of S: everything it read is forwarded, complete and equal.
  // (A request without Host is judged for (1) only: node:http, also the proxy's fallback, refuses it.)
  // (A pipelined CONNECT makes node:http drop the connection, racing the requests before it.)
  const rejected = /(^|\n)CONNECT /.test(o.sent) || o.referenceText.includes(' 400 ') || o.reference.some((r) => !r.complete);
  if (!rejected) {
    const must: Parsed[] = [];
    for (const r of o.reference) {
      if (forwardable(r)) must.push(r);
      if (endsConnection(r) || String(r.headers['content-length'] ?? '') === '40000000') break;
    }
    if (f.length < must.length) return `llhttp accepted S as ${o.reference.length} requests (${must.length} to forward) but only ${f.length} reached the upstream`;
    for (let i = 0; i < must.length; i++) {
      const k = f.findIndex((g) => g.complete && mismatch(g, must[i]!) === null);
      if (k < 0) return `request ${i} (${must[i]!.method} ${must[i]!.url}) was not forwarded complete and equal`;
    }
  }
  return null;
}

// ---------------------------------------------------------------------------------------------

let lp: StartedLogprobe;
let up: RawUpstream;
let baseline: http.Server;
let ref: RefServer;
let proxyPort: number;
let caseId = 0;

before(async () => {
  ref = await startRef();
  up = await startRawUpstream();
  baseline = http.createServer((_req, res) => res.end('{}'));
  await new Promise<void>((r) => baseline.listen(0, '127.0.0.1', r));
  lp = await startLogprobe(
    {
      candidate: { url: up.url },
      baseline: { url: `http://127.0.0.1:${(baseline.address() as net.AddressInfo).port}` },
      mirror: { sampleRate: 0 },
    },
    { level: 'fatal' },
  );
  proxyPort = Number(new URL(lp.proxyUrl).port);
});

after(async () => {
  await lp?.close();
  await up?.close();
  baseline?.closeAllConnections();
  await new Promise<void>((r) => (baseline ? baseline.close(() => r()) : r()));
  for (const r of [ref]) {
    r?.server.closeAllConnections();
    await new Promise<void>((res) => (r ? r.server.close(() => res()) : res()));
  }
});

const countResponses = (t: string) => t.split(/HTTP\/1\.[01] \d\d\d /).length - 1;

/** Runs one case: S through the proxy, S into llhttp, the forwarded bytes into llhttp. */
async function runCase(sent: string): Promise<Outcome> {
  const bytes = Buffer.from(sent, 'latin1');
  const reference = await refParse(ref, bytes);
  const id = ++caseId;
  up.current.caseId = id;
  const answered = reference.reqs.filter((r) => r.complete).length;
  const client = await exchange(proxyPort, bytes, {
    quietMs: 40,
    maxMs: 1500,
    activity: () => up.current.lastActivity,
    // Every request llhttp completed has an answer: only a short wait for stragglers.
    expect: (t) => answered > 0 && countResponses(t) >= answered && performance.now() - up.current.lastActivity > 10,
  });
  await sleep(5);
  up.current.caseId = -1;
  const forwardedBytes = bytesOfCase(up, id);
  up.segments.length = 0;
  const forwarded: Parsed[] = [];
  for (const b of forwardedBytes) forwarded.push(...(await refParse(ref, b)).reqs);
  return { sent, reference: reference.reqs, referenceText: reference.text, forwardedBytes, forwarded, clientText: client.text };
}

/** Property (3): a plain GET through the proxy works. */
async function healthy(): Promise<boolean> {
  const r = await exchange(proxyPort, Buffer.from('GET /health-probe HTTP/1.1\r\nHost: x\r\n\r\n'), {
    quietMs: 2000,
    maxMs: 3000,
    expect: (t) => t.endsWith('\r\n\r\nok'),
  });
  up.segments.length = 0;
  return /^HTTP\/1\.1 200 /.test(r.text) && r.text.endsWith('ok');
}

/**
 * Known discrepancies, excluded from the property (each has its own todo test below). Returns
 * a label when S belongs to such a class.
 */
function knownClass(_sent: string): string | null {
  // None left: Expect, a missing Host, repeated Content-Length and repeated Connection fields,
  // found here, are fixed (their tests below).
  return null;
}

function report(o: Outcome, why: string): string {
  return [
    why,
    `S = ${JSON.stringify(o.sent)}`,
    `llhttp read: ${JSON.stringify(o.reference.map((r) => ({ ...r, body: r.body.toString('latin1') })))}`,
    `llhttp answered: ${JSON.stringify(o.referenceText.slice(0, 200))}`,
    `upstream got: ${JSON.stringify(o.forwardedBytes.map((b) => b.toString('latin1')))}`,
    `client got: ${JSON.stringify(o.clientText.slice(0, 300))}`,
  ].join('\n');
}

test('differential: what the fast path forwards is what llhttp reads, no more (no smuggling)', { timeout: 120_000 }, async () => {
  const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
  const numRuns = Number(process.env.FUZZ_RUNS ?? 200);
  try {
    await fc.assert(
      fc.asyncProperty(caseArb, async (sent) => {
        if (knownClass(sent) !== null) return;
        const o = await runCase(sent);
        const why = judge(o);
        if (why !== null) throw new Error(report(o, why));
        if (!(await healthy())) throw new Error(report(o, 'the proxy no longer answers a plain GET'));
      }),
      { seed, numRuns, includeErrorInReport: true, interruptAfterTimeLimit: 50_000 },
    );
  } catch (err) {
    (err as Error).message = `seed ${seed} (FUZZ_SEED=${seed} to replay)\n${(err as Error).message}`;
    throw err;
  }
});

// ---------------------------------------------------------------------------------------------
// Discrepancies the property found, one reproducer each (excluded from the property above).

const pathsOf = (o: Outcome) => o.forwarded.map((r) => `${r.method} ${r.url}`);

test(
  'Expect: 100-continue requests are forwarded',
  {},
  async () => {
    const o = await runCase('POST /a HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\na');
    assert.equal(o.reference.length, 1);
    assert.deepEqual(pathsOf(o), ['POST /a'], o.clientText);
  },
);

test(
  'an HTTP/1.1 request without Host is refused (400), as node:http does',
  {},
  async () => {
    const o = await runCase('GET / HTTP/1.1\r\n\r\n');
    assert.equal(o.reference.length, 0, 'node:http refuses it');
    assert.deepEqual(pathsOf(o), [], `forwarded: ${JSON.stringify(o.forwardedBytes.map((b) => b.toString('latin1')))}`);
    assert.match(o.clientText, /^HTTP\/1\.1 400 /);
  },
);

test(
  'repeated equal Content-Length fields are refused, as llhttp does',
  {},
  async () => {
    const o = await runCase('POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na');
    assert.equal(o.reference.length, 0, 'llhttp refuses it');
    assert.deepEqual(o.forwardedBytes.map((b) => b.toString('latin1')), [], 'nothing forwarded');
  },
);

test(
  'a chunk extension llhttp refuses is not forwarded, nor the request pipelined after it',
  {},

  async () => {
    const o = await runCase('HEAD / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;a=b c\r\na\r\n0\r\n\r\nGET /second HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.ok(o.referenceText.includes(' 400 '), 'llhttp refuses it');
    assert.deepEqual(o.forwardedBytes.map((b) => b.toString('latin1')), [], 'nothing forwarded');
  },
);

test(
  'pipelined requests handed to node:http reach the upstream in order',
  {},
  async () => {
    const o = await runCase('GET / HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\naGET /second HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.deepEqual(pathsOf(o), ['GET /', 'GET /second']);
  },
);

test(
  'fields named in a repeated Connection field are not forwarded',
  {},
  async () => {
    const o = await runCase('GET /a HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nConnection: x-secret\r\nX-Secret: hop\r\n\r\n');
    assert.equal(o.forwarded.length, 1);
    assert.equal(o.forwarded[0]!.headers['x-secret'], undefined, o.forwardedBytes[0]?.toString('latin1'));
  },
);

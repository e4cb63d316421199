/**
 * The streaming lane's upstream, an LLM-shaped OpenAI-compatible server in its own process:
 * `POST /v1/chat/completions` with `"stream": true` is answered by an SSE stream of `--chunks`
 * chat-completion chunks (OpenAI chunk shape, ~200 bytes each) `--gap-ms` apart, the first at
 * once, then `data: [DONE]`; any other chat request (the mirror's `stream: false` copy) by a
 * chat completion with `choices[0].logprobs.content[]` (token, logprob, bytes, top_logprobs),
 * after the time the same tokens would take to stream (`--json-delay-ms`, default chunks × gap).
 *
 *   node --import tsx bench/streams-upstream.ts [--port N] [--chunks 64] [--gap-ms 20] [--json-delay-ms MS] [--keep-alive-ms 10000]
 *     [--refuse-pct P] [--max-requests N] [--expect-out FILE]
 *
 * `--keep-alive-ms`: idle keep-alive connections are closed after this long (node's keepAliveTimeout,
 * announced in `Keep-Alive: timeout=…`, so clients close theirs first).
 *
 * Faults, for the fault soak (bench/soak-faults.ts): `--refuse-pct P` destroys P % of the
 * connections it accepts at once, before reading anything (every (100 / P)-th one: the 100th,
 * 200th … at 1 %), counted as `refused`; `--max-requests N` closes a connection after its N-th
 * answer (`Connection: close`, node's maxRequestsPerSocket), so a busy client keeps opening new
 * ones and meets the refusals all along the run. `--expect-out FILE` writes the exact body
 * of every stream (the SSE events as a client reads them, without the HTTP chunk framing), for
 * a load generator that checks each stream byte for byte. SIGUSR2 prints `stats {…}` (the
 * counters of `GET /__stats`) on stdout: a way to read them that opens no connection.
 *
 * One shared ticker (every ~1 ms) writes every chunk that is due: stream k's chunk i is due at
 * start + i × gap on an absolute schedule (no drift), kept in 1-ms buckets, so 5,000 live
 * streams cost one timer, not 5,000. It counts what the bench needs per run (reset by
 * `POST /__reset`, read by `GET /__stats`): connections accepted, split by the kind of their
 * first request (stream / json; the bench's own control requests are not counted), connections
 * open at once at the peak, streams live at the peak, and how late chunks went out (its own
 * lateness: the proof that the upstream is not the bottleneck).
 */
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { arg } from './lib/args.js';

const CHUNKS = Number(arg('--chunks', '64'));
const GAP = Number(arg('--gap-ms', '20'));
const JSON_DELAY = arg('--json-delay-ms', '');
const KEEP_ALIVE_MS = Number(arg('--keep-alive-ms', '10000'));
const REFUSE_PCT = Number(arg('--refuse-pct', '0'));
const MAX_REQUESTS = Number(arg('--max-requests', '0'));
const EXPECT_OUT = arg('--expect-out', '');

// ---------------------------------------------------------------------------------------------
// The bodies: built once, the same bytes for every stream.

const WORDS = [
  'The',
  ' proxy',
  ' forwards',
  ' each',
  ' token',
  ' as',
  ' soon',
  ' as',
  ' the',
  ' engine',
  ' emits',
  ' it',
  ',',
  ' and',
  ' the',
  ' client',
];
const token = (i: number) => WORDS[i % WORDS.length] as string;
const META =
  '"id":"chatcmpl-bench0000000000000000000000","object":"chat.completion.chunk","created":1764547200,"model":"bench-llm-8b-instruct","system_fingerprint":"fp_bench_0001"';
function chunk(i: number): Buffer {
  let choice: string;
  if (i === 0)
    choice =
      '{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}';
  else if (i === CHUNKS - 1) choice = '{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}';
  else choice = `{"index":0,"delta":{"content":${JSON.stringify(token(i))}},"logprobs":null,"finish_reason":null}`;
  return Buffer.from(`data: {${META},"choices":[${choice}]}\n\n`);
}
/**
 * Each event pre-framed as one HTTP/1.1 chunk (`<hex size>\r\n<event>\r\n`) and written
 * straight to the socket once the head is out: one buffer, one write per chunk, instead of
 * node:http's four-part writev per res.write (the kernel's loopback send is then most of the
 * upstream's cost). The last chunk carries `data: [DONE]` too; res.end() writes the
 * terminating `0\r\n\r\n` and hands the connection back to node:http for the next request.
 */
const frame = (b: Buffer) => Buffer.concat([Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from('\r\n')]);
const DONE = Buffer.from('data: [DONE]\n\n');
const EVENTS = Array.from({ length: CHUNKS }, (_, i) =>
  frame(i === CHUNKS - 1 ? Buffer.concat([chunk(i), DONE]) : chunk(i)),
);
if (EXPECT_OUT !== '')
  writeFileSync(EXPECT_OUT, Buffer.concat([...Array.from({ length: CHUNKS }, (_, i) => chunk(i)), DONE]));
const SSE_HEADERS = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache',
  'transfer-encoding': 'chunked',
};

const bytes = (s: string) => `[${[...Buffer.from(s)].join(',')}]`;
const jsonCache = new Map<number, Buffer>();
/** The non-streaming answer for `n` tokens, with logprobs (top 5): identical on candidate and baseline. */
function jsonBody(n: number): Buffer {
  let b = jsonCache.get(n);
  if (b) return b;
  const items: string[] = [];
  let text = '';
  for (let i = 1; i <= n; i++) {
    const t = token(i);
    text += t;
    const lp = -Number((0.05 + (i % 7) * 0.01).toFixed(4));
    const tops = [`{"token":${JSON.stringify(t)},"logprob":${lp},"bytes":${bytes(t)}}`];
    for (let k = 1; k < 5; k++) {
      const alt = token(i + k * 3);
      tops.push(
        `{"token":${JSON.stringify(`${alt}#${k}`)},"logprob":${(lp - 1.5 * k).toFixed(4)},"bytes":${bytes(`${alt}#${k}`)}}`,
      );
    }
    items.push(`{"token":${JSON.stringify(t)},"logprob":${lp},"bytes":${bytes(t)},"top_logprobs":[${tops.join(',')}]}`);
  }
  b = Buffer.from(
    '{"id":"chatcmpl-bench-json","object":"chat.completion","created":1764547200,"model":"bench-llm-8b-instruct",' +
      `"choices":[{"index":0,"message":{"role":"assistant","content":${JSON.stringify(text)}},"logprobs":{"content":[${items.join(',')}],"refusal":null},"finish_reason":"length"}],` +
      `"usage":{"prompt_tokens":12,"completion_tokens":${n},"total_tokens":${12 + n}},"system_fingerprint":"fp_bench_0001"}`,
  );
  jsonCache.set(n, b);
  return b;
}

// ---------------------------------------------------------------------------------------------
// Counters.

const C = {
  /** Connections accepted since the reset whose first request was a stream / a non-streaming request. */
  acceptedStream: 0,
  acceptedJson: 0,
  open: 0,
  peakOpen: 0,
  streamsStarted: 0,
  streamsFinished: 0,
  streamsAborted: 0,
  live: 0,
  peakLive: 0,
  jsonRequests: 0,
  chunksWritten: 0,
  /** Connections destroyed at once by `--refuse-pct` (since the start: never reset). */
  refused: 0,
  /** Connections accepted since the start (the refusals' ordinals). */
  acceptedTotal: 0,
};
/** Lateness of chunk writes against their schedule, in 0.1-ms bins up to 10 s. */
const LATE_BINS = 100_000;
let late = new Uint32Array(LATE_BINS);
let lateMax = 0;
let lateCount = 0;

function resetCounters(): void {
  C.acceptedStream = 0;
  C.acceptedJson = 0;
  C.peakOpen = C.open;
  C.streamsStarted = 0;
  C.streamsFinished = 0;
  C.streamsAborted = 0;
  C.peakLive = C.live;
  C.jsonRequests = 0;
  C.chunksWritten = 0;
  late = new Uint32Array(LATE_BINS);
  lateMax = 0;
  lateCount = 0;
}

function latePercentile(p: number): number {
  if (lateCount === 0) return 0;
  const want = Math.ceil((p / 100) * lateCount);
  let seen = 0;
  for (let i = 0; i < LATE_BINS; i++) {
    seen += late[i] as number;
    if (seen >= want) return i / 10;
  }
  return lateMax;
}

function stats() {
  return {
    ...C,
    lateMs: {
      p50: latePercentile(50),
      p99: latePercentile(99),
      max: Math.round(lateMax * 100) / 100,
      count: lateCount,
    },
    memoryKB: Math.round(process.memoryUsage().rss / 1024),
  };
}

// ---------------------------------------------------------------------------------------------
// The ticker.

interface Stream {
  res: http.ServerResponse;
  sock: Socket;
  /** The next chunk to write. */
  i: number;
  /** When it is due (performance.now() ms). */
  due: number;
}

const buckets = new Map<number, Stream[]>();
let cursor = Math.floor(performance.now());

function schedule(s: Stream): void {
  const k = Math.ceil(s.due);
  const b = buckets.get(k);
  if (b) b.push(s);
  else buckets.set(k, [s]);
}

function fire(s: Stream, now: number): void {
  if (s.sock.destroyed || s.res.destroyed) {
    C.streamsAborted++;
    C.live--;
    return;
  }
  const lateness = Math.max(0, now - s.due);
  late[Math.min(LATE_BINS - 1, Math.floor(lateness * 10))]!++;
  lateCount++;
  if (lateness > lateMax) lateMax = lateness;
  C.chunksWritten++;
  s.sock.write(EVENTS[s.i] as Buffer);
  if (s.i === CHUNKS - 1) {
    s.res.end();
    C.streamsFinished++;
    C.live--;
    return;
  }
  s.i++;
  s.due += GAP;
  schedule(s);
}

function tick(): void {
  const now = performance.now();
  const until = Math.floor(now);
  for (; cursor <= until; cursor++) {
    const b = buckets.get(cursor);
    if (b === undefined) continue;
    buckets.delete(cursor);
    for (const s of b) fire(s, now);
  }
}
setInterval(tick, 1);

// ---------------------------------------------------------------------------------------------
// The server.

const kKind = Symbol('kind');
type Sock = Socket & { [kKind]?: 'stream' | 'json' | 'control' };

function classify(sock: Sock, kind: 'stream' | 'json' | 'control'): void {
  if (sock[kKind] !== undefined) return;
  sock[kKind] = kind;
  if (kind === 'stream') C.acceptedStream++;
  else if (kind === 'json') C.acceptedJson++;
}

const server = http.createServer(
  { keepAliveTimeout: KEEP_ALIVE_MS, requestTimeout: 0, headersTimeout: 60_000 },
  (req, res) => {
    const sock = req.socket as Sock;
    if (req.url?.startsWith('/__')) {
      classify(sock, 'control');
      req.resume();
      req.on('end', () => {
        if (req.url === '/__reset' && req.method === 'POST') resetCounters();
        const body = JSON.stringify(stats());
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          connection: 'close',
        });
        res.end(body);
      });
      return;
    }
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      let body: { stream?: unknown; max_tokens?: unknown; max_completion_tokens?: unknown } = {};
      try {
        body = JSON.parse(Buffer.concat(parts).toString('utf8')) as typeof body;
      } catch {
        /* not JSON: answered as a non-streaming request */
      }
      if (req.method === 'POST' && body.stream === true) {
        classify(sock, 'stream');
        C.streamsStarted++;
        C.live++;
        if (C.live > C.peakLive) C.peakLive = C.live;
        // The head and the first chunk in one segment.
        sock.cork();
        res.writeHead(200, SSE_HEADERS);
        res.flushHeaders();
        const s: Stream = { res, sock, i: 0, due: performance.now() };
        fire(s, s.due);
        sock.uncork();
        return;
      }
      classify(sock, 'json');
      C.jsonRequests++;
      const asked = Number(body.max_tokens ?? body.max_completion_tokens ?? CHUNKS);
      const n = Math.max(1, Math.min(CHUNKS, Number.isFinite(asked) ? Math.floor(asked) : CHUNKS));
      const b = jsonBody(n);
      const send = () => {
        if (res.destroyed) return;
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': b.length });
        res.end(b);
      };
      const delay = JSON_DELAY === '' ? n * GAP : Number(JSON_DELAY);
      if (delay > 0) setTimeout(send, delay);
      else send();
    });
  },
);
if (MAX_REQUESTS > 0) server.maxRequestsPerSocket = MAX_REQUESTS;
server.on('connection', (sock: Socket) => {
  const k = ++C.acceptedTotal;
  if (REFUSE_PCT > 0 && Math.floor((k * REFUSE_PCT) / 100) > Math.floor(((k - 1) * REFUSE_PCT) / 100)) {
    C.refused++;
    sock.destroy();
    return;
  }
  C.open++;
  if (C.open > C.peakOpen) C.peakOpen = C.open;
  sock.once('close', () => C.open--);
});
server.listen({ port: Number(arg('--port', '0')), host: '127.0.0.1', backlog: 8192 }, () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`streams upstream listening on http://127.0.0.1:${port}\n`);
});
process.on('SIGTERM', () => process.exit(0));
process.on('SIGUSR2', () => process.stdout.write(`stats ${JSON.stringify(stats())}\n`));

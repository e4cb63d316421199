/**
 * The streaming lane's load generator, a process of its own: `clients` concurrent clients, each
 * doing `streams` SSE chat completions one after the other on its own keep-alive connection
 * (an undici Client each: one connection per client, no pool and so no cap). The connections
 * are opened first (at most 256 handshakes in flight, so the listen backlog does not overflow),
 * then the clients start their first stream evenly over `rampMs`: TTFB is that of a request on
 * an open keep-alive connection, not of 5,000 TCP handshakes at once.
 * It prints `load ready`, waits for SIGUSR2 (so the bench reads the targets' CPU counters at the
 * start of the load, not of node's start-up), runs, writes its result (JSON) to `out`, exits.
 *
 *   node --import tsx bench/streams-load.ts '{"url":…,"clients":1000,"streams":3,"chunks":64,"gapMs":20,"rampMs":200,"deadlineMs":120000,"out":"FILE"}'
 *
 * Per stream: TTFB (dispatch → first body byte; also apart for each client's first stream and for
 * the others, the kept-alive ones), and for chunks 2…64 the gap to the previous
 * chunk as seen here minus `gapMs` (the added inter-chunk delay; events that arrive together in
 * one read get the same time). A stream is cut when it errors, answers non-2xx, or ends with
 * fewer than `chunks` chunks or without `data: [DONE]`.
 *
 * For the fault soak (bench/soak-faults.ts): `durationMs` makes every client go on starting
 * streams until that long after the start (instead of `streams` each; the added-delay figures
 * are then not kept); `expect` names a file with the exact body every stream must carry
 * (bench/streams-upstream.ts `--expect-out`): each 2xx stream's bytes are compared with it as
 * they come, and a stream that differs anywhere, or ends complete but longer or shorter, is
 * `altered` (counted apart from `cut`: a cut stream whose bytes so far are a prefix is only cut);
 * `progressMs` prints a `progress {…}` line that often. The message of a non-2xx answer
 * (the OpenAI envelope's `error.message`) is counted by status in `statusMessages`.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Client, type Dispatcher } from 'undici';

export interface LoadSpec {
  url: string;
  clients: number;
  streams: number;
  chunks: number;
  gapMs: number;
  rampMs: number;
  deadlineMs: number;
  out: string;
  headers?: Record<string, string>;
  /** Clients start streams until this long after the start (then `streams` is not used). */
  durationMs?: number;
  /** A file with the exact body of every stream: each is compared with it byte for byte. */
  expect?: string;
  /** Print a `progress {…}` line on stdout this often. */
  progressMs?: number;
}

export interface Pcts {
  p50: number;
  p99: number;
  max: number;
  count: number;
}

export interface LoadResult {
  clients: number;
  planned: number;
  completed: number;
  cut: number;
  /** Why streams were cut: `error:<code or message>`, `status:<n>`, `short:<chunks seen>`, `no-done`, `deadline`. */
  cutReasons: Record<string, number>;
  /** Streams whose bytes differ from `expect` (0 without it). */
  altered: number;
  /** Non-2xx answers by `<status> <error.message>` (at most 50 distinct; the rest as `<status> …`). */
  statusMessages: Record<string, number>;
  /** ms. */
  ttfb: Pcts;
  /** TTFB of each client's first stream only (the first request on its connection), ms. */
  ttfbFirst: Pcts;
  /**
   * TTFB of the other streams (the kept-alive ones, each started when its client's previous
   * stream ended), ms: the steady stream path, without the burst of every client's first request
   * at a round's start, which decides the p99 of `ttfb` at a few streams per client.
   */
  ttfbWarm: Pcts;
  /** Added inter-chunk delay, ms (gap − gapMs). */
  added: Pcts;
  /** Streams in flight at the same time, at the peak. */
  peakInFlight: number;
  /** Connections opened (one per client, more if the target closed some). */
  connections: number;
  /** How long opening the clients' connections took, ms (before the first stream). */
  connectMs: number;
  /** Connections that could not be opened (their client's streams are cut). */
  connectErrors: number;
  wallMs: number;
  /** This process's CPU over the run, ms, and its share of one core. */
  cpuMs: number;
  cpuShare: number;
  /** This process's event-loop delay over the run, ms. */
  loopDelay: { p99: number; max: number };
}

const SEP = Buffer.from('\n\n');
const DONE = Buffer.from('data: [DONE]');

function pcts(xs: Float64Array, n: number): Pcts {
  if (n === 0) return { p50: NaN, p99: NaN, max: NaN, count: 0 };
  const s = xs.subarray(0, n).sort();
  const at = (p: number) => s[Math.min(n - 1, Math.max(0, Math.ceil((p / 100) * n) - 1))] as number;
  const r = (x: number) => Math.round(x * 1000) / 1000;
  return { p50: r(at(50)), p99: r(at(99)), max: r(s[n - 1] as number), count: n };
}

/**
 * The accept queue of the listening socket on 127.0.0.1:`port` (connections the kernel has
 * completed and the server has not yet accept()ed): `ss -ltnH` (netlink, filtered in the kernel:
 * cheap even with 20,000 sockets open); null when it cannot tell.
 */
async function acceptQueue(port: number): Promise<number | null> {
  const { execFile } = await import('node:child_process');
  return new Promise((resolve) => {
    execFile('ss', ['-ltnH', `sport = :${port}`], { timeout: 2000 }, (err, stdout) => {
      if (err) return resolve(null);
      // State Recv-Q Send-Q Local Peer: for a LISTEN socket Recv-Q is the accept queue.
      const q = Number(stdout.trim().split(/\s+/)[1]);
      resolve(Number.isFinite(q) ? q : null);
    });
  });
}

/**
 * Opens `n` TCP connections to the target in batches of `batch`, waiting after each batch until
 * the server has accept()ed nearly all of them. A client's connect completes as soon as the
 * kernel answers the SYN, accepted or not; past the listen backlog (511 by default, nginx's and
 * node's alike) the kernel drops the handshake's last ACK and that connection only comes through
 * after 1 s, 3 s, 7 s … of SYN-ACK retransmission, which would land in its first stream's TTFB.
 * Resolves with the sockets (null where the connect failed).
 */
async function preconnect(host: string, port: number, n: number, batch = 64): Promise<Array<net.Socket | null>> {
  const out: Array<net.Socket | null> = new Array<net.Socket | null>(n).fill(null);
  const one = (i: number) =>
    new Promise<void>((resolve) => {
      const sock = net.connect({ host, port, noDelay: true });
      let settled = false;
      const settle = (ok: boolean) => {
        if (settled) return;
        settled = true;
        sock.removeAllListeners('connect');
        sock.setTimeout(0);
        if (ok) out[i] = sock;
        else sock.destroy();
        resolve();
      };
      sock.once('connect', () => settle(true));
      sock.on('error', () => settle(false));
      sock.setTimeout(30_000, () => settle(false));
    });
  for (let from = 0; from < n; from += batch) {
    await Promise.all(Array.from({ length: Math.min(batch, n - from) }, (_, k) => one(from + k)));
    const end = performance.now() + 5000;
    for (;;) {
      const q = await acceptQueue(port);
      if (q === null || q <= batch / 4 || performance.now() > end) break;
      await new Promise((r) => setTimeout(r, 2));
    }
  }
  // Until the streams begin, a connection the target drops is noticed by undici (it reconnects).
  for (const sk of out) sk?.on('error', () => undefined);
  return out;
}

/** The envelope's `error.message` of a non-2xx body, else its first 120 characters. */
function errorMessage(body: string): string {
  try {
    const m = (JSON.parse(body) as { error?: { message?: unknown } }).error?.message;
    if (typeof m === 'string') return m;
  } catch {
    /* not JSON */
  }
  return body.slice(0, 120);
}

async function run(spec: LoadSpec): Promise<LoadResult> {
  const u = new URL(spec.url);
  const port = Number(u.port || 80);
  const c0 = performance.now();
  const sockets = await preconnect(u.hostname, port, spec.clients);
  const connectMs = Math.round(performance.now() - c0);
  const load = new LoadRun(spec, sockets, connectMs);
  const r = await load.start();
  await Promise.all(load.conns.map((c) => c.destroy().catch(() => undefined)));
  return r;
}

/** One stream's state as its events come. */
interface StreamState {
  start: number;
  first: number;
  last: number;
  chunks: number;
  done: boolean;
  status: number;
  carry: Buffer | null;
  over: boolean;
  /** Bytes compared with `expect` so far; -1 once they differ. */
  off: number;
  errorBody: string;
  firstOfClient: boolean;
}

/** The load: its clients, their streams and the figures they add to. */
class LoadRun {
  readonly u: URL;
  readonly port: number;
  readonly expect: Buffer | null;
  readonly timed: boolean;
  readonly body: Buffer;
  readonly headers: Record<string, string>;
  readonly connectErrors: number;
  planned: number;
  readonly ttfb: Float64Array;
  readonly ttfbFirst: Float64Array;
  readonly ttfbWarm: Float64Array;
  readonly added: Float64Array;
  nTtfb = 0;
  nFirst = 0;
  nWarm = 0;
  nAdded = 0;
  completed = 0;
  cut = 0;
  altered = 0;
  readonly statusMessages: Record<string, number> = {};
  readonly cutReasons: Record<string, number> = {};
  inFlight = 0;
  peakInFlight = 0;
  connections = 0;
  readonly live = new Set<{ abort(): void }>();
  readonly conns: Client[] = [];
  private readonly loop = monitorEventLoopDelay({ resolution: 5 });
  private cpu0 = process.cpuUsage();
  private t0 = 0;
  private clientsDone = 0;
  private finished = false;
  private stopping = false;
  private started = 0;
  private clientIndex = 0;
  private progress: ReturnType<typeof setInterval> | null = null;
  private resolve: (r: LoadResult) => void = () => undefined;

  constructor(
    readonly spec: LoadSpec,
    private readonly sockets: Array<net.Socket | null>,
    private readonly connectMs: number,
  ) {
    this.u = new URL(spec.url);
    this.port = Number(this.u.port || 80);
    this.expect = spec.expect ? readFileSync(spec.expect) : null;
    this.timed = spec.durationMs !== undefined;
    this.connectErrors = sockets.filter((x) => x === null).length;
    this.body = Buffer.from(
      JSON.stringify({
        model: 'bench-llm-8b-instruct',
        messages: [{ role: 'user', content: 'Write a short paragraph about reverse proxies in front of LLM servers.' }],
        max_tokens: spec.chunks,
        stream: true,
      }),
    );
    this.headers = {
      'content-type': 'application/json',
      'content-length': String(this.body.length),
      ...(spec.headers ?? {}),
    };
    this.planned = this.timed ? 0 : spec.clients * spec.streams;
    // Timed: room for the TTFB of every stream a client can do in the time (bounded), no added delays.
    const perClient = this.timed
      ? Math.ceil((spec.durationMs as number) / Math.max(1, spec.chunks * spec.gapMs)) + 2
      : spec.streams;
    this.ttfb = new Float64Array(Math.min(4_000_000, spec.clients * perClient));
    this.ttfbFirst = new Float64Array(spec.clients);
    this.ttfbWarm = new Float64Array(this.ttfb.length);
    this.added = new Float64Array(this.timed ? 0 : this.planned * Math.max(0, spec.chunks - 1));
  }

  /** Runs the load; resolves when every client is done or the deadline cuts the rest. */
  start(): Promise<LoadResult> {
    const { spec } = this;
    this.loop.enable();
    this.cpu0 = process.cpuUsage();
    this.t0 = performance.now();
    return new Promise((resolve) => {
      this.resolve = resolve;
      this.progress = spec.progressMs
        ? setInterval(
            () =>
              process.stdout.write(
                `progress ${JSON.stringify({ t: Math.round(performance.now() - this.t0), completed: this.completed, cut: this.cut, altered: this.altered, inFlight: this.inFlight, connections: this.connections })}\n`,
              ),
            spec.progressMs,
          )
        : null;
      this.ramp();
      setTimeout(() => this.deadline(), spec.deadlineMs).unref();
    });
  }

  /** The ramp: client i starts at i × rampMs / clients. */
  private ramp(): void {
    const { spec } = this;
    const due =
      spec.rampMs <= 0
        ? spec.clients
        : Math.min(spec.clients, Math.floor(((performance.now() - this.t0) / spec.rampMs) * spec.clients) + 1);
    while (this.started < due) {
      this.started++;
      this.client();
    }
    if (this.started < spec.clients) setTimeout(() => this.ramp(), 1);
  }

  /** The deadline: streams in flight are aborted, and those not yet begun count as cut too. */
  private deadline(): void {
    this.stopping = true;
    for (const h of [...this.live]) h.abort();
    const notStarted = this.planned - this.completed - this.cut;
    if (notStarted > 0) {
      this.cut += notStarted;
      this.cutReasons.deadline = (this.cutReasons.deadline ?? 0) + notStarted;
    }
    this.finish();
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    if (this.progress) clearInterval(this.progress);
    const { loop, spec } = this;
    loop.disable();
    const wallMs = performance.now() - this.t0;
    const c = process.cpuUsage(this.cpu0);
    const cpuMs = (c.user + c.system) / 1000;
    this.resolve({
      clients: spec.clients,
      planned: this.planned,
      completed: this.completed,
      cut: this.cut,
      cutReasons: this.cutReasons,
      altered: this.altered,
      statusMessages: this.statusMessages,
      ttfb: pcts(this.ttfb, this.nTtfb),
      ttfbFirst: pcts(this.ttfbFirst, this.nFirst),
      ttfbWarm: pcts(this.ttfbWarm, this.nWarm),
      added: pcts(this.added, this.nAdded),
      peakInFlight: this.peakInFlight,
      connections: this.connections,
      connectMs: this.connectMs,
      connectErrors: this.connectErrors,
      wallMs: Math.round(wallMs),
      cpuMs: Math.round(cpuMs),
      cpuShare: Math.round((cpuMs / wallMs) * 1000) / 1000,
      loopDelay: { p99: Math.round(loop.percentile(99) / 1e4) / 100, max: Math.round(loop.max / 1e4) / 100 },
    });
  }

  /** One client: its own connection (the socket opened beforehand), its streams one after the other. */
  private client(): void {
    const { spec, u, port } = this;
    let left = spec.streams;
    let firstDone = false;
    let pre = this.sockets[this.clientIndex++] ?? null;
    // The first connect is the socket opened above; a reconnect (the target closed it) is a new one.
    const connect = (_o: unknown, cb: (err: Error | null, sock: net.Socket | null) => void) => {
      if (pre !== null) {
        const sk = pre;
        pre = null;
        // Asynchronously, as a real connect would call back.
        process.nextTick(cb, null, sk);
        return;
      }
      const sk = net.connect({ host: u.hostname, port, noDelay: true });
      sk.once('connect', () => cb(null, sk));
      sk.once('error', (err) => cb(err, null));
    };
    const conn = new Client(u.origin, {
      pipelining: 1,
      headersTimeout: 60_000,
      bodyTimeout: 30_000,
      keepAliveTimeout: 30_000,
      connect: connect as unknown as Client.Options['connect'],
    });
    conn.on('connect', () => this.connections++);
    this.conns.push(conn);
    const next = () => {
      if (this.finished || this.stopping) return;
      if (this.timed ? performance.now() - this.t0 < (spec.durationMs as number) : left-- > 0) {
        if (this.timed) this.planned++;
        const firstOfClient = !firstDone;
        firstDone = true;
        this.stream(conn, firstOfClient, next);
      } else if (++this.clientsDone === spec.clients) this.finish();
    };
    next();
  }

  /** One stream; calls `next` when it is over, whatever the outcome. */
  private stream(conn: Client, firstOfClient: boolean, next: () => void): void {
    const s: StreamState = {
      start: performance.now(),
      first: -1,
      last: -1,
      chunks: 0,
      done: false,
      status: 0,
      carry: null,
      over: false,
      off: 0,
      errorBody: '',
      firstOfClient,
    };
    let controller: Dispatcher.DispatchController | null = null;
    if (++this.inFlight > this.peakInFlight) this.peakInFlight = this.inFlight;
    const handle = {
      abort: () => {
        if (s.over) return;
        end('deadline');
        controller?.abort(new Error('deadline'));
      },
    };
    this.live.add(handle);
    const end = (reason: string | null) => {
      if (s.over) return;
      s.over = true;
      this.live.delete(handle);
      this.streamEnded(s, reason);
      next();
    };
    const { spec, u } = this;
    conn.dispatch(
      { origin: u.origin, path: u.pathname, method: 'POST', headers: this.headers, body: this.body },
      {
        onRequestStart(c) {
          controller = c;
        },
        onResponseStart(_c, statusCode) {
          s.status = statusCode;
        },
        onResponseData: (_c, data: Buffer) => this.data(s, data),
        onResponseEnd() {
          if (s.status < 200 || s.status >= 300) end(`status:${s.status}`);
          else if (s.chunks < spec.chunks) end(`short:${s.chunks}`);
          else if (!s.done) end('no-done');
          else end(null);
        },
        onResponseError(_c, err: Error & { code?: string }) {
          end(s.status >= 300 ? `status:${s.status}` : `error:${err.code ?? err.message}`);
        },
      },
    );
  }

  /** A stream is over: completed or cut (and why), altered or not, its error message by status. */
  private streamEnded(s: StreamState, reason: string | null): void {
    const { expect, statusMessages } = this;
    this.inFlight--;
    if (reason === null) this.completed++;
    else {
      this.cut++;
      this.cutReasons[reason] = (this.cutReasons[reason] ?? 0) + 1;
    }
    // Complete: every byte of `expect`; cut: a prefix of it.
    if (
      expect !== null &&
      s.status >= 200 &&
      s.status < 300 &&
      (s.off < 0 || (reason === null && s.off !== expect.length))
    )
      this.altered++;
    if (s.status >= 300) {
      const key = `${s.status} ${errorMessage(s.errorBody)}`;
      const k = key in statusMessages || Object.keys(statusMessages).length < 50 ? key : `${s.status} …`;
      statusMessages[k] = (statusMessages[k] ?? 0) + 1;
    }
  }

  /** A read of a stream's body: compared with `expect`, its TTFB and the gaps between its events taken. */
  private data(s: StreamState, data: Buffer): void {
    const now = performance.now();
    const { expect, spec } = this;
    if (s.status >= 300) {
      if (s.errorBody.length < 1024) s.errorBody += data.toString('utf8');
      return;
    }
    if (expect !== null && s.off >= 0) {
      const off = s.off;
      s.off =
        off + data.length <= expect.length && expect.compare(data, 0, data.length, off, off + data.length) === 0
          ? off + data.length
          : -1;
    }
    if (s.first < 0) {
      s.first = now;
      if (this.nTtfb < this.ttfb.length) this.ttfb[this.nTtfb++] = now - s.start;
      if (s.firstOfClient) this.ttfbFirst[this.nFirst++] = now - s.start;
      else if (this.nWarm < this.ttfbWarm.length) this.ttfbWarm[this.nWarm++] = now - s.start;
    }
    let buf = data;
    if (s.carry !== null) {
      buf = Buffer.concat([s.carry, data]);
      s.carry = null;
    }
    let pos = 0;
    for (;;) {
      const i = buf.indexOf(SEP, pos);
      if (i < 0) break;
      if (i - pos >= DONE.length && buf.compare(DONE, 0, DONE.length, pos, pos + DONE.length) === 0) s.done = true;
      else if (i > pos) {
        s.chunks++;
        if (s.last >= 0 && s.chunks <= spec.chunks && this.nAdded < this.added.length)
          this.added[this.nAdded++] = now - s.last - spec.gapMs;
        s.last = now;
      }
      pos = i + 2;
    }
    if (pos < buf.length) s.carry = Buffer.from(buf.subarray(pos));
  }
}

/**
 * Warms this process up before the measured run (JIT, undici's parser) against a local server
 * in this process that streams the same framing without gaps: a cold load generator would add
 * tens of ms to the first streams' TTFB of every run.
 */
async function warmUp(chunks: number): Promise<void> {
  const http = await import('node:http');
  const event = Buffer.from(
    `data: ${JSON.stringify({ id: 'warm', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: ' warm' } }] })}\n\n`,
  );
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let i = 0;
      const more = () => {
        for (let k = 0; k < 8 && i < chunks; k++, i++) res.write(event);
        if (i < chunks) setImmediate(more);
        else res.end('data: [DONE]\n\n');
      };
      more();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await run({
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    clients: 32,
    streams: 3,
    chunks,
    gapMs: 0,
    rampMs: 0,
    deadlineMs: 20_000,
    out: '',
  });
  await new Promise<void>((r) => server.close(() => r()));
}

if (process.argv[1]?.endsWith('streams-load.ts') && process.argv[2]) {
  const spec = JSON.parse(process.argv[2]) as LoadSpec;
  await warmUp(spec.chunks).catch((err: Error) => process.stderr.write(`warm-up failed: ${err.message}\n`));
  process.once('SIGUSR2', () => {
    void run(spec).then((r) => {
      writeFileSync(spec.out, JSON.stringify(r));
      process.stdout.write('load done\n');
      process.exit(0);
    });
  });
  // Keep the process alive until the signal comes.
  const keep = setInterval(() => undefined, 1 << 30);
  process.once('SIGUSR2', () => clearInterval(keep));
  process.stdout.write('load ready\n');
}

import { randomUUID } from 'node:crypto';
import type net from 'node:net';
import type { Server } from 'node:http';
import { PayloadTooLargeError, openAIError } from './errors.js';
import type { ExchangeContext } from './exchange.js';
import { MIRROR_HEADER } from './headers.js';
import {
  BAD_HEAD_BYTES,
  BAD_TARGET_BYTES,
  BODY_CHUNKED,
  BODY_LENGTH,
  BODY_NONE,
  BodyFraming,
  CRLFCRLF,
  DIGITS,
  FIELD_NAME,
  FORWARDED_METHODS,
  IDEMPOTENT_METHODS,
  MAX_HEAD,
  REQ_BODY,
  REQ_CLOSED,
  REQ_IDLE,
  REQ_WAIT,
  REQ_DROP,
  connectionTokens,
  connectionValue,
  hasToken,
  headerFields,
  startsLikeRequest,
} from './raw-head.js';
import { RawPool, UpstreamConn } from './raw-upstream.js';
import { pathOf, routeLabel } from './routes.js';
import { parseMirrorHeader } from './tap.js';

/**
 * The fast path for plain-http candidates: a byte-level HTTP/1.1 forwarder on the sockets of the
 * node:http server. Request heads are parsed here (request line and header lines only), the head
 * is rewritten where a proxy must (Host, hop-by-hop fields, `x-logprobe-mirror`) and sent with the
 * body bytes on a keep-alive upstream socket; the response head is parsed to learn its framing
 * (content-length, chunked — chunk sizes walked, bytes not copied —, close-delimited, no body)
 * and rewritten only to drop hop-by-hop fields; body bytes go through untouched with
 * backpressure in both directions.
 *
 * A request the mirror wants is forwarded the same way; the body buffers it forwarded are kept
 * and handed to the mirror when the response has gone.
 *
 * Anything else (HTTP/1.0, `Expect`, `Upgrade`, a chunked request the mirror wants, a request
 * while closing, a method or target we do not forward, a malformed head) is handed, with the
 * bytes already read, to node:http and the {@link ProxyExchange} path for the rest of that
 * connection.
 */

/** What the fast path shares with the node:http path, plus the candidate's socket address and timeouts. */
export interface RawContext extends Pick<ExchangeContext, 'basePath' | 'limitBytes' | 'limitMB' | 'log' | 'logRequests' | 'metrics' | 'mirror'> {
  upstreamHost: string;
  upstreamHostname: string;
  upstreamPort: number;
  timeoutMs: number;
  connectTimeoutMs: number;
  idleTimeoutMs: number;
}

/** Set on a socket handed to node:http when the mirror already decided to keep the body. */
export const kPresetKeepBody = Symbol('logprobe.presetKeepBody');

const CLIENT_KEEPALIVE_MS = 65_000;
/** How long a connection answered before its request body was read keeps discarding that body. */
const LINGER_MS = 2000;

/** One client connection on the fast path. */
export class ClientConn {
  state = REQ_IDLE;
  buf: Buffer | null = null;
  closeAfter = false;
  handedOff = false;
  // The request in flight.
  method = '';
  url = '';
  requestIdHeader: string | undefined;
  start = 0;
  /** The request body's framing. */
  readonly framing = new BodyFraming();
  up: UpstreamConn | null = null;
  /** The request's head and body parts, when the mirror wants a copy. */
  kept: { head: string; forced: boolean | undefined; parts: Buffer[]; complete: boolean } | null = null;
  /** The whole request as sent upstream, kept while it can still be replayed on a fresh connection. */
  replay: Buffer[] | null = null;
  status = 0;
  headSent = false;
  /** Answered before the request body was read (413): the close lingers. */
  unreadBody = false;
  private readonly onDataBound: (d: Buffer) => void;
  private readonly onCloseBound: () => void;
  readonly onDrainUpstream: () => void;

  constructor(
    readonly sock: net.Socket,
    readonly pool: RawPool,
    readonly frontend: RawFrontend,
  ) {
    sock.setNoDelay(true);
    this.onDataBound = (d) => this.onData(d);
    this.onCloseBound = () => this.onClose();
    this.onDrainUpstream = () => sock.resume();
    sock.on('data', this.onDataBound);
    sock.on('close', this.onCloseBound);
    sock.on('error', noop);
    // A client that ends its side mid-exchange is gone (as with node:http): the upstream is aborted.
    sock.on('end', () => {
      if (this.state === REQ_IDLE || this.state === REQ_CLOSED) sock.end();
      else sock.destroy();
    });
    // The client-side keep-alive timeout (node:http's keepAliveTimeout in the other path).
    sock.setTimeout(CLIENT_KEEPALIVE_MS);
    sock.on('timeout', () => {
      // Idle, or silent in the middle of a request head (node:http would answer 408): closed.
      if (this.idle || (this.state === REQ_IDLE && this.buf !== null)) sock.destroy();
    });
  }

  private onData(d: Buffer): void {
    if (this.state === REQ_CLOSED) return;
    if (this.state === REQ_BODY) {
      this.requestBody(d, 0);
      return;
    }
    if (this.state === REQ_WAIT) {
      // Pipelined: kept until the response has gone.
      this.buf = this.buf ? Buffer.concat([this.buf, d]) : d;
      this.sock.pause();
      return;
    }
    const b = this.buf ? Buffer.concat([this.buf, d]) : d;
    this.buf = null;
    this.parse(b);
  }

  /** Parses the request head at the start of `b`; forwards it, or hands the connection over. */
  private parse(b: Buffer): void {
    const end = b.indexOf(CRLFCRLF);
    if (end < 0) {
      // Not the start of a request line (e.g. a TLS ClientHello), or too long: node:http answers.
      if (b.length > MAX_HEAD || !startsLikeRequest(b)) this.handOff(b);
      else this.buf = b;
      return;
    }
    // The same limit however the head arrived (in one read or trickled).
    if (end > MAX_HEAD) {
      this.handOff(b);
      return;
    }
    if (this.pool.closing) {
      this.handOff(b);
      return;
    }
    const head = b.toString('latin1', 0, end);
    if (BAD_HEAD_BYTES.test(head)) {
      this.handOff(b);
      return;
    }
    let lineEnd = head.indexOf('\r\n');
    if (lineEnd < 0) lineEnd = head.length;
    const sp1 = head.indexOf(' ');
    const sp2 = sp1 < 0 ? -1 : head.indexOf(' ', sp1 + 1);
    if (sp1 <= 0 || sp2 < 0 || sp2 > lineEnd || head.slice(sp2 + 1, lineEnd) !== 'HTTP/1.1') {
      this.handOff(b);
      return;
    }
    const method = head.slice(0, sp1);
    const url = head.slice(sp1 + 1, sp2);
    if (url.charCodeAt(0) !== 47 || !FORWARDED_METHODS.has(method) || BAD_TARGET_BYTES.test(url)) {
      this.handOff(b);
      return;
    }
    const lower = head.toLowerCase();
    let drop: string[] | null = null;
    const connValue = connectionValue(head, lower);
    let clientClose = false;
    if (connValue !== null) {
      drop = connectionTokens(connValue);
      clientClose = hasToken(connValue, 'close');
    }
    let out = `${method} ${this.frontend.ctx.basePath}${url} HTTP/1.1\r\n`;
    let cl = -1;
    let chunked = false;
    let hasHost = false;
    let reqId: string | undefined;
    let mirrorHeader: string | undefined;
    let pos = lineEnd + 2;
    while (pos < head.length) {
      let e = head.indexOf('\r\n', pos);
      if (e < 0) e = head.length;
      const colon = head.indexOf(':', pos);
      if (colon <= pos || colon > e) {
        this.handOff(b);
        return;
      }
      const name = lower.slice(pos, colon);
      if (!FIELD_NAME.test(name)) {
        this.handOff(b); // obsolete folding, whitespace or a control byte in the name: node:http judges
        return;
      }
      switch (name) {
        case 'content-length': {
          const v = head.slice(colon + 1, e).trim();
          const n = Number(v);
          // A repeated Content-Length, even with the same value, is refused by llhttp: node:http answers.
          if (!DIGITS.test(v) || !Number.isSafeInteger(n) || cl >= 0) {
            this.handOff(b);
            return;
          }
          cl = n;
          break;
        }
        case 'transfer-encoding':
          if (chunked || lower.slice(colon + 1, e).trim() !== 'chunked') {
            this.handOff(b);
            return;
          }
          chunked = true;
          break;
        case 'expect':
        case 'upgrade':
          this.handOff(b);
          return;
        case 'host':
          hasHost = true;
          break;
        case 'x-request-id':
          reqId = head.slice(colon + 1, e).trim();
          break;
        case MIRROR_HEADER:
          mirrorHeader = head.slice(colon + 1, e).trim();
          break;
      }
      if (!REQ_DROP.has(name) && (drop === null || !drop.includes(name))) out += head.slice(pos, e) + '\r\n';
      pos = e + 2;
    }
    // Both framings, or an HTTP/1.1 request without Host (node:http answers 400): not ours.
    if ((chunked && cl >= 0) || !hasHost) {
      this.handOff(b);
      return;
    }
    const ctx = this.frontend.ctx;
    const mirror = ctx.mirror;
    let keep = false;
    let forced: boolean | undefined;
    if (mirror) {
      forced = mirrorHeader === undefined ? undefined : parseMirrorHeader(mirrorHeader);
      keep = mirror.wantsBody(method, pathOf(url), forced);
      // A chunked body would have to be decoded for the copy: node:http does that.
      if (keep && chunked) {
        (this.sock as net.Socket & { [kPresetKeepBody]?: boolean })[kPresetKeepBody] = true;
        this.handOff(b);
        return;
      }
    }
    out += `host: ${ctx.upstreamHost}\r\n\r\n`;
    if (this.pool.full()) {
      // Past the cap, the request waits in the undici pool's queue (same cap) instead of opening
      // ever more sockets to the candidate.
      if (keep) (this.sock as net.Socket & { [kPresetKeepBody]?: boolean })[kPresetKeepBody] = true;
      this.handOff(b);
      return;
    }
    this.method = method;
    this.url = url;
    this.requestIdHeader = reqId;
    // The mirror's copy of the body: the very buffers forwarded, no copy until the exchange ends.
    this.kept = keep ? { head, forced, parts: [], complete: cl <= 0 } : null;
    this.start = performance.now();
    this.status = 0;
    this.headSent = false;
    this.closeAfter = clientClose;
    if (cl > ctx.limitBytes) {
      this.state = REQ_WAIT;
      this.closeAfter = true;
      this.unreadBody = true;
      this.fail(new PayloadTooLargeError(ctx.limitMB));
      return;
    }
    const up = this.pool.acquire();
    this.up = up;
    up.attach(this);
    const headBuf = Buffer.from(out, 'latin1');
    const bodyStart = end + 4;
    if (chunked) this.framing.start(BODY_CHUNKED);
    else if (cl > 0) this.framing.start(BODY_LENGTH, cl);
    else this.framing.start(BODY_NONE);
    this.state = REQ_BODY;
    // Only idempotent requests are replayed on a fresh connection after a stale keep-alive socket
    // failed (as nginx does): a POST may have started a generation on an upstream that then died.
    this.replay = IDEMPOTENT_METHODS.has(this.method) ? [headBuf] : null;
    if (this.framing.mode === BODY_NONE) {
      this.state = REQ_WAIT;
      up.sock.write(headBuf);
      if (bodyStart < b.length) this.keepRest(b.subarray(bodyStart));
      return;
    }
    up.sock.cork();
    up.sock.write(headBuf);
    this.requestBody(b, bodyStart);
    up.sock.uncork();
  }

  /** Forwards request body bytes d[from..]; the rest (a pipelined request) is kept. */
  private requestBody(d: Buffer, from: number): void {
    const end = this.framing.scan(d, from);
    if (this.framing.bad) {
      // Broken framing: the upstream exchange goes too (a head still corked is never sent).
      this.abandonUpstream();
      this.sock.destroy();
      return;
    }
    const done = this.framing.done;
    // A chunked body has no announced size: too large once its data passes the limit. The
    // upstream request is abandoned, the client gets a 413.
    if (this.framing.mode === BODY_CHUNKED && this.framing.walker.dataBytes > this.frontend.ctx.limitBytes) {
      this.abandonUpstream();
      this.state = REQ_WAIT;
      this.closeAfter = true;
      this.unreadBody = true;
      this.sock.pause();
      this.fail(new PayloadTooLargeError(this.frontend.ctx.limitMB));
      return;
    }
    const up = this.up;
    if (!up) return;
    const part = from === 0 && end === d.length ? d : d.subarray(from, end);
    let ok = true;
    if (end > from) {
      ok = up.sock.write(part);
      this.kept?.parts.push(part);
      if (this.replay) {
        if (this.replay.length < 8) this.replay.push(part);
        else this.replay = null;
      }
    }
    if (done) {
      this.state = REQ_WAIT;
      if (this.kept) this.kept.complete = true;
      if (end < d.length) this.keepRest(d.subarray(end));
    } else if (!ok) {
      this.sock.pause();
      up.sock.once('drain', this.onDrainUpstream);
    }
  }

  private keepRest(rest: Buffer): void {
    this.buf = this.buf ? Buffer.concat([this.buf, rest]) : rest;
    this.sock.pause();
  }

  responseStarted(status: number): void {
    this.status = status;
    this.headSent = true;
    this.replay = null;
  }

  /** The upstream failed: retried once on a fresh connection when nothing was received yet, else 502/504. */
  upstreamFailed(err: Error & { statusCode?: number; code?: string }, retryable: boolean): void {
    if (retryable && this.replay && this.state === REQ_WAIT && !this.headSent) {
      const parts = this.replay;
      const fresh = new UpstreamConn(this.pool);
      this.up = fresh;
      fresh.attach(this);
      fresh.sock.cork();
      for (const p of parts) fresh.sock.write(p);
      fresh.sock.uncork();
      return;
    }
    this.up = null;
    this.replay = null;
    if (this.headSent || this.sock.destroyed) {
      if (!this.sock.destroyed) this.frontend.ctx.log.warn({ reqId: this.requestId(), err }, 'response terminated with an error with headers already sent');
      this.sock.destroy();
      return;
    }
    this.closeAfter = this.closeAfter || this.state === REQ_BODY;
    this.state = REQ_WAIT;
    this.fail(err);
  }

  /** Answers with an error of our own, in the OpenAI envelope. */
  private fail(err: Error & { statusCode?: number; code?: string }): void {
    const ctx = this.frontend.ctx;
    const status = err.statusCode !== undefined && err.statusCode >= 400 ? err.statusCode : 500;
    if (status >= 500) ctx.log.warn({ reqId: this.requestId(), err }, 'proxy error');
    const payload = JSON.stringify(openAIError(status, err.message, err.code ?? null));
    if (this.pool.closing) this.closeAfter = true;
    const head =
      `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Error'}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(payload)}\r\n` +
      `date: ${new Date().toUTCString()}\r\nconnection: ${this.closeAfter ? 'close' : 'keep-alive'}\r\n\r\n`;
    this.status = status;
    this.headSent = true;
    this.sock.write(head + payload);
    this.responseEnd();
  }

  requestId(): string {
    const h = this.requestIdHeader;
    if (h !== undefined && h !== '') return h;
    return (this.requestIdHeader = randomUUID());
  }

  /** The response has gone to the client (complete, or close-delimited and the upstream closed). */
  responseEnd(): void {
    this.up = null;
    this.replay = null;
    this.account(false);
    if (this.closeAfter || this.state === REQ_BODY) {
      const linger = this.unreadBody || this.state === REQ_BODY;
      this.state = REQ_CLOSED;
      this.buf = null;
      const sock = this.sock;
      if (!linger) {
        sock.end(() => sock.destroy());
        return;
      }
      // Lingering close (as nginx): the client may still be sending the body we answered without
      // reading. Closing now would reset the connection and could lose our answer in its receive
      // buffer; reading and discarding for a while (REQ_CLOSED drops the bytes) lets it read it.
      sock.end();
      if (sock.isPaused()) sock.resume();
      const timer = setTimeout(() => sock.destroy(), LINGER_MS);
      timer.unref();
      sock.once('close', () => clearTimeout(timer));
      return;
    }
    this.state = REQ_IDLE;
    const b = this.buf;
    this.buf = null;
    if (this.sock.isPaused()) this.sock.resume();
    if (b && b.length > 0) this.parse(b);
  }

  private account(aborted: boolean): void {
    const ctx = this.frontend.ctx;
    const seconds = (performance.now() - this.start) / 1000;
    const route = routeLabel(this.url);
    const status = aborted ? 499 : this.status;
    ctx.metrics.observeRequest(route, status, seconds);
    if (ctx.logRequests()) {
      ctx.log.info({ reqId: this.requestId(), method: this.method, route, status: this.status, durationMs: Math.round(seconds * 1e6) / 1e3, aborted }, 'request');
    }
    const kept = this.kept;
    this.kept = null;
    // A body the client did not finish sending is not a request to mirror.
    if (kept !== null && kept.complete && ctx.mirror) {
      try {
        ctx.mirror.onExchange({
          requestId: this.requestId(),
          method: this.method,
          path: pathOf(this.url),
          route,
          headers: headerFields(kept.head),
          body: kept.parts.length === 1 ? (kept.parts[0] as Buffer) : Buffer.concat(kept.parts),
          status: aborted ? 0 : this.status,
          aborted,
          forced: kept.forced,
        });
      } catch (err) {
        ctx.log.error({ reqId: this.requestId(), err }, 'mirror tap failed');
      }
    }
  }

  /** Drops the upstream exchange in flight: its socket is closed, so the candidate sees the abort. */
  private abandonUpstream(): void {
    const up = this.up;
    this.up = null;
    this.replay = null;
    if (up) {
      up.client = null;
      up.sock.destroy();
    }
  }

  private onClose(): void {
    this.frontend.conns.delete(this);
    if (this.handedOff) return;
    if (this.state !== REQ_IDLE && this.state !== REQ_CLOSED) {
      // The client went away mid-exchange: the upstream must see the close.
      this.abandonUpstream();
      this.state = REQ_IDLE;
      this.account(true);
    }
  }

  get idle(): boolean {
    return this.state === REQ_IDLE && this.buf === null;
  }

  /** Gives the connection, with the bytes read so far, to node:http. */
  private handOff(b: Buffer): void {
    this.handedOff = true;
    this.frontend.conns.delete(this);
    const sock = this.sock;
    sock.removeListener('data', this.onDataBound);
    sock.removeListener('close', this.onCloseBound);
    sock.removeAllListeners('end');
    sock.removeAllListeners('timeout');
    sock.setTimeout(0);
    sock.removeListener('error', noop);
    sock.pause();
    if (b.length > 0) sock.unshift(b);
    this.frontend.fallback(sock);
  }
}

const STATUS_TEXT: Record<number, string> = { 413: 'Payload Too Large', 500: 'Internal Server Error', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout' };

function noop(): void {}

/** Installs the fast path on a node:http server: its connections come here first. */
export class RawFrontend {
  readonly conns = new Set<ClientConn>();
  readonly pool: RawPool;
  readonly fallback: (sock: net.Socket) => void;

  constructor(
    readonly ctx: RawContext,
    server: Server,
  ) {
    this.pool = new RawPool(ctx);
    const listeners = server.listeners('connection') as Array<(sock: net.Socket) => void>;
    server.removeAllListeners('connection');
    this.fallback = (sock) => {
      for (const l of listeners) l.call(server, sock);
      sock.resume();
    };
    server.on('connection', (sock: net.Socket) => {
      this.conns.add(new ClientConn(sock, this.pool, this));
    });
    // node:http's closeAllConnections() (the drain timer's last resort) knows only the sockets it
    // parsed; the fast path's own must be cut too, or a stop waits for their upstream.
    const closeAllHttp = server.closeAllConnections.bind(server);
    server.closeAllConnections = () => {
      this.closeAll();
      closeAllHttp();
    };
  }

  /** Cuts every fast-path connection now (their upstream requests are aborted). */
  closeAll(): void {
    for (const c of [...this.conns]) c.sock.destroy();
    this.pool.destroyIdle();
  }

  /** Graceful close begins: idle connections are closed, busy ones after their response. */
  beginClose(): void {
    this.pool.closing = true;
    for (const c of this.conns) {
      if (c.idle) c.sock.destroy();
      else c.closeAfter = true;
    }
  }

  /** The server has closed: no upstream connection is kept. */
  destroy(): void {
    this.pool.destroyIdle();
  }
}

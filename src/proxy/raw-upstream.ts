import net from 'node:net';
import { GatewayTimeoutError, mapUpstreamError } from './errors.js';
import { BODY_CHUNKED, BODY_CLOSE, BODY_LENGTH, BODY_NONE, BodyFraming, CRLFCRLF, DIGITS, MAX_HEAD, REQ_BODY, REQ_WAIT, RESP_DROP, connectionTokens, connectionValue, hasToken } from './raw-head.js';
import type { ClientConn, RawContext } from './raw.js';

/**
 * The fast path's upstream side (src/proxy/raw.ts): keep-alive sockets to the candidate, the
 * response head parsed for its framing and rewritten only to drop hop-by-hop fields, body bytes
 * relayed to the client connection with backpressure.
 */

export const IDLE_UPSTREAM_MS = 4000;
/** Upstream sockets the fast path opens at most (the undici pool's cap is the same). */
export const MAX_UPSTREAM_CONNECTIONS = 256;

/** One upstream keep-alive connection. */
export class UpstreamConn {
  readonly sock: net.Socket;
  client: ClientConn | null = null;
  connected = false;
  reused = false;
  headBuf: Buffer | null = null;
  inHead = true;
  /** The response body's framing. */
  readonly framing = new BodyFraming();
  reusable = true;
  readonly onDrainClient: () => void;

  constructor(readonly pool: RawPool) {
    const sock = net.connect(pool.ctx.upstreamPort, pool.ctx.upstreamHostname);
    this.sock = sock;
    pool.live++;
    sock.once('close', () => pool.live--);
    sock.setNoDelay(true);
    sock.setTimeout(pool.ctx.connectTimeoutMs);
    sock.on('connect', () => {
      this.connected = true;
      if (this.client) sock.setTimeout(pool.ctx.timeoutMs);
    });
    sock.on('data', (d: Buffer) => this.onData(d));
    sock.on('error', (err: Error) => this.onError(err));
    sock.on('close', () => this.onClose());
    sock.on('timeout', () => this.onTimeout());
    this.onDrainClient = () => sock.resume();
  }

  /** Starts relaying the response for `client`. */
  attach(client: ClientConn): void {
    this.client = client;
    this.inHead = true;
    this.headBuf = null;
    this.framing.start(BODY_NONE);
    this.reusable = true;
    if (this.connected) this.sock.setTimeout(this.pool.ctx.timeoutMs);
  }

  private detach(): ClientConn | null {
    const c = this.client;
    this.client = null;
    return c;
  }

  private onTimeout(): void {
    const c = this.client;
    if (!c) {
      this.sock.destroy();
      return;
    }
    const host = this.pool.ctx.upstreamHost;
    let err: Error;
    if (!this.connected) err = new GatewayTimeoutError(`connecting to ${host}`);
    else if (this.inHead) err = new GatewayTimeoutError(`no response headers from ${host} in time`);
    else err = new GatewayTimeoutError(`${host} stopped sending the body`);
    this.detach();
    this.sock.destroy();
    c.upstreamFailed(err, false);
  }

  private onError(err: Error): void {
    const c = this.detach();
    this.sock.destroy();
    if (c) c.upstreamFailed(mapUpstreamError(err, this.pool.ctx.upstreamHost), this.reused && this.inHead && this.headBuf === null);
  }

  private onClose(): void {
    this.pool.remove(this);
    const c = this.detach();
    if (!c) return;
    if (!this.inHead && this.framing.mode === BODY_CLOSE) {
      c.responseEnd();
      return;
    }
    const err = new Error('upstream closed the connection') as Error & { code: string };
    err.code = 'ECONNRESET';
    c.upstreamFailed(mapUpstreamError(err, this.pool.ctx.upstreamHost), this.reused && this.inHead && this.headBuf === null);
  }

  private onData(d: Buffer): void {
    const c = this.client;
    if (!c) {
      this.sock.destroy();
      return;
    }
    if (!this.inHead) {
      this.body(c, d, 0, null);
      return;
    }
    let b = d;
    if (this.headBuf) b = Buffer.concat([this.headBuf, d]);
    for (;;) {
      const end = b.indexOf(CRLFCRLF);
      if (end < 0) {
        if (b.length > MAX_HEAD) {
          this.detach();
          this.sock.destroy();
          c.upstreamFailed(mapUpstreamError(new Error('response head too large'), this.pool.ctx.upstreamHost), false);
          return;
        }
        this.headBuf = b;
        return;
      }
      this.headBuf = null;
      const parsed = this.parseHead(c, b.toString('latin1', 0, end));
      if (parsed === null) {
        this.detach();
        this.sock.destroy();
        c.upstreamFailed(mapUpstreamError(new Error('malformed response head'), this.pool.ctx.upstreamHost), false);
        return;
      }
      if (parsed.interim) {
        // 1xx: relayed as is, the final head follows.
        c.sock.write(parsed.head, 'latin1');
        b = b.subarray(end + 4);
        if (b.length === 0) return;
        continue;
      }
      this.inHead = false;
      this.sock.setTimeout(this.pool.ctx.idleTimeoutMs);
      c.responseStarted(parsed.status);
      this.body(c, b, end + 4, parsed.head);
      return;
    }
  }

  /** Parses and rewrites a response head; sets the body framing. */
  private parseHead(c: ClientConn, head: string): { status: number; head: string; interim: boolean } | null {
    const lineEnd = head.indexOf('\r\n');
    const statusLine = lineEnd < 0 ? head : head.slice(0, lineEnd);
    if (!statusLine.startsWith('HTTP/1.')) return null;
    const status = Number(statusLine.slice(9, 12));
    if (!(status >= 100 && status <= 999)) return null;
    const http10 = statusLine.charCodeAt(7) === 48;
    let out = statusLine + '\r\n';
    let cl = -1;
    let chunked = false;
    let connValue: string | null = null;
    let drop: string[] | null = null;
    let pos = lineEnd < 0 ? head.length : lineEnd + 2;
    // First pass for Connection (its tokens name more fields to drop).
    const lower = head.toLowerCase();
    connValue = connectionValue(head, lower);
    if (connValue !== null) drop = connectionTokens(connValue);
    while (pos < head.length) {
      let e = head.indexOf('\r\n', pos);
      if (e < 0) e = head.length;
      const colon = head.indexOf(':', pos);
      if (colon < 0 || colon > e) return null;
      const name = lower.slice(pos, colon).trim();
      if (!RESP_DROP.has(name) && (drop === null || !drop.includes(name))) {
        if (name === 'content-length') {
          const t = head.slice(colon + 1, e).trim();
          const v = Number(t);
          if (!DIGITS.test(t) || !Number.isSafeInteger(v) || (cl >= 0 && cl !== v)) return null;
          cl = v;
        } else if (name === 'transfer-encoding') {
          chunked = lower.slice(colon + 1, e).trim().endsWith('chunked');
        }
        out += head.slice(pos, e) + '\r\n';
      }
      pos = e + 2;
    }
    if (status < 200 && status !== 101) return { status, head: out + '\r\n', interim: true };
    if (http10 ? connValue === null || !hasToken(connValue, 'keep-alive') : connValue !== null && hasToken(connValue, 'close')) this.reusable = false;
    if (c.method === 'HEAD' || status === 204 || status === 304) this.framing.start(BODY_NONE);
    else if (chunked) this.framing.start(BODY_CHUNKED);
    else if (cl >= 0) this.framing.start(BODY_LENGTH, cl);
    else {
      this.framing.start(BODY_CLOSE);
      this.reusable = false;
    }
    // An answer before the whole request body arrived ends the connection (the rest is not read).
    if (this.framing.mode === BODY_CLOSE || c.pool.closing || c.closeAfter || c.state === REQ_BODY) {
      c.closeAfter = true;
      out += 'connection: close\r\n';
    }
    return { status, head: out + '\r\n', interim: false };
  }

  /** Relays body bytes d[from..] (with the head first when given), tracking the framing's end. */
  private body(c: ClientConn, d: Buffer, from: number, head: string | null): void {
    const end = this.framing.scan(d, from);
    if (this.framing.bad) {
      this.detach();
      this.sock.destroy();
      c.sock.destroy();
      return;
    }
    const done = this.framing.done;
    if (done && end < d.length) this.reusable = false; // bytes past the response: not ours to keep
    const cs = c.sock;
    let ok = true;
    if (head !== null) {
      if (end > from) {
        cs.cork();
        cs.write(head, 'latin1');
        ok = cs.write(from === 0 && end === d.length ? d : d.subarray(from, end));
        cs.uncork();
      } else ok = cs.write(head, 'latin1');
    } else if (end > from) {
      ok = cs.write(from === 0 && end === d.length ? d : d.subarray(from, end));
    }
    if (done) {
      this.detach();
      // An upstream that answered before the whole request body went out cannot be reused.
      if (this.reusable && !c.pool.closing && c.state === REQ_WAIT) this.pool.release(this);
      else this.sock.destroy();
      c.responseEnd();
    } else if (!ok) {
      this.sock.pause();
      cs.once('drain', this.onDrainClient);
    }
  }
}

/** The keep-alive pool of upstream connections (LIFO). */
export class RawPool {
  closing = false;
  /** Upstream sockets open now (idle or busy). */
  live = 0;
  private readonly idle: UpstreamConn[] = [];
  constructor(readonly ctx: RawContext) {}

  /** True when no idle socket is left and opening one more would pass the connection cap. */
  full(): boolean {
    return this.idle.length === 0 && this.live >= MAX_UPSTREAM_CONNECTIONS;
  }

  acquire(): UpstreamConn {
    for (;;) {
      const u = this.idle.pop();
      if (!u) return new UpstreamConn(this);
      if (u.sock.destroyed || u.sock.readyState !== 'open') continue;
      u.reused = true;
      return u;
    }
  }

  release(u: UpstreamConn): void {
    u.sock.setTimeout(IDLE_UPSTREAM_MS);
    this.idle.push(u);
  }

  remove(u: UpstreamConn): void {
    const i = this.idle.indexOf(u);
    if (i >= 0) this.idle.splice(i, 1);
  }

  destroyIdle(): void {
    for (const u of this.idle.splice(0)) u.sock.destroy();
  }
}

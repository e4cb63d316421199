/**
 * EXPERIMENT (not used by src/; kept as the measurement that justified src/proxy/raw.ts): the
 * core of a byte-level HTTP/1.1 forwarder on `net`, to measure whether it can approach nginx's
 * throughput before building the full feature set.
 *
 *   node --import tsx bench/experiments/raw-proto.ts --upstream http://127.0.0.1:PORT --port N
 *
 * Handles: origin-form requests with content-length or no body (others get 501), upstream
 * keep-alive pool, responses framed by content-length, chunked (walked, not copied) or close.
 * Head rewrite: Host set to the upstream's, hop-by-hop and x-logprobe-mirror removed.
 */
import net from 'node:net';

function arg(name: string): string {
  const i = process.argv.indexOf(name);
  const v = i >= 0 ? process.argv[i + 1] : undefined;
  if (v === undefined) throw new Error(`missing ${name}`);
  return v;
}

const up = new URL(arg('--upstream'));
const upHost = up.host;
const upPort = Number(up.port || 80);
const upAddr = up.hostname;

const CRLFCRLF = Buffer.from('\r\n\r\n');
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'http2-settings', 'x-logprobe-mirror', 'host']);
const RESP_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'upgrade', 'http2-settings']);

const idle: net.Socket[] = [];

// Chunked walk states
const CH_SIZE = 0, CH_EXT = 1, CH_SIZE_LF = 2, CH_DATA = 3, CH_DATA_CR = 4, CH_DATA_LF = 5, CH_TRAILER = 6, CH_DONE = 7;

class Upstream {
  sock: net.Socket;
  buf: Buffer | null = null;
  head = true;
  mode = 0; // 1 cl, 2 chunked, 3 close, 4 none
  remaining = 0;
  chState = CH_SIZE;
  chSize = 0;
  trailerLineLen = 0;
  ex: Client | null = null;
  constructor(sock: net.Socket) {
    this.sock = sock;
    sock.setNoDelay(true);
    sock.on('data', (d: Buffer) => this.onData(d));
    sock.on('close', () => this.onClose());
    sock.on('error', () => undefined);
  }
  onClose(): void {
    const i = idle.indexOf(this.sock);
    if (i >= 0) idle.splice(i, 1);
    const ex = this.ex;
    this.ex = null;
    if (ex) {
      if (this.mode === 3 && !this.head) ex.responseDone();
      else ex.sock.destroy();
    }
  }
  onData(d: Buffer): void {
    const ex = this.ex;
    if (!ex) {
      this.sock.destroy();
      return;
    }
    if (this.head) {
      const b = this.buf ? Buffer.concat([this.buf, d]) : d;
      const end = b.indexOf(CRLFCRLF);
      if (end < 0) {
        this.buf = b;
        return;
      }
      this.buf = null;
      this.head = false;
      const headStr = b.toString('latin1', 0, end);
      const lines = headStr.split('\r\n');
      const status = Number((lines[0] as string).slice(9, 12));
      let out = (lines[0] as string) + '\r\n';
      let cl = -1;
      let chunked = false;
      for (let i = 1; i < lines.length; i++) {
        const l = lines[i] as string;
        const c = l.indexOf(':');
        const name = l.slice(0, c).toLowerCase();
        if (RESP_HOP.has(name)) continue;
        if (name === 'transfer-encoding') chunked = l.slice(c + 1).trim().toLowerCase() === 'chunked';
        if (name === 'content-length') cl = Number(l.slice(c + 1).trim());
        out += l + '\r\n';
      }
      out += '\r\n';
      if (ex.method === 'HEAD' || status === 204 || status === 304 || (status >= 100 && status < 200)) this.mode = 4;
      else if (chunked) {
        this.mode = 2;
        this.chState = CH_SIZE;
        this.chSize = 0;
      } else if (cl >= 0) {
        this.mode = 1;
        this.remaining = cl;
      } else this.mode = 3;
      const rest = b.subarray(end + 4);
      if (rest.length === 0 && this.mode !== 4 && !(this.mode === 1 && cl === 0)) {
        ex.sock.write(out, 'latin1');
        return;
      }
      this.forward(ex, rest, out);
      return;
    }
    this.forward(ex, d, null);
  }
  forward(ex: Client, d: Buffer, head: string | null): void {
    let done = false;
    let n = d.length;
    if (this.mode === 1) {
      if (n >= this.remaining) {
        n = this.remaining;
        done = true;
      }
      this.remaining -= n;
    } else if (this.mode === 2) {
      const end = this.walk(d);
      if (end >= 0) {
        n = end;
        done = true;
      }
    } else if (this.mode === 4) {
      n = 0;
      done = true;
    }
    const body = n === d.length ? d : d.subarray(0, n);
    if (head !== null) {
      if (n > 0) {
        ex.sock.cork();
        ex.sock.write(head, 'latin1');
        ex.sock.write(body);
        ex.sock.uncork();
      } else ex.sock.write(head, 'latin1');
    } else if (n > 0) {
      if (!ex.sock.write(body)) {
        this.sock.pause();
        ex.sock.once('drain', () => this.sock.resume());
      }
    }
    if (done) {
      this.ex = null;
      this.head = true;
      idle.push(this.sock);
      ex.responseDone();
    }
  }
  /** Returns the index just past the end of the chunked body, or -1. */
  walk(d: Buffer): number {
    let i = 0;
    const len = d.length;
    while (i < len) {
      switch (this.chState) {
        case CH_SIZE: {
          const c = d[i] as number;
          let v: number;
          if (c >= 48 && c <= 57) v = c - 48;
          else if (c >= 97 && c <= 102) v = c - 87;
          else if (c >= 65 && c <= 70) v = c - 55;
          else {
            if (c === 13) this.chState = CH_SIZE_LF;
            else this.chState = CH_EXT;
            i++;
            break;
          }
          this.chSize = this.chSize * 16 + v;
          i++;
          break;
        }
        case CH_EXT:
          if (d[i] === 13) this.chState = CH_SIZE_LF;
          i++;
          break;
        case CH_SIZE_LF:
          i++;
          if (this.chSize === 0) {
            this.chState = CH_TRAILER;
            this.trailerLineLen = 0;
          } else this.chState = CH_DATA;
          break;
        case CH_DATA: {
          const take = Math.min(this.chSize, len - i);
          i += take;
          this.chSize -= take;
          if (this.chSize === 0) this.chState = CH_DATA_CR;
          break;
        }
        case CH_DATA_CR:
          i++;
          this.chState = CH_DATA_LF;
          break;
        case CH_DATA_LF:
          i++;
          this.chState = CH_SIZE;
          this.chSize = 0;
          break;
        case CH_TRAILER: {
          const c = d[i] as number;
          i++;
          if (c === 10) {
            if (this.trailerLineLen === 0) {
              this.chState = CH_DONE;
              return i;
            }
            this.trailerLineLen = 0;
          } else if (c !== 13) this.trailerLineLen++;
          break;
        }
        default:
          return i;
      }
    }
    return -1;
  }
}

function getUpstream(): Upstream {
  const s = idle.pop();
  if (s) return (s as net.Socket & { _lp: Upstream })._lp;
  const sock = net.connect(upPort, upAddr);
  const u = new Upstream(sock);
  (sock as net.Socket & { _lp: Upstream })._lp = u;
  return u;
}

class Client {
  sock: net.Socket;
  buf: Buffer | null = null;
  busy = false;
  method = '';
  bodyLeft = 0;
  up: Upstream | null = null;
  constructor(sock: net.Socket) {
    this.sock = sock;
    sock.setNoDelay(true);
    sock.on('data', (d: Buffer) => this.onData(d));
    sock.on('error', () => undefined);
    sock.on('close', () => {
      if (this.up && this.up.ex === this) {
        this.up.ex = null;
        this.up.sock.destroy();
      }
    });
  }
  onData(d: Buffer): void {
    if (this.busy) {
      if (this.bodyLeft > 0 && this.up) {
        const n = Math.min(this.bodyLeft, d.length);
        this.bodyLeft -= n;
        this.up.sock.write(n === d.length ? d : d.subarray(0, n));
        if (n < d.length) this.buf = this.buf ? Buffer.concat([this.buf, d.subarray(n)]) : d.subarray(n);
        return;
      }
      this.buf = this.buf ? Buffer.concat([this.buf, d]) : d;
      this.sock.pause();
      return;
    }
    const b = this.buf ? Buffer.concat([this.buf, d]) : d;
    this.buf = null;
    this.parse(b);
  }
  parse(b: Buffer): void {
    const end = b.indexOf(CRLFCRLF);
    if (end < 0) {
      this.buf = b;
      return;
    }
    const headStr = b.toString('latin1', 0, end);
    let lineEnd = headStr.indexOf('\r\n');
    if (lineEnd < 0) lineEnd = headStr.length;
    const reqLine = headStr.slice(0, lineEnd);
    const sp = reqLine.indexOf(' ');
    this.method = reqLine.slice(0, sp);
    let out = reqLine + '\r\n';
    let cl = 0;
    let pos = lineEnd + 2;
    while (pos < headStr.length) {
      let e = headStr.indexOf('\r\n', pos);
      if (e < 0) e = headStr.length;
      const c = headStr.indexOf(':', pos);
      const name = headStr.slice(pos, c).toLowerCase();
      if (name === 'transfer-encoding') {
        this.sock.end('HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
        return;
      }
      if (!HOP.has(name)) {
        if (name === 'content-length') cl = Number(headStr.slice(c + 1, e).trim());
        out += headStr.slice(pos, e + 2);
        if (e === headStr.length) out += '\r\n';
      }
      pos = e + 2;
    }
    out += 'host: ' + upHost + '\r\n\r\n';
    const bodyStart = end + 4;
    const avail = b.length - bodyStart;
    const n = Math.min(cl, avail);
    this.bodyLeft = cl - n;
    this.busy = true;
    const u = getUpstream();
    u.ex = this;
    this.up = u;
    const us = u.sock;
    if (n > 0) {
      us.cork();
      us.write(out, 'latin1');
      us.write(b.subarray(bodyStart, bodyStart + n));
      us.uncork();
    } else us.write(out, 'latin1');
    if (bodyStart + n < b.length) this.buf = b.subarray(bodyStart + n);
  }
  responseDone(): void {
    this.busy = false;
    this.up = null;
    const b = this.buf;
    this.buf = null;
    if (this.sock.isPaused()) this.sock.resume();
    if (b && b.length > 0) this.parse(b);
  }
}

const server = net.createServer((sock) => new Client(sock));
server.listen(Number(arg('--port')), '127.0.0.1', () => {
  process.stdout.write(`raw proto listening\n`);
});
process.on('SIGTERM', () => process.exit(0));

import type { IncomingHttpHeaders } from 'node:http';
import { ChunkWalker } from './chunked.js';
import { CONNECTION_FIELDS, MIRROR_HEADER } from './headers.js';

/**
 * The fast path's HTTP/1.1 head rules (src/proxy/raw.ts): what a head may contain to be handled
 * there, the fields a proxy removes, and the connection and body-framing states shared by the
 * client and upstream sides.
 */

export const CRLFCRLF = Buffer.from('\r\n\r\n');
export const MAX_HEAD = 64 * 1024;
export const DIGITS = /^\d+$/;
/** A lone CR or LF, or another control byte but HTAB, in a head: not handled here (node:http's parser rejects them). */
export const BAD_HEAD_BYTES = /\r(?!\n)|(?<!\r)\n|[\0-\x08\x0b\x0c\x0e-\x1f\x7f]/;
/** Bytes llhttp refuses in a request target: anything but visible ASCII (HTAB and non-ASCII too, which a head line may hold). */
export const BAD_TARGET_BYTES = /[^\x21-\x7e]/;
/** An RFC 9110 token (field names; lower-cased before the test). */
export const FIELD_NAME = /^[-!#$%&'*+.^_`|~0-9a-z]+$/;
export const FORWARDED_METHODS = new Set(['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS']);
export const IDEMPOTENT_METHODS = new Set(['DELETE', 'GET', 'HEAD', 'PUT', 'OPTIONS']);
/** Request fields never forwarded (hop-by-hop, ours, and Host which is replaced). */
export const REQ_DROP = new Set([...CONNECTION_FIELDS, MIRROR_HEADER, 'host']);
/** Response fields never forwarded (transfer-encoding is kept: the body bytes keep their framing). */
export const RESP_DROP = new Set(CONNECTION_FIELDS);

/** True while `b` (a head without its end yet) can still be a request line: an upper-case method, then a space. */
export function startsLikeRequest(b: Buffer): boolean {
  const n = Math.min(b.length, 16);
  for (let i = 0; i < n; i++) {
    const c = b[i] as number;
    if (c === 32) return i > 0;
    if (c < 65 || c > 90) return false;
  }
  return n < 16;
}

/**
 * Every Connection field of a head, joined with ", " as node:http does (a repeated field must not
 * hide the names it lists); null without one. `lower` is the head lower-cased.
 */
export function connectionValue(head: string, lower: string): string | null {
  let value: string | null = null;
  for (let ci = lower.indexOf('\r\nconnection:'); ci >= 0; ci = lower.indexOf('\r\nconnection:', ci + 2)) {
    let e = head.indexOf('\r\n', ci + 2);
    if (e < 0) e = head.length;
    const v = head.slice(ci + 13, e).trim();
    value = value === null ? v : `${value}, ${v}`;
  }
  return value;
}

/** Field names listed in a Connection value other than keep-alive/close, lower-cased. */
export function connectionTokens(value: string): string[] | null {
  const v = value.toLowerCase();
  if (v === 'keep-alive' || v === 'close') return null;
  const out: string[] = [];
  for (const s of v.split(',')) {
    const t = s.trim();
    if (t !== '' && t !== 'keep-alive' && t !== 'close') out.push(t);
  }
  return out.length > 0 ? out : null;
}

export function hasToken(value: string, token: string): boolean {
  for (const s of value.toLowerCase().split(',')) if (s.trim() === token) return true;
  return false;
}

/**
 * The header fields of a request head (the request line first), as node:http presents them:
 * names lower-cased, repeated fields joined with ", " (cookie with "; ", set-cookie as a list).
 */
export function headerFields(head: string): IncomingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  let pos = head.indexOf('\r\n');
  if (pos < 0) return out;
  pos += 2;
  while (pos < head.length) {
    let e = head.indexOf('\r\n', pos);
    if (e < 0) e = head.length;
    const colon = head.indexOf(':', pos);
    if (colon > pos && colon < e) {
      const name = head.slice(pos, colon).toLowerCase();
      const value = head.slice(colon + 1, e).trim();
      const prev = out[name];
      if (name === 'set-cookie') out[name] = Array.isArray(prev) ? [...prev, value] : [value];
      else if (prev === undefined) out[name] = value;
      else out[name] = `${prev as string}${name === 'cookie' ? '; ' : ', '}${value}`;
    }
    pos = e + 2;
  }
  return out as IncomingHttpHeaders;
}

export const REQ_IDLE = 0;
export const REQ_BODY = 1; // forwarding the request body
export const REQ_WAIT = 2; // request sent, waiting for / relaying the response
export const REQ_CLOSED = 3; // answered with connection: close; nothing more is read

export const BODY_NONE = 0;
export const BODY_LENGTH = 1;
export const BODY_CHUNKED = 2;
export const BODY_CLOSE = 3;

/**
 * Where one message body ends in the bytes as they arrive, for both directions: a content-length
 * counted down, chunked framing walked (strictly, without copying), none, or close-delimited.
 */
export class BodyFraming {
  mode = BODY_NONE;
  /** Content-length bytes still to come. */
  left = 0;
  readonly walker = new ChunkWalker();
  /** The last `scan` reached the end of the body. */
  done = false;

  /** The next body's framing (`length` for BODY_LENGTH). */
  start(mode: number, length = 0): void {
    this.mode = mode;
    this.done = false;
    if (mode === BODY_LENGTH) this.left = length;
    else if (mode === BODY_CHUNKED) this.walker.reset();
  }

  /** A chunked body whose framing is broken. */
  get bad(): boolean {
    return this.mode === BODY_CHUNKED && this.walker.bad;
  }

  /** Scans d[from..]: returns where the body's bytes end in d (d.length when it goes on); sets `done`. */
  scan(d: Buffer, from: number): number {
    let end = d.length;
    if (this.mode === BODY_LENGTH) {
      if (end - from >= this.left) {
        end = from + this.left;
        this.done = true;
      }
      this.left -= end - from;
    } else if (this.mode === BODY_CHUNKED) {
      const e = this.walker.walk(d, from);
      if (e >= 0) {
        end = e;
        this.done = true;
      }
    } else if (this.mode === BODY_NONE) {
      end = from;
      this.done = true;
    }
    return end;
  }
}

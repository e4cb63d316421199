import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

/**
 * Hop-by-hop fields (RFC 9110 §7.6.1, plus the legacy ones proxies strip): they describe one
 * connection, not the message, so a proxy must not forward them. Fields named in `Connection`
 * are hop-by-hop too. `transfer-encoding` is not in this list: the byte-level path keeps the
 * body's framing as it is, the undici path re-frames it (see HOP_BY_HOP).
 */
export const CONNECTION_FIELDS: readonly string[] = [
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
  'http2-settings',
];
/** The hop-by-hop fields plus `transfer-encoding`, for paths that re-frame the body. */
const HOP_BY_HOP = new Set([...CONNECTION_FIELDS, 'transfer-encoding']);

/** Our own control header: decides mirroring for one request, never forwarded. */
export const MIRROR_HEADER = 'x-logprobe-mirror';

const NONE: ReadonlySet<string> = new Set();

/**
 * Field names listed in a `Connection` header. The usual values (absent, `keep-alive`, `close`)
 * name no other field and take the fast path: no Set per request.
 */
function connectionTokens(value: string | string[] | number | undefined): ReadonlySet<string> {
  if (typeof value !== 'string') return NONE;
  const v = value.toLowerCase();
  if (v === 'keep-alive' || v === 'close') return NONE;
  return new Set(
    v
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  );
}

/**
 * Request headers as they go upstream: hop-by-hop and our control header removed, Host set.
 * `Expect` too: node:http has already answered `100 Continue` to the client (undici refuses to
 * send it).
 */
export function upstreamRequestHeaders(
  headers: IncomingHttpHeaders,
  upstreamHost: string,
): Record<string, string | string[]> {
  const drop = connectionTokens(headers.connection);
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (
      value === undefined ||
      HOP_BY_HOP.has(name) ||
      drop.has(name) ||
      name === MIRROR_HEADER ||
      name === 'host' ||
      name === 'expect'
    )
      continue;
    out[name] = value;
  }
  out.host = upstreamHost;
  return out;
}

/** Response headers as they go to the client: hop-by-hop removed, everything else as is. */
export function clientResponseHeaders(headers: Record<string, string | string[] | undefined>): OutgoingHttpHeaders {
  const drop = connectionTokens(headers.connection);
  const out: OutgoingHttpHeaders = {};
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || HOP_BY_HOP.has(name) || drop.has(name)) continue;
    out[name] = value;
  }
  return out;
}

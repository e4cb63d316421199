import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import { CONNECTION_FIELDS } from '../proxy/headers.js';
import { readJsonOrText } from './body.js';

/** The client's API credentials, which `baseline.forwardAuth: true` lets through to the baseline. */
const AUTH_HEADERS = ['authorization', 'x-api-key', 'api-key'] as const;

/**
 * Headers the mirror never copies to the candidate: hop-by-hop (the client path's list:
 * `proxy-authorization` is the client's credential for this proxy, it goes to no upstream),
 * framing (the body is new) and our own.
 */
const NEVER_COPIED = new Set([
  ...CONNECTION_FIELDS,
  'host',
  'transfer-encoding',
  'content-length',
  'content-encoding',
  'accept-encoding',
  'expect',
  'x-logprobe-mirror',
]);

/** Who a mirrored copy goes to, and what the baseline may be given. */
export type MirrorTarget =
  | { role: 'candidate' }
  | { role: 'baseline'; apiKey?: string | null; forwardAuth?: boolean; forwardHeaders?: readonly string[] };

const joined = (v: string | string[]): string => (Array.isArray(v) ? v.join(', ') : v);

/**
 * The headers of a mirrored copy. The candidate gets the client's own headers (its credentials
 * included: it is the deployment the client uses), less hop-by-hop and framing fields. The
 * baseline is another party: it gets an allow-list — `content-type`, `accept`, `baseline.apiKey`
 * as a bearer token, the client's `authorization`/`x-api-key`/`api-key` only with `forwardAuth`,
 * and the client headers `baseline.forwardHeaders` names (lower-case). Nothing else: no cookies,
 * organisation ids or custom tokens unless named.
 */
export function mirrorHeaders(client: IncomingHttpHeaders, target: MirrorTarget): Record<string, string> {
  const out: Record<string, string> = {};
  if (target.role === 'candidate') {
    // Fields named in Connection are hop-by-hop too (RFC 9110 §7.6.1).
    const named =
      typeof client.connection === 'string'
        ? client.connection
            .toLowerCase()
            .split(',')
            .map((s) => s.trim())
        : [];
    for (const name in client) {
      const v = client[name];
      if (v === undefined || NEVER_COPIED.has(name) || named.includes(name)) continue;
      out[name] = joined(v);
    }
  } else {
    for (const name of target.forwardHeaders ?? []) {
      const v = client[name];
      if (v !== undefined && !NEVER_COPIED.has(name)) out[name] = joined(v);
    }
    if (target.forwardAuth) {
      for (const name of AUTH_HEADERS) {
        const v = client[name];
        if (v !== undefined) out[name] = joined(v);
      }
    }
    if (target.apiKey) out.authorization = `Bearer ${target.apiKey}`;
  }
  out['content-type'] = 'application/json';
  out.accept = 'application/json';
  return out;
}

/** What one backend answered to a mirrored copy. */
export interface BackendResult {
  /** HTTP status, or 0 when no response arrived. */
  status: number;
  latencyMs: number;
  /** The body parsed as JSON, or the text when it is not JSON, or null without a response. */
  body: unknown;
  /** Response headers that identify the server (kept for captures). */
  serverHeaders: Record<string, string>;
  /** A transport failure (refused, timeout, reset), or null. */
  error: string | null;
}

const SERVER_HEADER = /^(server|x-.*version.*|x-.*model.*|x-.*engine.*|openai-.*|x-request-id)$/;
const MAX_BODY_BYTES = 64 * 1024 * 1024;

/** Sends one mirrored copy through a long-lived pool and reads the whole answer. */
export async function callBackend(
  pool: Dispatcher,
  target: { url: string; timeoutMs: number; idleTimeoutMs: number },
  path: string,
  headers: Record<string, string>,
  body: string,
): Promise<BackendResult> {
  const base = new URL(target.url);
  const started = performance.now();
  try {
    const res = await pool.request({
      origin: base.origin,
      path: base.pathname.replace(/\/$/, '') + path,
      method: 'POST',
      headers: { ...headers, host: base.host, 'content-length': String(Buffer.byteLength(body)) },
      body,
      headersTimeout: target.timeoutMs,
      bodyTimeout: target.idleTimeoutMs,
    });
    // Not JSON: the comparison core decides what it is (an SSE stream, or garbage).
    const parsed = await readJsonOrText(
      res.body,
      MAX_BODY_BYTES,
      () => new Error(`response body over ${MAX_BODY_BYTES} bytes`),
    );
    const serverHeaders: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) {
      if (v !== undefined && SERVER_HEADER.test(k)) serverHeaders[k] = Array.isArray(v) ? v.join(', ') : v;
    }
    return { status: res.statusCode, latencyMs: performance.now() - started, body: parsed, serverHeaders, error: null };
  } catch (err) {
    const e = err as { code?: string; message?: string };
    return {
      status: 0,
      latencyMs: performance.now() - started,
      body: null,
      serverHeaders: {},
      error: `${e.code ?? 'ERROR'}: ${e.message ?? String(err)}`,
    };
  }
}

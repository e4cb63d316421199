import { Pool } from 'undici';

/** What an upstream needs to be reached: the config's `candidate` / `baseline` blocks. */
export interface UpstreamOptions {
  url: string;
  timeoutMs: number;
  connectTimeoutMs: number;
  idleTimeoutMs: number;
}

export interface PoolOptions {
  tlsInsecure: boolean;
  /** Most connections at once; null: as many as the requests in flight need (nginx's way). */
  connections: number | null;
  /** The largest response head accepted, bytes (`limits.maxHeaderKB`: the same limit as the client side's). */
  maxHeaderSize: number;
  /** Told of every connection opened (+1) and closed (−1): the `logprobe_upstream_connections` gauge. */
  onConnections?: (delta: 1 | -1) => void;
}

/**
 * One long-lived pool per upstream. `headersTimeout` covers a whole non-streaming generation,
 * `bodyTimeout` the idle gap between chunks of a stream; TLS verification is stated explicitly
 * (undici verifies by default, but the intent must be visible — reply-from's default is off).
 * No connection cap unless one is configured: a stream holds its connection for the whole
 * generation, so a cap of N makes stream N+1 wait for one to finish before it is even sent.
 */
export function createUpstreamPool(upstream: UpstreamOptions, options: PoolOptions): Pool {
  const origin = new URL(upstream.url).origin;
  const pool = new Pool(origin, {
    connections: options.connections,
    pipelining: 1,
    connectTimeout: upstream.connectTimeoutMs,
    headersTimeout: upstream.timeoutMs,
    bodyTimeout: upstream.idleTimeoutMs,
    keepAliveTimeout: 30_000,
    maxHeaderSize: options.maxHeaderSize,
    connect: { rejectUnauthorized: !options.tlsInsecure },
  });
  const count = options.onConnections;
  if (count) {
    pool.on('connect', () => count(1));
    pool.on('disconnect', () => count(-1));
  }
  return pool;
}

/** The path prefix of an upstream URL (`http://h/prefix` forwards `/v1/x` to `/prefix/v1/x`). */
export function upstreamBasePath(url: string): string {
  const p = new URL(url).pathname;
  return p === '/' ? '' : p.replace(/\/$/, '');
}

import { Pool } from 'undici';

/** What an upstream needs to be reached: design.md's `candidate` / `baseline` blocks. */
export interface UpstreamOptions {
  url: string;
  timeoutMs: number;
  connectTimeoutMs: number;
  idleTimeoutMs: number;
}

/**
 * One long-lived pool per upstream. `headersTimeout` covers a whole non-streaming generation,
 * `bodyTimeout` the idle gap between chunks of a stream; TLS verification is stated explicitly
 * (undici verifies by default, but the intent must be visible — reply-from's default is off).
 */
export function createUpstreamPool(upstream: UpstreamOptions, options: { tlsInsecure: boolean; connections?: number }): Pool {
  const origin = new URL(upstream.url).origin;
  return new Pool(origin, {
    connections: options.connections ?? 256,
    pipelining: 1,
    connectTimeout: upstream.connectTimeoutMs,
    headersTimeout: upstream.timeoutMs,
    bodyTimeout: upstream.idleTimeoutMs,
    keepAliveTimeout: 30_000,
    connect: { rejectUnauthorized: !options.tlsInsecure },
  });
}

/** The path prefix of an upstream URL (`http://h/prefix` forwards `/v1/x` to `/prefix/v1/x`). */
export function upstreamBasePath(url: string): string {
  const p = new URL(url).pathname;
  return p === '/' ? '' : p.replace(/\/$/, '');
}

import type { IncomingHttpHeaders } from 'node:http';

/** One finished client exchange, as the mirror sees it (after the client got its response). */
export interface Exchange {
  requestId: string;
  method: string;
  /** Path without the query string. */
  path: string;
  route: string;
  /** The client's request headers as received (the mirror strips credentials itself). */
  headers: IncomingHttpHeaders;
  /** The exact request bytes, when the tap asked for them. */
  body: Buffer;
  /** Status the client got, or 0 when the exchange failed before a status. */
  status: number;
  /** The client went away before the response finished. */
  aborted: boolean;
  /** Forced by the `x-logprobe-mirror` header: true (1), false (0) or undefined. */
  forced: boolean | undefined;
}

/**
 * The proxy's hook for the mirror. The proxy asks, before reading a body, whether a copy is
 * wanted; after the response has gone to the client it hands the exchange over. Neither call may
 * throw or block: the client path never waits for the mirror.
 */
export interface MirrorTap {
  /** True when this request's body must be kept (it may be mirrored). */
  wantsBody(method: string, path: string, forced: boolean | undefined): boolean;
  /** Called once the client response has finished (or failed). */
  onExchange(exchange: Exchange): void;
}

/** Parses the `x-logprobe-mirror` header: `1`/`true` force on, `0`/`false` force off. */
export function parseMirrorHeader(value: string | string[] | undefined): boolean | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined) return undefined;
  const s = v.trim().toLowerCase();
  if (s === '1' || s === 'true' || s === 'yes' || s === 'on') return true;
  if (s === '0' || s === 'false' || s === 'no' || s === 'off') return false;
  return undefined;
}

import type { OverflowReason } from '../metrics/labels.js';

/**
 * The client path's configured limits on the candidate (`candidate.maxConnections`,
 * `candidate.maxPending`), as Envoy's circuit breakers: a request beyond them is refused with a
 * 503 at once rather than left waiting without bound. With pipelining 1 each request in flight
 * holds one upstream connection, so "in flight beyond maxConnections" is "waiting for one".
 * Without maxConnections nothing is counted: every request gets a connection, as with nginx.
 */
export class ConnectionBudget {
  private inFlight = 0;

  constructor(
    private readonly maxConnections: number,
    private readonly maxPending: number | null,
  ) {}

  /** Takes a slot for one request, or says why there is none (the caller answers 503). */
  admit(): OverflowReason | null {
    const waiting = this.inFlight - this.maxConnections;
    if (waiting >= 0) {
      // No waiting allowed: the connection limit itself refused it; else the waiting line is full.
      if (this.maxPending === 0) return 'connections';
      if (this.maxPending !== null && waiting >= this.maxPending) return 'pending';
    }
    this.inFlight++;
    return null;
  }

  /** Gives the slot back (the upstream exchange ended, however it ended). */
  release(): void {
    this.inFlight--;
  }

  get size(): number {
    return this.inFlight;
  }
}

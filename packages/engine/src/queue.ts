/**
 * Admission of generation requests: at most `concurrency` run at once, the rest wait in arrival
 * order. One at a time is what numerics want (a real single-GPU engine batches, and batching
 * changes logprobs); the simulated model may run unlimited since its steps are independent.
 */
import { EngineHttpError } from './errors.js';

/** Releases a slot. */
export type Release = () => void;

/** A FIFO semaphore with a bounded wait list. */
export class RequestQueue {
  private running = 0;
  private readonly waiting: Array<{ grant: () => void }> = [];

  constructor(
    private readonly concurrency: number,
    private readonly maxQueue: number,
  ) {}

  /** Whether a request runs or waits (SGLang's /flush_cache refuses then). */
  get busy(): boolean {
    return this.running > 0 || this.waiting.length > 0;
  }

  /** Requests running now. */
  get active(): number {
    return this.running;
  }

  /** Requests running or waiting: what a batching engine would hold at once. */
  get inFlight(): number {
    return this.running + this.waiting.length;
  }

  /** Resolves true once nothing runs or waits, or false after `ms` (or when `signal` aborts). */
  async idle(ms: number, signal: AbortSignal): Promise<boolean> {
    const until = performance.now() + ms;
    while (this.busy) {
      if (signal.aborted || performance.now() >= until) return false;
      await new Promise((r) => setTimeout(r, Math.min(10, Math.max(1, until - performance.now()))));
    }
    return true;
  }

  /** Requests waiting for a slot. */
  get depth(): number {
    return this.waiting.length;
  }

  /**
   * Waits for a slot. Rejects with a 503 when the wait list is full, and with the signal's
   * reason when the client goes away while waiting (the slot is never taken).
   */
  acquire(signal: AbortSignal): Promise<Release> {
    if (signal.aborted) return Promise.reject(signal.reason);
    if (this.running < this.concurrency) {
      this.running++;
      return Promise.resolve(this.releaser());
    }
    if (this.waiting.length >= this.maxQueue) {
      return Promise.reject(
        new EngineHttpError(
          503,
          `the engine queue is full (${this.maxQueue} waiting)`,
          null,
          'server_error',
          'queue_full',
        ),
      );
    }
    return new Promise<Release>((resolve, reject) => {
      const entry = {
        grant: () => {
          signal.removeEventListener('abort', onAbort);
          this.running++;
          resolve(this.releaser());
        },
      };
      const onAbort = (): void => {
        const i = this.waiting.indexOf(entry);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(entry);
    });
  }

  private releaser(): Release {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.running--;
      this.waiting.shift()?.grant();
    };
  }
}

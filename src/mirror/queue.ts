/**
 * A bounded work queue with a concurrency limit. `push` never waits: when the queue is full the
 * job is refused (the mirror counts it as dropped), so the client path can never be slowed by it.
 */
export class WorkQueue<T> {
  private readonly waiting: T[] = [];
  private running = 0;
  private idleWaiters: Array<() => void> = [];
  private closed = false;

  constructor(
    private readonly options: {
      concurrency: number;
      size: number;
      run: (job: T) => Promise<void>;
      onDepth?: (depth: number) => void;
    },
  ) {}

  /** Waiting jobs (not counting those running). */
  get depth(): number {
    return this.waiting.length;
  }

  /** Jobs running now. */
  get active(): number {
    return this.running;
  }

  /** True when `push` would refuse a job now (every slot running, the waiting line full, or closed). */
  get full(): boolean {
    return this.closed || (this.running >= this.options.concurrency && this.waiting.length >= this.options.size);
  }

  /** Enqueues a job; false when the queue is full or closed. */
  push(job: T): boolean {
    if (this.closed) return false;
    if (this.running < this.options.concurrency) {
      this.start(job);
      return true;
    }
    if (this.waiting.length >= this.options.size) return false;
    this.waiting.push(job);
    this.options.onDepth?.(this.waiting.length);
    return true;
  }

  private start(job: T): void {
    this.running++;
    void this.options
      .run(job)
      .catch(() => undefined)
      .finally(() => {
        this.running--;
        const next = this.waiting.shift();
        if (next !== undefined) {
          this.options.onDepth?.(this.waiting.length);
          this.start(next);
        } else if (this.running === 0) {
          const waiters = this.idleWaiters;
          this.idleWaiters = [];
          for (const w of waiters) w();
        }
      });
  }

  /** Resolves when nothing is running or waiting. */
  idle(): Promise<void> {
    if (this.running === 0 && this.waiting.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Refuses new jobs and lets the waiting and running ones finish for up to `graceMs`; jobs still
   * waiting then are discarded and returned (running ones always finish).
   */
  async close(graceMs = 0): Promise<T[]> {
    this.closed = true;
    if (graceMs > 0 && (this.running > 0 || this.waiting.length > 0)) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.idle(), new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)))]);
      clearTimeout(timer);
    }
    const dropped = this.waiting.splice(0);
    this.options.onDepth?.(0);
    return dropped;
  }
}

/**
 * A token bucket of one token refilled at `rps` per second: request pairs start at most `rps`
 * per second, evenly spaced (no burst at the start that a cold engine would see as a spike).
 */
export class RateLimiter {
  private next = 0;

  constructor(
    private readonly rps: number | null,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Resolves when the next request may start. */
  async take(): Promise<void> {
    if (this.rps === null || this.rps <= 0) return;
    const t = this.now();
    const at = Math.max(t, this.next);
    this.next = at + 1000 / this.rps;
    if (at > t) await new Promise((resolve) => setTimeout(resolve, at - t));
  }
}

import type { Config } from '../config/schema.js';
import type { Metrics } from '../metrics/registry.js';
import { keepBodyFor, mirrorChoice } from '../worker/handle.js';
import { Sampler } from '../mirror/sampler.js';
import type { Exchange, MirrorTap } from '../proxy/tap.js';
import type { FromProxyWorker } from './protocol.js';

/** What a {@link HandOver} sends through: the worker's IPC channel (tests: a function). */
export interface HandOverChannel {
  send(message: FromProxyWorker): void;
  /** False once the channel to the primary is closed. */
  connected(): boolean;
}

/**
 * The mirror as a proxy worker process sees it: the sampling decision (the same Sampler as a
 * single process: `x-logprobe-mirror`, `sampleBy: hash`) and a bounded hand-over of each chosen
 * exchange to the primary, which runs the one mirror. At most `mirror.queueSize +
 * mirror.concurrency` jobs are on their way (sent, not yet acknowledged by the primary) per
 * process — as many as the mirror holds; past that, or with the primary gone, a copy is dropped
 * and counted here (`logprobe_mirror_total{outcome="dropped"}`), never waited for.
 */
export class HandOver implements MirrorTap {
  private readonly sampler: Sampler;
  private readonly cap: number;
  private outstanding = 0;
  private idleWaiters: Array<() => void> = [];

  constructor(
    config: Config,
    private readonly metrics: Metrics,
    private readonly channel: HandOverChannel,
  ) {
    this.sampler = new Sampler(config.mirror);
    this.cap = config.mirror.queueSize + config.mirror.concurrency;
  }

  /** Jobs sent and not yet acknowledged. */
  get inFlight(): number {
    return this.outstanding;
  }

  wantsBody(method: string, path: string, forced: boolean | undefined): boolean {
    return keepBodyFor(this.sampler, method, path, forced, this.full(), this.metrics);
  }

  /** No room for another copy: the primary gone, or as many jobs on their way as the mirror holds. */
  private full(): boolean {
    return !this.channel.connected() || this.outstanding >= this.cap;
  }

  onExchange(ex: Exchange): void {
    const choice = mirrorChoice(this.sampler, ex);
    if (choice === 'no') return;
    if (choice === 'skipped' || this.full()) {
      this.metrics
        .counter('logprobe_mirror_total')
        .inc({ route: ex.route, outcome: choice === 'skipped' ? 'skipped' : 'dropped' });
      return;
    }
    this.outstanding++;
    // Structured clone: the body goes as exactly its bytes (a view's, not its pooled buffer's).
    this.channel.send({ t: 'job', exchange: ex });
  }

  /** `n` jobs arrived at the primary. */
  acked(n: number): void {
    this.outstanding = Math.max(0, this.outstanding - n);
    if (this.outstanding === 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  /** Resolves true once every job sent has arrived, false after `timeoutMs` (or with the channel closed). */
  idle(timeoutMs: number): Promise<boolean> {
    if (this.outstanding === 0) return Promise.resolve(true);
    if (!this.channel.connected()) return Promise.resolve(false);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      timer.unref();
      this.idleWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }
}

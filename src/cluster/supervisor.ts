import cluster, { type Worker } from 'node:cluster';
import { fileURLToPath } from 'node:url';
import type { Config } from '../config/schema.js';
import type { Logger } from '../log/logger.js';
import type { MetricsJSON } from '../metrics/merge.js';
import type { MirrorHandle } from '../worker/handle.js';
import type { FromProxyWorker, ToProxyWorker } from './protocol.js';

/** How long `start()` waits for every proxy worker to listen before it gives up. */
export const START_TIMEOUT_MS = 30_000;
/** A restarted worker waits 100 ms, doubling after each exit that comes within this long of its start, up to {@link RESTART_MAX_MS}. */
export const RESTART_RESET_MS = 10_000;
export const RESTART_BASE_MS = 100;
export const RESTART_MAX_MS = 10_000;

/** The proxy worker's entry, next to this file (`.ts` when running from the sources under tsx). */
const WORKER_ENTRY = fileURLToPath(
  new URL(`./proxy-worker-main${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url),
);

/** One proxy worker process, from its fork until its last message is read. */
export interface Proc {
  w: Worker;
  pid: number | null;
  listening: boolean;
  /** Its registry as last received: what /metrics shows of it when it does not answer. */
  snapshot: MetricsJSON;
  waiters: Map<number, (m: MetricsJSON | null) => void>;
  /** Jobs that arrived since its last ack. */
  acks: number;
  /** Its client requests in flight to the candidate, as it last said (0 before it says). */
  load: number;
  exited: boolean;
  /** Its IPC channel is closed: every message it sent has been read. */
  disconnected: boolean;
  /** Its counters are in the retired sum (exited and disconnected). */
  retired: boolean;
}

/** One of the N places a proxy worker runs in (it keeps its index across restarts). */
interface Slot {
  index: number;
  /** The process now in this slot (it may have exited and wait for its restart). */
  proc: Proc | null;
  startedAt: number;
  /** Exits in a row, each within RESTART_RESET_MS of the start before. */
  failures: number;
  restart: NodeJS.Timeout | null;
  /** Why listening failed (the worker's message), if it did. */
  failed: { code: string | null; message: string } | null;
}

const running = (s: Slot): boolean => s.proc !== null && !s.proc.exited;

/** Sends a message to a worker whose channel is still open (a closed one has nothing to answer). */
export function sendTo(w: Worker, m: ToProxyWorker): void {
  if (w.isConnected()) w.send(m);
}

/** What the supervisor tells the cluster's metrics (src/cluster/metrics.ts) about a process. */
export interface ProcEvents {
  /** A metrics message: a scrape's answer or a snapshot of its own. */
  snapshot(p: Proc, id: number | null, metrics: MetricsJSON): void;
  exited(p: Proc): void;
  disconnected(p: Proc): void;
}

/**
 * The proxy worker processes of `listen.workers` = N > 1: N slots, each forked
 * (src/cluster/proxy-worker.ts) and, after an exit it did not ask for, forked again with
 * backoff; their hand-over relayed to the mirror with one ack per batch; the drain at the end.
 * Metrics messages and exits go to {@link ProcEvents}.
 */
export class Supervisor {
  private readonly slots: Slot[];
  private stopping = false;
  private started = false;
  /** The public URL, as the first worker to listen reported it. */
  proxyUrl = '';
  /** Waiting for the workers (`start()`, the drain): checked when a worker listens or exits. */
  private readonly watchers = new Set<() => void>();

  constructor(
    private readonly deps: {
      config: Config;
      workers: number;
      log: Logger;
      mirror: Pick<MirrorHandle, 'handOver'>;
      events: ProcEvents;
    },
  ) {
    this.slots = Array.from({ length: deps.workers }, (_, i) => ({
      index: i + 1,
      proc: null,
      startedAt: 0,
      failures: 0,
      restart: null,
      failed: null,
    }));
  }

  /** Forks every worker and waits until all listen; throws (the worker's own error, with its code) when one fails or exits first. */
  async start(): Promise<void> {
    // Structured clone over the IPC channel: a mirrored body crosses as its bytes. The workers
    // inherit execArgv (--cpu-prof profiles each one).
    cluster.setupPrimary({ exec: WORKER_ENTRY, args: [], serialization: 'advanced' });
    for (const slot of this.slots) this.fork(slot);
    const ok = await this.until(
      () => this.slots.every((s) => s.proc?.listening === true) || this.slots.some((s) => !running(s)),
      START_TIMEOUT_MS,
    );
    const bad = this.slots.find((s) => s.failed !== null || !running(s));
    if (!ok || bad !== undefined) {
      const why =
        bad?.failed?.message ??
        (bad
          ? `proxy worker ${bad.index} exited before it listened`
          : `the proxy workers did not listen within ${START_TIMEOUT_MS / 1000} s`);
      throw Object.assign(new Error(why), { code: bad?.failed?.code ?? undefined });
    }
    this.started = true;
  }

  /** Whether any worker listens now (readiness). */
  anyListening(): boolean {
    return this.slots.some((s) => s.proc?.listening === true);
  }

  /** The running workers' pids. */
  pids(): number[] {
    return this.slots.flatMap((s) => (running(s) && s.proc?.pid != null ? [s.proc.pid] : []));
  }

  /** Every slot's process now (its pid at start: the start line's `pids`). */
  slotPids(): Array<number | null | undefined> {
    return this.slots.map((s) => s.proc?.pid);
  }

  /** The client path's requests in flight to the candidate, summed over the workers that have not exited. */
  candidateInFlight(): number {
    return this.slots.reduce((n, s) => n + (s.proc !== null && !s.proc.exited ? s.proc.load : 0), 0);
  }

  /** The slots' processes whose counters are not yet retired. */
  current(): Proc[] {
    return this.slots.flatMap((s) => (s.proc !== null && !s.proc.retired ? [s.proc] : []));
  }

  /**
   * No restarts from now; every worker drains its connections (shutdown.drainSeconds), hands over
   * its last exchanges and exits; one still running after `graceMs` is killed.
   */
  async drain(graceMs: number): Promise<void> {
    this.stopping = true;
    for (const slot of this.slots) {
      if (slot.restart !== null) clearTimeout(slot.restart);
      slot.restart = null;
    }
    for (const slot of this.slots) if (running(slot)) sendTo(slot.proc!.w, { t: 'drain' });
    if (await this.until(() => !this.slots.some(running), graceMs)) return;
    this.deps.log.warn(
      { pids: this.slots.flatMap((s) => (running(s) ? [s.proc!.pid] : [])) },
      'proxy workers did not stop in time: killed',
    );
    for (const slot of this.slots) if (running(slot)) slot.proc!.w.process.kill('SIGKILL');
    await this.until(() => !this.slots.some(running), 5000);
  }

  private changed(): void {
    for (const check of [...this.watchers]) check();
  }

  private fork(slot: Slot): void {
    slot.restart = null;
    slot.failed = null;
    slot.startedAt = performance.now();
    const w = cluster.fork();
    const p: Proc = {
      w,
      pid: w.process.pid ?? null,
      listening: false,
      snapshot: [],
      waiters: new Map(),
      acks: 0,
      load: 0,
      exited: false,
      disconnected: false,
      retired: false,
    };
    slot.proc = p;
    w.on('message', (m: FromProxyWorker) => this.onMessage(slot, p, m));
    w.on('error', (err) => this.deps.log.error({ err, worker: slot.index }, 'proxy worker: IPC error'));
    w.once('disconnect', () => {
      p.disconnected = true;
      this.deps.events.disconnected(p);
    });
    w.once('exit', (code, signal) => this.onExit(slot, p, code, signal));
  }

  private onMessage(slot: Slot, p: Proc, m: FromProxyWorker): void {
    switch (m.t) {
      case 'hello':
        sendTo(p.w, { t: 'init', config: this.deps.config, index: slot.index });
        break;
      case 'listening':
        p.listening = true;
        this.proxyUrl ||= m.url;
        if (this.started) this.deps.log.info({ worker: slot.index, pid: p.pid }, 'proxy worker started again');
        this.changed();
        break;
      case 'failed':
        slot.failed = { code: m.code, message: m.message };
        break;
      case 'job':
        this.handOver(p, m.exchange);
        break;
      case 'metrics':
        this.deps.events.snapshot(p, m.id, m.metrics);
        break;
      case 'load':
        p.load = m.candidateInFlight;
        break;
    }
  }

  /** A worker's kept exchange to the mirror; one ack per batch of jobs that came in together. */
  private handOver(p: Proc, exchange: Extract<FromProxyWorker, { t: 'job' }>['exchange']): void {
    const b = exchange.body;
    this.deps.mirror.handOver({ ...exchange, body: Buffer.from(b.buffer, b.byteOffset, b.byteLength) });
    if (p.acks++ > 0) return;
    setImmediate(() => {
      const n = p.acks;
      p.acks = 0;
      sendTo(p.w, { t: 'ack', n });
    });
  }

  /** A worker exited: its metrics told, then (unless stopping or before the start) the slot forked again after its backoff. */
  private onExit(slot: Slot, p: Proc, code: number | null, signal: string | null): void {
    p.exited = true;
    p.listening = false;
    this.deps.events.exited(p);
    this.changed();
    if (this.stopping || !this.started) return;
    const upMs = performance.now() - slot.startedAt;
    if (upMs >= RESTART_RESET_MS) slot.failures = 0;
    const delayMs = Math.min(RESTART_MAX_MS, RESTART_BASE_MS * 2 ** slot.failures);
    slot.failures++;
    // Exit 0 without a drain from here: someone sent this worker alone a SIGTERM.
    this.deps.log[code === 0 ? 'warn' : 'error'](
      { worker: slot.index, pid: p.pid, exitCode: code, signal, upMs: Math.round(upMs), restartInMs: delayMs },
      'proxy worker exited: starting it again; the other workers keep serving, /metrics keeps its counters as last scraped',
    );
    slot.restart = setTimeout(() => {
      if (!this.stopping) this.fork(slot);
    }, delayMs);
  }

  /** Resolves true when `done()` holds, checked after every worker event, or false after `timeoutMs`. */
  private until(done: () => boolean, timeoutMs: number): Promise<boolean> {
    if (done()) return Promise.resolve(true);
    return new Promise((resolve) => {
      const check = () => {
        if (!done()) return;
        clearTimeout(timer);
        this.watchers.delete(check);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.watchers.delete(check);
        resolve(false);
      }, timeoutMs);
      this.watchers.add(check);
    });
  }
}

import cluster, { type Worker } from 'node:cluster';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import type { Pool } from 'undici';
import type { Config } from '../config/schema.js';
import { buildAdminApp } from '../admin/app.js';
import { AdminHosts } from '../admin/hosts.js';
import { createLogger, stdoutDestination, type Logger } from '../log/logger.js';
import { mergeProcesses, retiredPart, sumParts, type MetricsJSON } from '../metrics/merge.js';
import { Metrics } from '../metrics/registry.js';
import { MirrorThread, WORKER_METRICS_TIMEOUT_MS } from '../mirror/thread.js';
import { createCandidatePool, probe } from '../server.js';
import type { FromProxyWorker, ToProxyWorker } from './protocol.js';
import { mirrorStartLine } from '../config/summary.js';
import { configuredKeys } from '../capture/redact.js';

/** How many proxy processes `listen.workers` asks for: absent 1, `auto` one per CPU the process may use. */
export function workerCount(config: Config): number {
  const w = config.listen.workers;
  if (w === 'auto') return availableParallelism();
  return w ?? 1;
}

/** How long `listen()` waits for every proxy worker to listen before it gives up. */
export const START_TIMEOUT_MS = 30_000;
/** A restarted worker waits 100 ms, doubling after each exit that comes within this long of its start, up to {@link RESTART_MAX_MS}. */
export const RESTART_RESET_MS = 10_000;
export const RESTART_BASE_MS = 100;
export const RESTART_MAX_MS = 10_000;
/** After `shutdown.drainSeconds`, how long a worker has left to exit before SIGKILL (its last answers, the hand-over's flush, the exit). */
export const WORKER_EXIT_GRACE_MS = 10_000;

/** The proxy worker's entry, next to this file (`.ts` when running from the sources under tsx). */
const WORKER_ENTRY = fileURLToPath(new URL(`./proxy-worker-main${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url));

/** One proxy worker process, from its fork until its last message is read. */
interface Proc {
  w: Worker;
  pid: number | null;
  listening: boolean;
  /** Its registry as last received: what /metrics shows of it when it does not answer. */
  snapshot: MetricsJSON;
  waiters: Map<number, (m: MetricsJSON | null) => void>;
  /** Jobs that arrived since its last ack. */
  acks: number;
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

/** What `logprobe serve` runs with `listen.workers` > 1: the same surface as a single process's runtime. */
export interface ClusterRuntime {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  admin: FastifyInstance;
  mirror: MirrorThread;
  /** The proxy workers' pids now (tests, the bench). */
  workerPids(): number[];
  listen(): Promise<{ proxyUrl: string; adminUrl: string }>;
  close(options?: { quiet?: boolean }): Promise<void>;
}

/**
 * The primary of `logprobe serve` with `listen.workers` = N > 1 (node:cluster). It forks N proxy
 * worker processes (src/cluster/proxy-worker.ts), which share the public port — node:cluster's
 * primary accepts the connections and hands them round-robin to the workers — and each run the
 * client path and the sampling decision. The primary runs what must stay one: the mirror
 * (MirrorThread: its worker thread, the detectors, alerts and the capture), fed by every
 * worker's hand-over, and the admin server, whose /metrics merges its own registry, the mirror
 * worker's and every proxy worker's. A worker that exits unexpectedly is logged and started again
 * (with backoff); clients on the others do not notice. SIGTERM drains every worker, then the
 * mirror, then the capture.
 */
export function createClusterRuntime(config: Config, workers: number): ClusterRuntime {
  if (!cluster.isPrimary) throw new Error('createClusterRuntime runs in the primary process only');
  const logDestination = stdoutDestination();
  const logger = createLogger({ level: config.log.level, redact: config.log.redact, keys: configuredKeys(config), destination: logDestination });
  const log = logger.child({ module: 'cluster' });
  // The primary's own: the mirror's hand-over (skipped, dropped), logprobe_mirror_worker_up, the
  // readiness probe's connection, its process metrics; the client path's families stay at 0 here.
  const metrics = new Metrics({ thread: 'main', mirrorRoutes: config.mirror.routes });
  const mirror = new MirrorThread({ config, logger, logDestination, metrics });
  const probePool: Pool = createCandidatePool(config, metrics, 1);
  const slots: Slot[] = Array.from({ length: workers }, (_, i) => ({ index: i + 1, proc: null, startedAt: 0, failures: 0, restart: null, failed: null }));
  /** What exited workers left: their counters and histograms, summed. */
  let retired: MetricsJSON = [];
  /** Exited workers whose last messages may still come (not yet disconnected): their snapshots still count as theirs. */
  const leaving = new Set<Proc>();
  let nextId = 1;
  let accepting = true;
  let stopping = false;
  let started = false;
  let proxyUrl = '';
  /** Waiting for the workers (`listen()`, the drain): checked when a worker listens or exits. */
  const watchers = new Set<() => void>();
  const changed = () => {
    for (const check of [...watchers]) check();
  };

  const admin = buildAdminApp({
    logger,
    metricsText: () => metricsText(),
    contentType: metrics.registry.contentType,
    hosts: new AdminHosts(config.admin.host, config.admin.allowedHosts),
    misdirected: () => metrics.misdirected(),
    accepting: () => accepting,
    proxyListening: () => slots.some((s) => s.proc?.listening === true),
    candidateReachable: () => probe(probePool, config.candidate.url),
    live: (since, sinceT) => mirror.liveData(since, sinceT),
    mirrorBackends: () => mirror.backendStates(),
  });

  const send = (w: Worker, m: ToProxyWorker) => {
    if (w.isConnected()) w.send(m);
  };

  function fork(slot: Slot): void {
    slot.restart = null;
    slot.failed = null;
    slot.startedAt = performance.now();
    const w = cluster.fork();
    const p: Proc = { w, pid: w.process.pid ?? null, listening: false, snapshot: [], waiters: new Map(), acks: 0, exited: false, disconnected: false, retired: false };
    slot.proc = p;
    w.on('message', (m: FromProxyWorker) => onMessage(slot, p, m));
    w.on('error', (err) => log.error({ err, worker: slot.index }, 'proxy worker: IPC error'));
    w.once('disconnect', () => {
      p.disconnected = true;
      retire(p);
    });
    w.once('exit', (code, signal) => onExit(slot, p, code, signal));
  }

  /** An exited, disconnected worker's counters and histograms join the retired sum (the sums never go back); its gauges go with it. */
  function retire(p: Proc): void {
    if (p.retired || !p.exited || !p.disconnected) return;
    p.retired = true;
    leaving.delete(p);
    retired = sumParts([retired, retiredPart(p.snapshot)]);
    p.snapshot = [];
  }

  function onMessage(slot: Slot, p: Proc, m: FromProxyWorker): void {
    const w = p.w;
    switch (m.t) {
      case 'hello':
        send(w, { t: 'init', config, index: slot.index });
        break;
      case 'listening':
        p.listening = true;
        proxyUrl ||= m.url;
        if (started) log.info({ worker: slot.index, pid: p.pid }, 'proxy worker started again');
        changed();
        break;
      case 'failed':
        slot.failed = { code: m.code, message: m.message };
        break;
      case 'job': {
        const b = m.exchange.body;
        mirror.handOver({ ...m.exchange, body: Buffer.from(b.buffer, b.byteOffset, b.byteLength) });
        // One ack per batch of jobs that came in together.
        if (p.acks++ === 0) {
          setImmediate(() => {
            const n = p.acks;
            p.acks = 0;
            send(w, { t: 'ack', n });
          });
        }
        break;
      }
      case 'metrics':
        // Every snapshot is the newest known state, also one that comes after its scrape gave up
        // (or after the exit: the last one, sent while draining).
        if (!p.retired) p.snapshot = m.metrics;
        if (m.id !== null) {
          p.waiters.get(m.id)?.(m.metrics);
          p.waiters.delete(m.id);
        }
        break;
    }
  }

  function onExit(slot: Slot, p: Proc, code: number | null, signal: string | null): void {
    p.exited = true;
    p.listening = false;
    for (const resolve of p.waiters.values()) resolve(null);
    p.waiters.clear();
    leaving.add(p);
    retire(p);
    const pid = p.pid;
    changed();
    if (stopping || !started) return;
    const upMs = performance.now() - slot.startedAt;
    if (upMs >= RESTART_RESET_MS) slot.failures = 0;
    const delayMs = Math.min(RESTART_MAX_MS, RESTART_BASE_MS * 2 ** slot.failures);
    slot.failures++;
    // Exit 0 without a drain from here: someone sent this worker alone a SIGTERM.
    log[code === 0 ? 'warn' : 'error'](
      { worker: slot.index, pid, exitCode: code, signal, upMs: Math.round(upMs), restartInMs: delayMs },
      'proxy worker exited: starting it again; the other workers keep serving, /metrics keeps its counters as last scraped',
    );
    slot.restart = setTimeout(() => {
      if (!stopping) fork(slot);
    }, delayMs);
  }

  /** A running worker's registry now, or its last known one when it does not answer in time. */
  function scrape(p: Proc): Promise<MetricsJSON> {
    // Not listening yet (it answers once it has its config) or exited: what it last sent.
    if (!p.listening || p.exited || !p.w.isConnected()) return Promise.resolve(p.snapshot);
    const id = nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        p.waiters.delete(id);
        resolve(p.snapshot);
      }, WORKER_METRICS_TIMEOUT_MS);
      p.waiters.set(id, (m) => {
        clearTimeout(timer);
        resolve(m ?? p.snapshot);
      });
      send(p.w, { t: 'metrics', id });
    });
  }

  /**
   * /metrics: the primary's registry with the mirror worker's (as a single process merges them),
   * every proxy worker's (asked at once, each waited for at most WORKER_METRICS_TIMEOUT_MS) and
   * what exited ones left, merged (src/metrics/merge.ts: the logprobe_* families summed).
   */
  async function metricsText(): Promise<string> {
    const procs = new Set([...slots.flatMap((s) => (s.proc !== null && !s.proc.retired ? [s.proc] : [])), ...leaving]);
    const [parts, own] = await Promise.all([Promise.all([...procs].map(scrape)), mirror.metricsParts(metrics.registry)]);
    return mergeProcesses([...own, ...parts, retired]).metrics();
  }

  /** Resolves true when `done()` holds, checked after every worker event, or false after `timeoutMs`. */
  function until(done: () => boolean, timeoutMs: number): Promise<boolean> {
    if (done()) return Promise.resolve(true);
    return new Promise((resolve) => {
      const check = () => {
        if (!done()) return;
        clearTimeout(timer);
        watchers.delete(check);
        resolve(true);
      };
      const timer = setTimeout(() => {
        watchers.delete(check);
        resolve(false);
      }, timeoutMs);
      watchers.add(check);
    });
  }

  let closing: Promise<void> | null = null;
  return {
    config,
    logger,
    metrics,
    admin,
    mirror,
    workerPids: () => slots.flatMap((s) => (running(s) && s.proc?.pid != null ? [s.proc.pid] : [])),
    async listen() {
      // Structured clone over the IPC channel: a mirrored body crosses as its bytes. The workers
      // inherit execArgv (--cpu-prof profiles each one).
      cluster.setupPrimary({ exec: WORKER_ENTRY, args: [], serialization: 'advanced' });
      for (const slot of slots) fork(slot);
      const ok = await until(() => slots.every((s) => s.proc?.listening === true) || slots.some((s) => !running(s)), START_TIMEOUT_MS);
      const bad = slots.find((s) => s.failed !== null || !running(s));
      if (!ok || bad !== undefined) {
        const err = Object.assign(
          new Error(bad?.failed?.message ?? (bad ? `proxy worker ${bad.index} exited before it listened` : `the proxy workers did not listen within ${START_TIMEOUT_MS / 1000} s`)),
          { code: bad?.failed?.code ?? undefined },
        );
        throw err;
      }
      started = true;
      const adminUrl = await admin.listen({ host: config.admin.host, port: config.admin.port });
      mirror.adminListening(Number(new URL(adminUrl).port));
      if (!(await mirror.ready()) && mirror.workerRunning) logger.warn('mirror worker not started yet: /metrics shows logprobe_mirror_worker_up 0 until it answers');
      logger.info({ proxyUrl, adminUrl, candidate: config.candidate.url, baseline: config.baseline.url, workers, pids: slots.map((s) => s.proc?.pid) }, 'logprobe listening');
      logger.info({ sampleRate: config.mirror.sampleRate, routes: config.mirror.routes, capture: config.capture.enabled ? config.capture.dir : null }, mirrorStartLine(config));
      return { proxyUrl, adminUrl };
    },
    close(closeOptions = {}) {
      closing ??= (async () => {
        accepting = false;
        stopping = true;
        for (const slot of slots) {
          if (slot.restart !== null) clearTimeout(slot.restart);
          slot.restart = null;
        }
        // Every worker drains its connections (shutdown.drainSeconds), hands over its last
        // exchanges and exits; one that does not is killed.
        for (const slot of slots) if (running(slot)) send(slot.proc!.w, { t: 'drain' });
        const graceMs = config.shutdown.drainSeconds * 1000 + WORKER_EXIT_GRACE_MS;
        if (!(await until(() => !slots.some(running), graceMs))) {
          log.warn({ pids: slots.flatMap((s) => (running(s) ? [s.proc!.pid] : [])) }, 'proxy workers did not stop in time: killed');
          for (const slot of slots) if (running(slot)) slot.proc!.w.process.kill('SIGKILL');
          await until(() => !slots.some(running), 5000);
        }
        // Then the mirror finishes its queue within drainSeconds and flushes the capture.
        await mirror.close();
        await probePool.close();
        await admin.close();
        if (!closeOptions.quiet) logger.info('logprobe stopped');
      })();
      return closing;
    },
  };
}

import cluster from 'node:cluster';
import { availableParallelism } from 'node:os';
import type { FastifyInstance } from 'fastify';
import type { Pool } from 'undici';
import type { Config } from '../config/schema.js';
import { buildAdminApp } from '../admin/app.js';
import { AdminAuth, adminHttps } from '../admin/auth.js';
import { AdminHosts } from '../admin/hosts.js';
import { createLogger, stdoutDestination, type Logger } from '../log/logger.js';
import { Metrics } from '../metrics/registry.js';
import { exitDeadlineMs, MirrorHandle } from '../worker/handle.js';
import { createCandidatePool, probe } from '../server/server.js';
import { ClusterMetrics } from './metrics.js';
import { Supervisor } from './supervisor.js';
import { logMirrorStart } from '../config/summary.js';
import { configuredKeys } from '../log/redact.js';

/** How many proxy processes `listen.workers` asks for: absent 1, `auto` one per CPU the process may use. */
export function workerCount(config: Config): number {
  const w = config.listen.workers;
  if (w === 'auto') return availableParallelism();
  return w ?? 1;
}

/** What `logprobe serve` runs with `listen.workers` > 1: the same surface as a single process's runtime. */
export interface ClusterRuntime {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  admin: FastifyInstance;
  mirror: MirrorHandle;
  /** The proxy workers' pids now (tests, the bench). */
  workerPids(): number[];
  listen(): Promise<{ proxyUrl: string; adminUrl: string }>;
  close(options?: { quiet?: boolean }): Promise<void>;
}

/** The cluster primary's mutable state: whether it still reports ready, and the one close in progress. */
interface PrimaryState {
  accepting: boolean;
  closing: Promise<void> | null;
}

/** The primary's pieces its admin server, listen and close work with. */
interface PrimaryWiring {
  config: Config;
  workers: number;
  logger: Logger;
  metrics: Metrics;
  mirror: MirrorHandle;
  probePool: Pool;
  clusterMetrics: ClusterMetrics;
  supervisor: Supervisor;
  state: PrimaryState;
}

/** The primary's admin server: the merged /metrics, readiness over the workers and the candidate, the live page. */
function primaryAdmin(w: PrimaryWiring): FastifyInstance {
  const { config, logger, metrics, mirror, probePool, clusterMetrics, supervisor, state } = w;
  return buildAdminApp({
    logger,
    metricsText: () => clusterMetrics.text(),
    contentType: metrics.registry.contentType,
    hosts: new AdminHosts(config.admin.host, config.admin.allowedHosts),
    auth: AdminAuth.fromConfig(config),
    ...adminHttps(config),
    misdirected: () => metrics.misdirected(),
    accepting: () => state.accepting,
    proxyListening: () => supervisor.anyListening(),
    candidateReachable: () => probe(probePool, config.candidate.url),
    live: (since, sinceT) => mirror.liveData(since, sinceT),
    mirrorBackends: () => mirror.backendStates(),
  });
}

/** Starts the proxy workers, then the admin server, waits (bounded) for the mirror worker, and logs the start lines. */
async function listenPrimary(
  w: PrimaryWiring,
  admin: FastifyInstance,
): Promise<{ proxyUrl: string; adminUrl: string }> {
  const { config, workers, logger, mirror, supervisor } = w;
  await supervisor.start();
  const proxyUrl = supervisor.proxyUrl;
  const adminUrl = await admin.listen({ host: config.admin.host, port: config.admin.port });
  mirror.adminListening(Number(new URL(adminUrl).port));
  if (!(await mirror.ready()) && mirror.workerRunning)
    logger.warn('mirror worker not started yet: /metrics shows logprobe_mirror_worker_up 0 until it answers');
  logger.info(
    {
      proxyUrl,
      adminUrl,
      candidate: config.candidate.url,
      baseline: config.baseline.url,
      workers,
      pids: supervisor.slotPids(),
    },
    'logprobe listening',
  );
  logMirrorStart(logger, config, true);
  return { proxyUrl, adminUrl };
}

/** Stops once (later calls share the first close): drain the workers, then the mirror, the probe pool, the admin server. */
function closePrimary(w: PrimaryWiring, admin: FastifyInstance, closeOptions: { quiet?: boolean }): Promise<void> {
  const { config, logger, mirror, probePool, supervisor, state } = w;
  state.closing ??= (async () => {
    state.accepting = false;
    await supervisor.drain(exitDeadlineMs(config));
    // Then the mirror finishes its queue within drainSeconds and flushes the capture.
    await mirror.close();
    await probePool.close();
    await admin.close();
    if (!closeOptions.quiet) logger.info('logprobe stopped');
  })();
  return state.closing;
}

/**
 * The primary of `logprobe serve` with `listen.workers` = N > 1 (node:cluster). It forks N proxy
 * worker processes (src/cluster/proxy-worker.ts), which share the public port — node:cluster's
 * primary accepts the connections and hands them round-robin to the workers — and each run the
 * client path and the sampling decision. The primary runs what must stay one: the mirror
 * (MirrorHandle: its worker thread, the detectors, alerts and the capture), fed by every
 * worker's hand-over, and the admin server, whose /metrics merges its own registry, the mirror
 * worker's and every proxy worker's. A worker that exits unexpectedly is logged and started again
 * (with backoff); clients on the others do not notice. SIGTERM drains every worker, then the
 * mirror, then the capture. The processes are the {@link Supervisor}'s (src/cluster/supervisor.ts:
 * slots, fork, backoff, drain), /metrics is {@link ClusterMetrics}' (src/cluster/metrics.ts:
 * scrape, retire, merge); this wires them to the mirror and the admin server.
 */
export function createClusterRuntime(config: Config, workers: number): ClusterRuntime {
  if (!cluster.isPrimary) throw new Error('createClusterRuntime runs in the primary process only');
  const logDestination = stdoutDestination();
  const logger = createLogger({
    level: config.log.level,
    redact: config.log.redact,
    keys: configuredKeys(config),
    destination: logDestination,
  });
  // The primary's own: the mirror's hand-over (skipped, dropped), logprobe_mirror_worker_up, the
  // readiness probe's connection, its process metrics; the client path's families stay at 0 here.
  const metrics = new Metrics({ thread: 'main', mirrorRoutes: config.mirror.routes });
  // The canaries' load signal: the proxy workers' client requests in flight to the candidate.
  const mirror = new MirrorHandle({
    config,
    logger,
    logDestination,
    metrics,
    candidateInFlight: () => supervisor.candidateInFlight(),
  });
  const probePool: Pool = createCandidatePool(config, metrics, 1);
  const clusterMetrics: ClusterMetrics = new ClusterMetrics(
    () => supervisor.current(),
    () => mirror.metricsParts(metrics.registry),
  );
  const supervisor: Supervisor = new Supervisor({
    config,
    workers,
    log: logger.child({ module: 'cluster' }),
    mirror,
    events: clusterMetrics,
  });
  const state: PrimaryState = { accepting: true, closing: null };
  const wiring: PrimaryWiring = {
    config,
    workers,
    logger,
    metrics,
    mirror,
    probePool,
    clusterMetrics,
    supervisor,
    state,
  };
  const admin = primaryAdmin(wiring);

  return {
    config,
    logger,
    metrics,
    admin,
    mirror,
    workerPids: () => supervisor.pids(),
    listen: () => listenPrimary(wiring, admin),
    close: (closeOptions = {}) => closePrimary(wiring, admin, closeOptions),
  };
}

import type { FastifyInstance } from 'fastify';
import type { Pool } from 'undici';
import type { Config } from '../config/schema.js';
import { buildAdminApp } from '../admin/app.js';
import { AdminAuth, adminHttps } from '../admin/auth.js';
import { AdminHosts } from '../admin/hosts.js';
import { createLogger, stdoutDestination, type LogDestination, type Logger } from '../log/logger.js';
import { Metrics } from '../metrics/registry.js';
import { buildApp } from '../proxy/app.js';
import type { MirrorTap } from '../proxy/tap.js';
import { createUpstreamPool } from '../backend/pool.js';
import { MirrorHandle } from '../worker/handle.js';
import type { MirrorListeners } from '../pair/types.js';
import { logMirrorStart } from '../config/summary.js';
import { configuredKeys } from '../log/redact.js';

/** A part of the process that must be stopped cleanly (mirror queue, capture writer, …). */
export interface Closeable {
  close(): Promise<void>;
}

/** Parts a caller builds in place of the runtime's own (`makeParts`): the mirror tap. */
export interface RuntimeParts {
  mirror?: MirrorTap & Closeable;
}

/** What a caller (serve, the demo, tests) may attach to a runtime. */
export interface RuntimeOptions {
  /** The root logger; give `logDestination` with it (where it writes), or the worker's lines go to stdout. */
  logger?: Logger;
  /** Where the logs go (default stdout): the root logger's, and the mirror worker's lines too. */
  logDestination?: LogDestination;
  /**
   * The mirror worker's entry module (default: the compiled worker.js next to src/worker/handle.ts).
   * Code that runs from the .ts sources passes a boot module that registers tsx first (tests:
   * test/helpers/mirror-worker.mjs).
   */
  mirrorWorkerUrl?: URL;
  /** Listeners for mirrored pairs and alert transitions (capture, the demo's live lines). */
  listeners?: MirrorListeners;
  /** Replaces the default parts (tests). */
  makeParts?: (shared: { config: Config; logger: Logger; metrics: Metrics; candidatePool: Pool }) => RuntimeParts;
}

export interface LogprobeRuntime {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  proxy: FastifyInstance;
  admin: FastifyInstance;
  candidatePool: Pool;
  /** The mirror (its worker thread does the work and writes the capture), when this runtime built its own (absent with custom parts). */
  mirror: MirrorHandle | undefined;
  /** Listens on both ports; returns the URLs actually bound (port 0 gives a free port). */
  listen(): Promise<{ proxyUrl: string; adminUrl: string }>;
  /**
   * Graceful stop: no new connections, in-flight requests finish within `shutdown.drainSeconds`.
   * `quiet`: no "logprobe stopped" line (a start that failed has nothing to report stopping).
   */
  close(options?: { quiet?: boolean }): Promise<void>;
}

/** The root logger and where it writes: the caller's, or one built from `config.log` on stdout. */
function runtimeLogger(config: Config, options: RuntimeOptions): { logger: Logger; logDestination: LogDestination } {
  const logDestination = options.logDestination ?? (options.logger ? process.stdout : stdoutDestination());
  const logger =
    options.logger ??
    createLogger({
      level: config.log.level,
      redact: config.log.redact,
      keys: configuredKeys(config),
      destination: logDestination,
    });
  return { logger, logDestination };
}

/** The runtime's mutable state: whether the proxy still accepts, and the one close in progress. */
interface RuntimeState {
  accepting: boolean;
  closing: Promise<void> | null;
}

/** The shared pieces the runtime's listen, close and admin server work with. */
interface RuntimeWiring {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  candidatePool: Pool;
  mirror: MirrorHandle | undefined;
  state: RuntimeState;
}

/** The admin server over the runtime's metrics, readiness, and the mirror's live data when it has one. */
function runtimeAdmin({ config, logger, metrics, candidatePool, mirror, state }: RuntimeWiring): FastifyInstance {
  return buildAdminApp({
    logger,
    metricsText: mirror ? () => mirror.metricsText(metrics.registry) : () => metrics.registry.metrics(),
    contentType: metrics.registry.contentType,
    hosts: new AdminHosts(config.admin.host, config.admin.allowedHosts),
    auth: AdminAuth.fromConfig(config),
    ...adminHttps(config),
    misdirected: () => metrics.misdirected(),
    accepting: () => state.accepting,
    candidateReachable: () => probe(candidatePool, config.candidate.url),
    ...(mirror
      ? {
          live: (since: number, sinceT: number) => mirror.liveData(since, sinceT),
          mirrorBackends: () => mirror.backendStates(),
        }
      : {}),
  });
}

/** Listens on both ports, waits (bounded) for the mirror worker, and logs the start lines. */
async function listenRuntime(
  { config, logger, mirror }: RuntimeWiring,
  proxy: FastifyInstance,
  admin: FastifyInstance,
): Promise<{ proxyUrl: string; adminUrl: string }> {
  const proxyUrl = await proxy.listen({
    host: config.listen.host,
    port: config.listen.port,
    backlog: config.limits.backlog,
  });
  const adminUrl = await admin.listen({ host: config.admin.host, port: config.admin.port });
  mirror?.adminListening(Number(new URL(adminUrl).port));
  // Listening means ready: the worker's series exist on the first scrape (bounded wait).
  if (mirror && !(await mirror.ready()) && mirror.workerRunning)
    logger.warn('mirror worker not started yet: /metrics shows logprobe_mirror_worker_up 0 until it answers');
  logger.info(
    { proxyUrl, adminUrl, mode: config.mode, candidate: config.candidate.url, baseline: config.baseline.url },
    'logprobe listening',
  );
  logMirrorStart(logger, config, mirror !== undefined);
  return { proxyUrl, adminUrl };
}

/** Stops once (later calls share the first close): drain the proxy, then the mirror, the pool, the admin server. */
function closeRuntime(
  { config, logger, candidatePool, state }: RuntimeWiring,
  proxy: FastifyInstance,
  admin: FastifyInstance,
  parts: RuntimeParts,
  closeOptions: { quiet?: boolean },
): Promise<void> {
  state.closing ??= (async () => {
    state.accepting = false;
    await drainProxy(proxy, config, logger);
    // The mirror's worker finishes its queue within drainSeconds, then flushes the capture.
    await parts.mirror?.close();
    await candidatePool.close();
    await admin.close();
    if (!closeOptions.quiet) logger.info('logprobe stopped');
  })();
  return state.closing;
}

/**
 * Wires one logprobe process: logger, metrics, the candidate pool, the proxy and the admin
 * server. `makeParts` builds the optional stages from the shared pieces.
 */
export function createRuntime(config: Config, options: RuntimeOptions = {}): LogprobeRuntime {
  const { logger, logDestination } = runtimeLogger(config, options);
  // The proxy's thread's metrics; the worker has its own (src/metrics/catalog.ts says which).
  // Custom parts run on this thread: they get every metric.
  const metrics = new Metrics({ thread: options.makeParts ? undefined : 'main', mirrorRoutes: config.mirror.routes });
  const candidatePool = createCandidatePool(config, metrics);
  const mirror = options.makeParts
    ? undefined
    : new MirrorHandle({
        config,
        logger,
        logDestination,
        metrics,
        listeners: options.listeners,
        workerUrl: options.mirrorWorkerUrl,
        candidateInFlight: () => candidatePool.stats.running + candidatePool.stats.queued,
      });
  const parts = options.makeParts?.({ config, logger, metrics, candidatePool }) ?? { mirror };
  const wiring: RuntimeWiring = {
    config,
    logger,
    metrics,
    candidatePool,
    mirror,
    state: { accepting: true, closing: null },
  };

  const proxy = buildApp(config, { logger, candidate: candidatePool, metrics, mirror: parts.mirror });
  const admin = runtimeAdmin(wiring);

  return {
    config,
    logger,
    metrics,
    proxy,
    admin,
    candidatePool,
    mirror,
    listen: () => listenRuntime(wiring, proxy, admin),
    close: (closeOptions = {}) => closeRuntime(wiring, proxy, admin, parts, closeOptions),
  };
}

/** The client path's pool to the candidate (candidate.maxConnections applies to it), counted in `logprobe_upstream_connections`. */
export function createCandidatePool(
  config: Config,
  metrics: Metrics,
  connections: number | null = config.candidate.maxConnections,
): Pool {
  return createUpstreamPool(config.candidate, {
    tlsInsecure: config.tlsInsecure,
    connections,
    maxHeaderSize: config.limits.maxHeaderKB * 1024,
    onConnections: (delta) => metrics.connections('candidate', delta),
  });
}

/**
 * Stops the proxy gracefully: no new connections, requests in flight finish; after
 * `shutdown.drainSeconds` the connections still open are closed.
 */
export async function drainProxy(proxy: FastifyInstance, config: Config, logger: Logger): Promise<void> {
  const timer = setTimeout(() => {
    logger.warn({ drainSeconds: config.shutdown.drainSeconds }, 'drain time over: closing the remaining connections');
    proxy.server.closeAllConnections();
  }, config.shutdown.drainSeconds * 1000);
  timer.unref();
  try {
    await proxy.close();
  } finally {
    clearTimeout(timer);
  }
}

/** True when the upstream answers HTTP at all; a 404 on /health still proves it is reachable. */
export async function probe(pool: Pool, url: string): Promise<boolean> {
  try {
    const base = new URL(url);
    const path = `${base.pathname.replace(/\/$/, '')}/health`;
    const res = await pool.request({
      path,
      method: 'GET',
      headersTimeout: 2000,
      bodyTimeout: 2000,
      signal: AbortSignal.timeout(3000),
    });
    await res.body.dump();
    return true;
  } catch {
    return false;
  }
}

import type { Config } from '../config/schema.js';
import type { Pool } from 'undici';
import { createLogger, stdoutDestination } from '../log/logger.js';
import { Metrics } from '../metrics/registry.js';
import { buildApp } from '../proxy/app.js';
import { createCandidatePool, drainProxy } from '../server/server.js';
import { HandOver } from './handover.js';
import type { FromProxyWorker, ToProxyWorker } from './protocol.js';
import { configuredKeys } from '../log/redact.js';

/**
 * How long a draining worker waits for the primary to acknowledge the jobs it sent last (the
 * primary answers within milliseconds; this bounds a primary that stopped reading).
 */
export const HANDOVER_FLUSH_MS = 5000;

/**
 * A proxy worker process of `logprobe serve` with `listen.workers` > 1 (node:cluster; the
 * primary is src/cluster/primary.ts). It runs the client path exactly as a single process does —
 * buildApp (node:http + undici), its own candidate pool, the sampling decision — on the public
 * port that node:cluster shares, and hands each kept exchange to the primary (src/cluster/handover.ts),
 * which runs the one mirror. Its metrics are its own registry, merged into the primary's
 * /metrics on each scrape; its log lines go to stdout (each line carries `worker` and `pid`).
 *
 * Signals: SIGINT is the primary's to handle (a terminal's Ctrl-C reaches the whole process group;
 * the primary then drains every worker); SIGTERM to this process alone drains it and it exits 0
 * (the primary starts another). When the primary is gone the IPC channel closes and node:cluster
 * ends this process at once.
 */
export function runProxyWorker(): void {
  const send = (m: FromProxyWorker, cb?: (err: Error | null) => void) => {
    if (!process.connected) {
      cb?.(new Error('the IPC channel to the primary is closed'));
      return;
    }
    process.send?.(m, undefined, {}, cb ?? (() => undefined));
  };
  process.on('SIGINT', () => undefined);
  const onInit = (m: ToProxyWorker) => {
    if (m.t !== 'init') return;
    process.off('message', onInit);
    void serveWorker(m.config, m.index, send);
  };
  process.on('message', onInit);
  send({ t: 'hello' });
}

async function serveWorker(
  config: Config,
  index: number,
  send: (m: FromProxyWorker, cb?: (err: Error | null) => void) => void,
): Promise<void> {
  const logDestination = stdoutDestination();
  const logger = createLogger({
    level: config.log.level,
    redact: config.log.redact,
    keys: configuredKeys(config),
    destination: logDestination,
  }).child({ worker: index, pid: process.pid });
  // The client path's metrics (thread `main`): requests, durations, overflow, the candidate
  // pool's connections, the hand-over's skipped and dropped copies.
  const metrics = new Metrics({ thread: 'main', mirrorRoutes: config.mirror.routes });
  const candidatePool = createCandidatePool(config, metrics);
  const handOver = new HandOver(config, metrics, { send: (m) => send(m), connected: () => process.connected });
  const proxy = buildApp(config, { logger, candidate: candidatePool, metrics, mirror: handOver });
  const snapshot = (id: number | null, cb?: (err: Error | null) => void) => {
    void metrics.registry.getMetricsAsJSON().then((json) => send({ t: 'metrics', id, metrics: json }, cb));
  };

  let draining: Promise<void> | null = null;
  const drain = () => {
    draining ??= (async () => {
      try {
        await drainProxy(proxy, config, logger);
        // The last exchanges' jobs are on their way: the primary hands them to the mirror,
        // which drains after every worker has stopped.
        if (!(await handOver.idle(HANDOVER_FLUSH_MS)))
          logger.warn(
            { jobs: handOver.inFlight },
            'proxy worker: mirrored copies not acknowledged by the primary before exit',
          );
        await candidatePool.close();
      } catch (err) {
        logger.error({ err }, 'proxy worker: error while draining');
      }
      // Its counters as they end (the primary keeps them in /metrics), then exit.
      await new Promise<void>((resolve) => snapshot(null, () => resolve()));
      logger.info('proxy worker stopped');
      logger.flush(() => process.exit(0));
    })();
  };

  if (config.canary.enabled) tellLoad(candidatePool, send);

  process.on('message', (m: ToProxyWorker) => {
    if (m.t === 'ack') handOver.acked(m.n);
    else if (m.t === 'metrics') snapshot(m.id);
    else if (m.t === 'drain') drain();
  });
  process.on('SIGTERM', drain);

  let url: string;
  try {
    url = await proxy.listen({ host: config.listen.host, port: config.listen.port, backlog: config.limits.backlog });
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    logger.error({ err }, 'proxy worker: cannot listen');
    send({ t: 'failed', code: e.code ?? null, message: e.message }, () => logger.flush(() => process.exit(1)));
    return;
  }
  snapshot(null);
  send({ t: 'listening', url });
  logger.info({ url }, 'proxy worker listening');
}

/**
 * The canaries (in the primary's mirror) wait while the client path is busy: this worker's share
 * of it — its pool's running and queued requests — told four times a second when it changed.
 */
function tellLoad(pool: Pool, send: (m: FromProxyWorker) => void): void {
  let last = 0;
  setInterval(() => {
    const n = pool.stats.running + pool.stats.queued;
    if (n === last || !process.connected) return;
    last = n;
    send({ t: 'load', candidateInFlight: n });
  }, 250).unref();
}

import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { createLogger } from '../log/logger.js';
import { Metrics } from '../metrics/registry.js';
import { createUpstreamPool } from '../backend/pool.js';
import { createCaptureWriter, withCapture } from '../capture/sink.js';
import { Mirror } from '../mirror/mirror.js';
import { LiveFeed } from '../live/feed.js';
import { BackendHealth } from '../backend/health.js';
import { copyKey } from '../backend/failure.js';
import { probeAtStart } from '../probe/startup.js';
import { CanaryProber } from '../canary/prober.js';
import type { MirrorListeners } from '../pair/types.js';
import { summarize, type FromWorker, type ToWorker, type WorkerInit } from './protocol.js';
import { configuredKeys } from '../log/redact.js';

/**
 * The mirror's worker thread: everything after the sampling decision — JSON parsing, rewrite,
 * the two backend calls, parsing and comparing their logprobs, metrics, detectors, alerts and the
 * capture writer — runs here, so none of it competes with client requests on the proxy's event
 * loop. Its metrics live in a registry of its own, merged into `/metrics` by the main thread; its
 * log lines go to the main thread's log destination.
 */

const port = parentPort;
if (!port) throw new Error('src/worker/worker.ts runs as a worker thread only');
const init = workerData as WorkerInit;
const { config } = init;
const post = (m: FromWorker) => port.postMessage(m);

/**
 * Linux: this thread runs 10 nice levels below the process (capped at 19, the lowest priority),
 * so that when the CPU is short the kernel gives it to the proxy's thread first (the mirror then
 * falls behind and drops copies, counted, instead of slowing clients). Relative, not absolute: a
 * proxy started at nice 10 still gets the gap (nice 10 vs 19), and one at nice 19 shares its
 * level, which no unprivileged process can lower. setpriority() on a thread id affects that
 * thread only.
 */
export const MIRROR_NICE_OFFSET = 10;
/** The nice level of the mirror's thread for a process at `processNice`. */
export function mirrorNice(processNice: number): number {
  return Math.min(19, processNice + MIRROR_NICE_OFFSET);
}
if (process.platform === 'linux') {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    // getPriority(0) is this thread's level, inherited from the thread that started it.
    if (Number.isInteger(tid) && tid > 0) setPriority(tid, mirrorNice(getPriority(0)));
  } catch {
    // Not allowed or not supported: the mirror runs at the process's priority.
  }
}

const logger = createLogger({
  level: config.log.level,
  redact: config.log.redact,
  keys: configuredKeys(config),
  destination: { write: (line: string) => post({ t: 'log', line }) },
});
// The metrics this thread owns (src/metrics/catalog.ts), every known series at 0.
const metrics = new Metrics({ thread: 'worker', mirrorRoutes: config.mirror.routes });
/** Posts the registry: the answer to a scrape's request `id`, or a snapshot of its own (`null`). */
const sendMetrics = (id: number | null) => {
  void metrics.registry.getMetricsAsJSON().then((json) => post({ t: 'metrics', id, metrics: json }));
};
const candidatePool = createUpstreamPool(config.candidate, {
  tlsInsecure: config.tlsInsecure,
  connections: config.mirror.concurrency * 2,
  maxHeaderSize: config.limits.maxHeaderKB * 1024,
  onConnections: (delta) => metrics.connections('candidate', delta),
});
const capture = config.capture.enabled ? createCaptureWriter({ config, logger, metrics }) : undefined;
const forward: MirrorListeners = {
  ...(init.forwardPairs ? { onPair: (pair) => post({ t: 'pair', pair }) } : {}),
  ...(init.forwardAlerts ? { onAlert: (transition) => post({ t: 'alert', transition }) } : {}),
};
const outer = capture ? withCapture(capture, forward) : forward;
// The live page's state (GET /ui on the admin port): the last pairs as strips, built here from
// the bodies this thread has just compared, and the detectors over the last minutes.
// Each backend's state: the start-up probe's answer, then every failed copy, logged at once
// (rate-limited) and told to the proxy's thread for /readyz.
const health = new BackendHealth(
  logger.child({ module: 'mirror' }),
  [
    { backend: 'candidate', url: config.candidate.url, key: copyKey('candidate', config) },
    ...(config.baseline.url !== null
      ? [{ backend: 'baseline' as const, url: config.baseline.url, key: copyKey('baseline', config) }]
      : []),
  ],
  (backends) => post({ t: 'backends', backends }),
);
const live = new LiveFeed(
  config,
  () => mirror.detectorState,
  Date.now,
  () => health.snapshot(),
  () => mirror.permutation,
  () => mirror.slices,
);
const feed = (f: () => void) => {
  try {
    f();
  } catch (err) {
    logger.error({ err }, 'live page feed failed');
  }
};
// After an alert transition, the proxy's thread gets the new state at once: if this thread dies
// before the next scrape, /metrics still shows the alert as it last was.
const listeners: MirrorListeners = {
  ...outer,
  onPair: (pair) => {
    outer.onPair?.(pair);
    feed(() => live.onPair(pair));
  },
  onAlert: (transition) => {
    outer.onAlert?.(transition);
    feed(() => live.onAlert(transition));
    sendMetrics(null);
  },
};
const mirror: Mirror = new Mirror({
  config,
  logger,
  metrics,
  candidatePool,
  listeners,
  onSettled: () =>
    post({
      t: 'settled',
      state: summarize(mirror.detectorState),
      self: {
        candidate: summarize(mirror.selfDetectorState('candidate')),
        baseline: summarize(mirror.selfDetectorState('baseline')),
      },
      slices: changedSlices(),
    }),
  health,
});

/**
 * Each slice's pair detectors as last told to the proxy's thread: a settled message carries only
 * the slices whose state changed since (a detector's state is a new object after each change).
 */
const slicesSent = new Map<string, object>();
function changedSlices(): Array<[string, ReturnType<typeof summarize>]> {
  const out: Array<[string, ReturnType<typeof summarize>]> = [];
  for (const [model, d] of mirror.slices) {
    if (slicesSent.get(model) === d.pairs) continue;
    slicesSent.set(model, d.pairs);
    out.push([model, summarize(d.pairs)]);
  }
  return out;
}

/** The start-up probe's, aborted at close: a shutdown never waits for it. */
const probing = new AbortController();

/** The client path's requests in flight to the candidate, as the proxy's thread last said. */
let candidateInFlight = 0;
/** Canary probes (config canary): logprobe's own requests, through the mirror, on a schedule. */
const canaries = config.canary.enabled
  ? new CanaryProber({
      config,
      mirror,
      metrics,
      log: logger.child({ module: 'canary' }),
      candidateInFlight: () => candidateInFlight,
    })
  : null;

port.on('message', (m: ToWorker) => {
  if (m.t === 'job') {
    const { body } = m.exchange;
    mirror.accept({ ...m.exchange, body: Buffer.from(body.buffer, body.byteOffset, body.byteLength) });
  } else if (m.t === 'metrics') {
    sendMetrics(m.id);
  } else if (m.t === 'live') {
    const body = new TextEncoder().encode(`{"worker":"up","data":${live.snapshot(m.since, m.sinceT)}}`);
    port.postMessage({ t: 'live', id: m.id, body } satisfies FromWorker, [body.buffer]);
  } else if (m.t === 'admin') {
    mirror.setAdminPort(m.port);
  } else if (m.t === 'load') {
    candidateInFlight = m.candidateInFlight;
  } else if (m.t === 'close') {
    probing.abort();
    live.close();
    health.close();
    void (async () => {
      try {
        await canaries?.close();
        await mirror.close();
        await capture?.close();
        await candidatePool.close();
      } catch (err) {
        logger.error({ err }, 'mirror worker: error while closing');
      }
      post({ t: 'closed' });
      port.close();
    })();
  }
});

// Ready: the first snapshot tells the proxy's thread so, with every series at its start value.
sendMetrics(null);
// A probe file or reference that cannot be read stops the canaries, said once; the mirror goes on.
canaries
  ?.start()
  .catch((err: unknown) =>
    logger.error(
      { err: (err as Error)?.message ?? String(err) },
      `canaries off: ${(err as Error)?.message ?? String(err)}`,
    ),
  );
// Then each backend is probed once (probe.atStart), in the background: nothing waits for it.
void probeAtStart({
  config,
  health,
  metrics,
  logger: logger.child({ module: 'probe' }),
  signal: probing.signal,
  onEngine: (backend, engine, evidence) => mirror.adoptEngine(backend, engine, evidence),
  onMeaningMismatch: (reason) => mirror.refuse(reason),
})
  .then(() => sendMetrics(null))
  .catch((err: unknown) => logger.error({ err }, 'start-up probe failed'));

import type { Backend } from '../core/types.js';
import type { MetricObjectWithValues, MetricValue } from 'prom-client';
import type { Config } from '../config/schema.js';
import type { AlertTransition, DetectorState } from '../core/detector.js';
import type { Exchange } from '../proxy/tap.js';
import type { MirroredPair } from '../pair/types.js';
import type { BackendStatus } from '../backend/health.js';

/**
 * Messages between the proxy's thread and the mirror's worker thread (src/worker/handle.ts and
 * src/worker/worker.ts). Only plain data crosses: the request body as a transferred buffer, the
 * detector's summary, log lines, metric snapshots, and pairs when the main thread has listeners.
 */

/** What the worker is started with. */
export interface WorkerInit {
  config: Config;
  /** Post every pair / alert transition back (the demo's and tests' listeners live on the main thread). */
  forwardPairs: boolean;
  forwardAlerts: boolean;
}

/** The detectors' state without the window's entries (what the demo and tests read). */
export type DetectorSummary = Omit<DetectorState, 'recent'>;

export type ToWorker =
  /** A sampled exchange; its body's bytes are transferred. */
  | { t: 'job'; exchange: Omit<Exchange, 'body'> & { body: Uint8Array } }
  | { t: 'metrics'; id: number }
  /** The live page's poll (src/live/feed.ts): what changed after pair `since` and point `sinceT`. */
  | { t: 'live'; id: number; since: number; sinceT: number }
  /** The admin server's port once it listens (alerts link to its live page). */
  | { t: 'admin'; port: number }
  /** The client path's requests in flight to the candidate (canaries wait above canary.maxCandidateInFlight). */
  | { t: 'load'; candidateInFlight: number }
  | { t: 'close' };

export type FromWorker =
  /**
   * A pair settled: the pair detectors' state (of the worst slice), each backend's
   * self-consistency detector, and the pair detectors of each model slice whose state changed
   * since the last message (src/mirror/detectors.ts; as many as there are slices at most).
   */
  | {
      t: 'settled';
      state: DetectorSummary;
      self: Record<Backend, DetectorSummary>;
      slices?: Array<[string, DetectorSummary]>;
    }
  | { t: 'log'; line: string }
  | { t: 'pair'; pair: MirroredPair }
  | { t: 'alert'; transition: AlertTransition }
  /**
   * The worker's registry: the answer to the request `id`, or (`id` null) a snapshot the worker
   * sends by itself — once it is ready, and after each alert transition — so that the proxy's
   * thread knows the last values even of a worker that dies before the next scrape.
   */
  | { t: 'metrics'; id: number | null; metrics: Array<MetricObjectWithValues<MetricValue<string>>> }
  /**
   * The answer to the live poll `id`: the whole body of GET /ui/data (`{"worker":"up","data":…}`)
   * as UTF-8 bytes, serialised and encoded by the worker, its buffer transferred.
   */
  | { t: 'live'; id: number; body: Uint8Array }
  /** Each backend's state after a change (src/backend/health.ts): what /readyz names. */
  | { t: 'backends'; backends: BackendStatus[] }
  | { t: 'closed' };

export function summarize(s: Readonly<DetectorState>): DetectorSummary {
  return {
    shiftedSum: s.shiftedSum,
    comparableSum: s.comparableSum,
    cusum: s.cusum,
    cusumRun: s.cusumRun,
    global: s.global,
    sustained: s.sustained,
  };
}

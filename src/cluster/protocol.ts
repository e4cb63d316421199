import type { Config } from '../config/schema.js';
import type { MetricsJSON } from '../metrics/merge.js';
import type { Exchange } from '../proxy/tap.js';

/**
 * Messages between the primary and a proxy worker process over node:cluster's IPC channel
 * (`serialization: 'advanced'`: structured clone, so a body crosses as its bytes). Only plain
 * data: the config, kept exchanges, metric snapshots and a few commands.
 *
 * Start: the worker says `hello` once it listens for messages; the primary answers `init`; the
 * worker listens on the public port (node:cluster shares the primary's socket) and says
 * `listening` (or `failed`, and exits). Hand-over: `job` one way, `ack` (how many arrived) the
 * other, so that a worker knows how many are still on their way and drops past its bound. Stop:
 * `drain` (or SIGTERM to the worker itself): the worker drains its connections, sends a last
 * metrics snapshot and exits 0.
 */

export type ToProxyWorker =
  /** The config the primary loaded (the worker neither reads files nor the environment again) and the worker's slot, 1…N. */
  | { t: 'init'; config: Config; index: number }
  /** A scrape: answer with `metrics` and the same id. */
  | { t: 'metrics'; id: number }
  /** `n` more jobs arrived at the primary. */
  | { t: 'ack'; n: number }
  | { t: 'drain' };

export type FromProxyWorker =
  | { t: 'hello' }
  | { t: 'listening'; url: string }
  /** Listening failed (`code`: the errno code, e.g. EADDRINUSE); the worker exits. */
  | { t: 'failed'; code: string | null; message: string }
  /** An exchange the worker's sampler chose, body as its bytes. */
  | { t: 'job'; exchange: Exchange }
  /** Its client requests in flight to the candidate (its pool's running + queued), when it changed: the canaries wait above canary.maxCandidateInFlight. */
  | { t: 'load'; candidateInFlight: number }
  /** The worker's registry: the answer to scrape `id`, or (null) a snapshot of its own — once listening, and last before it exits. */
  | { t: 'metrics'; id: number | null; metrics: MetricsJSON };

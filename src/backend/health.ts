import type { Logger } from 'pino';
import type { Backend } from '../core/types.js';
import { refusedKey, refusesKey, type KeyName } from './failure.js';

/**
 * What the mirror knows of each backend's state, said at once: the start-up probe's answer
 * (reachable, the engine and its version, or unreachable with the cause), then every failed copy.
 * Failures are logged rate-limited — the first at once, then at most one line a minute per
 * backend with the count since the last line and the newest cause — and kept for `/ui` and
 * `/readyz` (src/live/feed.ts, src/admin/app.ts). A 401/403 is a backend that answers but refuses
 * the key it was sent: `rejected`, its cause naming that key as the configuration calls it.
 */

/** How long between two failure lines of one backend. */
export const FAILURE_LOG_MS = 60_000;

/** One backend as `/ui` and `/readyz` show it. */
export interface BackendStatus {
  backend: Backend;
  /** The backend's host:port (never credentials: URLs with them are refused by the config). */
  host: string;
  /**
   * `unknown` until the start-up probe or a first copy says; `rejected`: it answers, but refuses
   * the key it is sent (401/403).
   */
  state: 'unknown' | 'reachable' | 'unreachable' | 'rejected';
  engine: string | null;
  version: string | null;
  /** The newest failure (a copy that got no answer or an error status), epoch ms. */
  lastError: { reason: string; outcome: string; at: number } | null;
  /** Failed copies since the start. */
  failures: number;
}

interface Entry extends BackendStatus {
  /** The key the mirror's copies carry (src/backend/failure.ts copyKey). */
  key: KeyName;
  /** Failures not yet in a log line. */
  pending: number;
  lastLogAt: number;
  timer: NodeJS.Timeout | null;
}

export class BackendHealth {
  private readonly entries = new Map<Backend, Entry>();

  constructor(
    private readonly log: Logger,
    backends: ReadonlyArray<{ backend: Backend; url: string; key?: KeyName }>,
    /** Told of every change of a backend's state or last error (the main thread's /readyz copy). */
    private readonly onChange: (all: BackendStatus[]) => void = () => {},
    private readonly now: () => number = Date.now,
  ) {
    for (const { backend, url, key } of backends) {
      this.entries.set(backend, {
        backend,
        key: key ?? { name: 'none configured', sent: false },
        host: new URL(url).host,
        state: 'unknown',
        engine: null,
        version: null,
        lastError: null,
        failures: 0,
        pending: 0,
        lastLogAt: -Infinity,
        timer: null,
      });
    }
  }

  /**
   * The start-up probe's answer: logged once per backend. `rejected`: it answered 401/403 to the
   * key the probe sent (`reason` names it); `unprobed`: it wants a key the probe does not have (the
   * candidate: the mirror's copies carry each client's own), so its state waits for a first copy.
   */
  probed(
    backend: Backend,
    r:
      | { reachable: true; engine: string; version: string | null }
      | { reachable: false; reason: string; rejected?: boolean; unprobed?: boolean },
  ): void {
    const e = this.entries.get(backend);
    if (!e) return;
    if (!r.reachable && r.unprobed) {
      this.log.info(
        { backend, url: e.host, reason: r.reason },
        `${backend} answers at ${e.host} but ${r.reason}; its engine and capabilities are not probed at start (the mirror's copies carry each client's own key)`,
      );
      return;
    }
    if (!r.reachable && r.rejected) {
      e.state = 'rejected';
      e.lastError = { reason: r.reason, outcome: 'probe', at: this.now() };
      this.log.warn(
        { backend, url: e.host, reason: r.reason },
        `${backend} at ${e.host} ${r.reason} (the mirror's copies to it will fail until the key is right)`,
      );
    } else if (r.reachable) {
      Object.assign(e, { state: 'reachable', engine: r.engine, version: r.version });
      this.log.info(
        { backend, url: e.host, engine: r.engine, version: r.version },
        `${backend} reachable at ${e.host}: ${r.engine}${r.version ? ` ${r.version}` : ''}`,
      );
    } else {
      e.state = 'unreachable';
      e.lastError = { reason: r.reason, outcome: 'probe', at: this.now() };
      this.log.warn(
        { backend, url: e.host, reason: r.reason },
        `${backend} unreachable at ${e.host}: ${r.reason} (the mirror's copies to it will fail until it answers)`,
      );
    }
    this.changed();
  }

  /** A copy the backend answered with a usable status: reachable (said again after a failure). */
  answered(backend: Backend): void {
    const e = this.entries.get(backend);
    if (!e || e.state === 'reachable') return;
    const was = e.state;
    e.state = 'reachable';
    if (was === 'unreachable') this.log.info({ backend, url: e.host }, `${backend} reachable again at ${e.host}`);
    else if (was === 'rejected')
      this.log.info({ backend, url: e.host }, `${backend} accepts its key again at ${e.host}`);
    this.changed();
  }

  /**
   * A failed copy (`candidate_error` / `baseline_error`, with the cause). `status` 0: no HTTP
   * answer at all (refused, reset, timeout): the backend is unreachable; 401/403: it refused the
   * key the copies carry, named in the cause.
   */
  failed(backend: Backend, outcome: string, reason: string, status: number): void {
    const e = this.entries.get(backend);
    if (!e) return;
    e.failures++;
    e.pending++;
    const refused = refusesKey(status);
    e.lastError = { reason: refused ? `${refusedKey(e.key)}: ${reason}` : reason, outcome, at: this.now() };
    if (status === 0) e.state = 'unreachable';
    else if (refused) e.state = 'rejected';
    if (this.now() - e.lastLogAt >= FAILURE_LOG_MS) this.flush(e);
    else if (e.timer === null) {
      e.timer = setTimeout(() => this.flush(e), Math.max(0, e.lastLogAt + FAILURE_LOG_MS - this.now()));
      e.timer.unref();
    }
    this.changed();
  }

  private flush(e: Entry): void {
    if (e.timer !== null) clearTimeout(e.timer);
    e.timer = null;
    if (e.pending === 0 || e.lastError === null) return;
    const first = e.lastLogAt === -Infinity;
    const n = e.pending;
    e.pending = 0;
    e.lastLogAt = this.now();
    const { reason, outcome } = e.lastError;
    this.log.warn(
      { backend: e.backend, url: e.host, outcome, reason, count: n, total: e.failures },
      first
        ? `${outcome}: ${reason} (mirrored copies to ${e.backend} fail; further failures are logged at most once a minute)`
        : `${outcome}: ${reason} (${n} failed ${n === 1 ? 'copy' : 'copies'} in the last minute, ${e.failures} since the start)`,
    );
  }

  snapshot(): BackendStatus[] {
    return [...this.entries.values()].map((e) => ({
      backend: e.backend,
      host: e.host,
      state: e.state,
      engine: e.engine,
      version: e.version,
      lastError: e.lastError,
      failures: e.failures,
    }));
  }

  private changed(): void {
    this.onChange(this.snapshot());
  }

  close(): void {
    for (const e of this.entries.values()) {
      if (e.timer !== null) this.flush(e);
    }
  }
}

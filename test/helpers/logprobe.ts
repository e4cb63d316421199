import { Writable } from 'node:stream';
import { buildConfig } from '../../src/config/load.js';
import type { ConfigInput } from '../../src/config/schema.js';
import { createRuntime, type LogprobeRuntime, type RuntimeParts } from '../../src/server/server.js';
import { createLogger } from '../../src/log/logger.js';
import type { Metrics } from '../../src/metrics/registry.js';
import type { Pool } from 'undici';
import type { Config } from '../../src/config/schema.js';
import type { Logger } from 'pino';
import type { MirrorListeners } from '../../src/pair/types.js';

/** Log lines captured in memory, as the JSON objects pino wrote. */
export class LogSink extends Writable {
  readonly raw: string[] = [];
  override _write(chunk: Buffer, _enc: string, cb: () => void): void {
    for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) this.raw.push(line);
    cb();
  }
  get lines(): Array<Record<string, unknown>> {
    return this.raw.map((l) => JSON.parse(l) as Record<string, unknown>);
  }
  text(): string {
    return this.raw.join('\n');
  }
}

export interface StartedLogprobe {
  runtime: LogprobeRuntime;
  proxyUrl: string;
  adminUrl: string;
  logs: LogSink;
  close(): Promise<void>;
}

/**
 * The mirror worker's entry when running from the sources: a boot module that registers tsx in
 * the worker thread, then loads src/worker/worker.ts. Tests that start a runtime pass it.
 */
export const MIRROR_WORKER_URL = new URL('./mirror-worker.mjs', import.meta.url);

/** Starts a full logprobe (proxy + admin) on port 0 with the given config, logs captured. */
export async function startLogprobe(
  input: ConfigInput,
  options: {
    makeParts?: (shared: { config: Config; logger: Logger; metrics: Metrics; candidatePool: Pool }) => RuntimeParts;
    listeners?: MirrorListeners;
    level?: string;
    /** The mirror worker's entry (default {@link MIRROR_WORKER_URL}). */
    mirrorWorkerUrl?: URL;
  } = {},
): Promise<StartedLogprobe> {
  const config = buildConfig({
    ...input,
    listen: { host: '127.0.0.1', port: 0, ...(input.listen ?? {}) },
    admin: { host: '127.0.0.1', port: 0, ...(input.admin ?? {}) },
    log: { level: options.level ?? 'info', ...(input.log ?? {}) },
    capture: { enabled: false, ...(input.capture ?? {}) },
    // The start-up probe's requests would reach the tests' upstreams; tests of it turn it on.
    probe: { atStart: 'off', ...(input.probe ?? {}) },
  });
  const logs = new LogSink();
  const logger = createLogger({
    level: config.log.level,
    redact: config.log.redact,
    keys: [config.baseline.apiKey],
    destination: logs,
  });
  const runtime = createRuntime(config, {
    logger,
    logDestination: logs,
    mirrorWorkerUrl: options.mirrorWorkerUrl ?? MIRROR_WORKER_URL,
    makeParts: options.makeParts,
    listeners: options.listeners,
  });
  const { proxyUrl, adminUrl } = await runtime.listen();
  return { runtime, proxyUrl, adminUrl, logs, close: () => runtime.close() };
}

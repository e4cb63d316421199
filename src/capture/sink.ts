import { open, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { errnoReason, LogprobeError } from '../errors/index.js';
import type { Metrics } from '../metrics/registry.js';
import type { MirrorListeners } from '../pair/types.js';
import { CaptureWriter } from './writer.js';
import { CAPTURE_ERROR_REASONS } from '../metrics/labels.js';
import { makeDir, type CaptureFs } from './files.js';
import { configuredKeys } from '../log/redact.js';

/**
 * What `serve` checks before it listens, when captures are on: the directory can be created
 * (0700), and a file in it written, fsynced and removed — what the writer will do with every
 * record. Throws a one-line LOGPROBE_UNWRITABLE_FILE error (exit 2) naming the directory, the step
 * and the reason; a proxy that would drop every record must not start as if it captured.
 */
export async function checkCaptureDir(dir: string): Promise<void> {
  let step = 'create the directory';
  try {
    await makeDir(dir);
    step = 'write a file in it';
    const probe = join(dir, `.logprobe-probe-${process.pid}`);
    const handle = await open(probe, 'w', 0o600);
    try {
      await handle.write('logprobe: capture directory probe\n');
      step = 'sync a file in it';
      await handle.sync();
    } finally {
      await handle.close();
      await unlink(probe).catch(() => undefined);
    }
  } catch (err) {
    throw new LogprobeError(
      'LOGPROBE_UNWRITABLE_FILE',
      `capture.dir ${dir}: cannot ${step}: ${errnoReason(err, 'write')} (set capture.dir to a writable directory, or capture.enabled: false)`,
      {
        cause: err,
      },
    );
  }
}

/**
 * The capture writer of a `serve` process, from `capture.*`: every failure counted in
 * `logprobe_capture_errors_total{reason}`, every record it lost in
 * `logprobe_capture_records_dropped_total{reason}` (series zero-initialised, so `rate()` sees the
 * first), and `logprobe_capture_ok` 0 from a loss until a write succeeds again. Clients never see
 * it: `/readyz` does not depend on captures.
 */
export function createCaptureWriter(deps: {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  fs?: CaptureFs;
}): CaptureWriter {
  const { config, metrics } = deps;
  const errors = metrics.counter('logprobe_capture_errors_total');
  const dropped = metrics.counter('logprobe_capture_records_dropped_total');
  const ok = metrics.gauge('logprobe_capture_ok');
  for (const reason of CAPTURE_ERROR_REASONS) {
    errors.inc({ reason }, 0);
    dropped.inc({ reason }, 0);
  }
  ok.set(1);
  return new CaptureWriter({
    dir: config.capture.dir,
    maxFileBytes: config.capture.maxFileMB * 1024 * 1024,
    gzip: config.capture.gzip,
    record: {
      includePrompts: config.capture.includePrompts,
      thresholds: {
        gapAmbiguous: config.analysis.gapAmbiguous,
        gapSystematic: config.analysis.gapSystematic,
        globalFraction: config.analysis.globalFraction,
        minAligned: config.analysis.minAligned,
      },
      secrets: configuredKeys(config),
      redactFields: config.log.redact,
    },
    logger: deps.logger,
    onError: (reason, records) => {
      errors.inc({ reason });
      if (records > 0) dropped.inc({ reason }, records);
    },
    onHealth: (healthy) => ok.set(healthy ? 1 : 0),
    fs: deps.fs,
  });
}

/** `inner` (the demo's or a test's listeners) plus the writer: each pair is captured first. */
export function withCapture(writer: CaptureWriter, inner: MirrorListeners | undefined): MirrorListeners {
  return {
    onPair(pair) {
      writer.write(pair);
      inner?.onPair?.(pair);
    },
    ...(inner?.onAlert ? { onAlert: inner.onAlert.bind(inner) } : {}),
  };
}

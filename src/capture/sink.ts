import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { Metrics } from '../metrics/registry.js';
import type { MirrorListeners } from '../mirror/types.js';
import { CAPTURE_ERROR_REASONS, CaptureWriter } from './writer.js';
import type { CaptureFs } from './files.js';

/**
 * The capture writer of a `serve` process, from `capture.*`: every failure counted in
 * `logprobe_capture_errors_total{reason}` (series zero-initialised, so `rate()` sees the first).
 */
export function createCaptureWriter(deps: { config: Config; logger: Logger; metrics: Metrics; fs?: CaptureFs }): CaptureWriter {
  const { config, metrics } = deps;
  const errors = metrics.counter('logprobe_capture_errors_total');
  for (const reason of CAPTURE_ERROR_REASONS) errors.inc({ reason }, 0);
  return new CaptureWriter({
    dir: config.capture.dir,
    maxFileBytes: config.capture.maxFileMB * 1024 * 1024,
    gzip: config.capture.gzip,
    record: {
      includePrompts: config.capture.includePrompts,
      thresholds: { gapAmbiguous: config.analysis.gapAmbiguous, gapSystematic: config.analysis.gapSystematic, globalFraction: config.analysis.globalFraction, minAligned: config.analysis.minAligned },
      secrets: [config.baseline.apiKey],
      redactFields: config.log.redact,
    },
    logger: deps.logger,
    onError: (reason) => errors.inc({ reason }),
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

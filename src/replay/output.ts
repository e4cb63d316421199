import { basename, dirname } from 'node:path';
import { pino } from 'pino';
import { CaptureWriter, type CaptureErrorReason } from '../capture/writer.js';
import type { Thresholds } from '../core/index.js';
import { unwritableFile } from '../errors.js';

/**
 * The capture `replay` writes (`--out`): one file, emptied if it exists, never rotated, prompts
 * kept (a replay's output is a valid replay input). Opened before any request is sent, so an
 * unwritable path is a usage error, not a gate that passed on nothing.
 */
export async function openReplayCapture(o: { file: string; thresholds: Thresholds; secrets: Array<string | null>; onError: (reason: CaptureErrorReason) => void }): Promise<CaptureWriter> {
  const writer = new CaptureWriter({
    dir: dirname(o.file),
    fileName: () => basename(o.file),
    truncate: true,
    maxFileBytes: Infinity,
    gzip: false,
    record: { includePrompts: true, thresholds: o.thresholds, secrets: o.secrets },
    logger: pino({ level: 'silent' }),
    onError: o.onError,
  });
  try {
    await writer.open();
  } catch (err) {
    throw unwritableFile(o.file, err);
  }
  return writer;
}

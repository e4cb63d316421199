import { open } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { pino } from 'pino';
import { CaptureWriter } from '../capture/writer.js';
import type { CaptureErrorReason } from '../metrics/labels.js';
import type { Thresholds } from '../core/index.js';
import { unwritableFile } from '../errors/index.js';

/**
 * Writes and syncs a byte to `file` and empties it again: a file can open for writing and refuse
 * every byte (`/proc/version`: EIO; `/dev/full`: ENOSPC), and only a write says so. A device that
 * cannot be synced or truncated (`/dev/null`: EINVAL) takes writes: that is fine.
 */
export async function probeWrite(file: string): Promise<void> {
  const handle = await open(file, 'w', 0o600);
  try {
    await handle.write('\n');
    await handle.sync().catch(unlessInvalid);
    await handle.truncate(0).catch(unlessInvalid);
  } finally {
    await handle.close();
  }
}

function unlessInvalid(err: unknown): void {
  if ((err as { code?: string }).code !== 'EINVAL') throw err;
}

/**
 * The capture `replay` writes (`--out`): one file, emptied if it exists, never rotated, prompts
 * kept (a replay's output is a valid replay input). Opened and written to before any request is
 * sent ({@link probeWrite}), so an unwritable path is a usage error (exit 2), not a gate that
 * passed on nothing.
 */
export async function openReplayCapture(o: {
  file: string;
  thresholds: Thresholds;
  secrets: Array<string | null>;
  redactFields?: readonly string[];
  onError: (reason: CaptureErrorReason) => void;
}): Promise<CaptureWriter> {
  const writer = new CaptureWriter({
    dir: dirname(o.file),
    fileName: () => basename(o.file),
    truncate: true,
    maxFileBytes: Infinity,
    gzip: false,
    record: { includePrompts: true, thresholds: o.thresholds, secrets: o.secrets, redactFields: o.redactFields ?? [] },
    logger: pino({ level: 'silent' }),
    onError: o.onError,
  });
  try {
    await probeWrite(o.file);
    await writer.open();
  } catch (err) {
    throw unwritableFile(o.file, err);
  }
  return writer;
}

import { join } from 'node:path';
import type { Logger } from 'pino';
import type { CaptureErrorReason } from '../metrics/labels.js';
import type { MirroredPair } from '../pair/types.js';
import { captureFileName, errorReason, gzipFile, nodeCaptureFs, type CaptureFile, type CaptureFs } from './files.js';
import { recordLine, type RecordOptions } from './record.js';

/** How a {@link CaptureWriter} writes. */
export interface CaptureWriterOptions {
  dir: string;
  /** Rotate before a file would grow past this; `Infinity` never rotates. */
  maxFileBytes: number;
  /** Compress rotated files in the background. */
  gzip: boolean;
  record: RecordOptions;
  logger: Logger;
  /** Called once per failure (a failed open, write, compression, or a record refused), with the records it lost. */
  onError?: (reason: CaptureErrorReason, records: number) => void;
  /** Called when writing starts failing (records lost) and when it works again: `logprobe_capture_ok`. */
  onHealth?: (ok: boolean) => void;
  /** File names, numbered from 1 (default {@link captureFileName}). */
  fileName?: (n: number) => string;
  /** Empty an existing file instead of appending (replay's `--out`). */
  truncate?: boolean;
  /** Longest time a record waits in memory, ms (default 1000: a crash loses at most a second). */
  flushIntervalMs?: number;
  /** Write as soon as this much is buffered (default 256 KiB). */
  flushBytes?: number;
  /** Records beyond this much unwritten data are dropped as `overflow` (default 64 MiB). */
  maxPendingBytes?: number;
  fs?: CaptureFs;
}

/**
 * Appends capture records to JSONL files: buffered, rotated by size, optionally gzipped on
 * rotation, every file 0600. A failure (ENOSPC, EACCES, …) drops the records it concerns, is
 * counted and logged once per burst, and never throws to the caller: the proxy keeps serving.
 * After a failed write the file is abandoned, so a partial line can only be a file's last line,
 * which `analyze` reports as truncated.
 */
export class CaptureWriter {
  private readonly fs: CaptureFs;
  private readonly log: Logger;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private file: CaptureFile | null = null;
  private fileSize = 0;
  private fileCount = 0;
  private dirReady = false;
  private draining: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  private readonly gzips = new Set<Promise<void>>();
  private readonly failing = new Map<CaptureErrorReason, number>();
  /** False from a failure that lost records until a write succeeds. */
  private ok = true;
  /** Files opened so far, in order (their final names may gain `.gz`). */
  readonly files: string[] = [];
  /** Records written and records lost. */
  readonly stats = { written: 0, dropped: 0 };

  constructor(private readonly options: CaptureWriterOptions) {
    this.fs = options.fs ?? nodeCaptureFs;
    this.log = options.logger.child({ module: 'capture' });
  }

  /** Queues one mirrored pair. Never throws and never waits: the mirror must not slow down. */
  write(pair: MirroredPair): void {
    if (this.closed) {
      this.fail('write', new Error('capture writer closed'), 1);
      return;
    }
    let line: Buffer;
    try {
      line = Buffer.from(`${recordLine(pair, this.options.record)}\n`, 'utf8');
    } catch (err) {
      this.fail('write', err, 1);
      return;
    }
    if (this.pendingBytes + line.length > (this.options.maxPendingBytes ?? 64 * 1024 * 1024)) {
      this.fail('overflow', new Error('capture buffer full: the disk is slower than the mirror'), 1);
      return;
    }
    this.pending.push(line);
    this.pendingBytes += line.length;
    if (this.pendingBytes >= (this.options.flushBytes ?? 256 * 1024)) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), this.options.flushIntervalMs ?? 1000).unref();
  }

  /** Opens the first file now (replay checks its `--out` before sending anything); throws on failure. */
  async open(): Promise<string> {
    await this.openNext();
    return this.files[this.files.length - 1]!;
  }

  /** Writes everything buffered so far; resolves when it is on disk (or dropped and counted). */
  flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.draining ??= this.drain().finally(() => {
      this.draining = null;
    });
    return this.draining;
  }

  /** Flushes, closes the current file and waits for background compression. */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
    await this.closeFile(false);
    await Promise.all(this.gzips);
  }

  private async drain(): Promise<void> {
    const max = this.options.maxFileBytes;
    while (this.pending.length > 0) {
      if (this.file === null) {
        try {
          await this.openNext();
        } catch (err) {
          // Nowhere to write: drop what waits, try again with the next records.
          this.dropPending(errorReason(err), err);
          return;
        }
      }
      let bytes = 0;
      let count = 0;
      for (const line of this.pending) {
        if (this.fileSize + bytes + line.length > max && this.fileSize + bytes > 0) break;
        bytes += line.length;
        count++;
      }
      if (count === 0) {
        await this.closeFile(this.options.gzip);
        continue;
      }
      const batch = this.pending.splice(0, count);
      this.pendingBytes -= bytes;
      try {
        await this.file!.write(batch.length === 1 ? batch[0]! : Buffer.concat(batch, bytes));
        this.fileSize += bytes;
        this.stats.written += count;
        this.recovered();
      } catch (err) {
        this.fail(errorReason(err), err, count);
        await this.abandonFile();
      }
    }
  }

  private async openNext(): Promise<void> {
    if (!this.dirReady) {
      await this.fs.mkdir(this.options.dir);
      this.dirReady = true;
    }
    const n = ++this.fileCount;
    const path = join(this.options.dir, (this.options.fileName ?? captureFileName)(n));
    const open = () => this.fs.open(path, { truncate: this.options.truncate === true });
    try {
      this.file = await open();
    } catch (err) {
      try {
        if ((err as { code?: string }).code !== 'ENOENT') throw err;
        // The directory was removed meanwhile: made again, and the file opened in it, now.
        this.dirReady = false;
        await this.fs.mkdir(this.options.dir);
        this.dirReady = true;
        this.file = await open();
      } catch (again) {
        // No file was made: its number goes to the next attempt.
        this.fileCount--;
        throw again;
      }
    }
    this.fileSize = 0;
    this.files.push(path);
  }

  /**
   * Closes the current file after a failed write. One that holds no whole record (the disk was
   * full from its first write) is removed and its number used again, so that a directory that
   * keeps failing is retried without leaving an empty file per attempt; replay's `--out` (the
   * user's own path) stays.
   */
  private async abandonFile(): Promise<void> {
    const empty = this.file !== null && this.fileSize === 0 && this.options.truncate !== true;
    const path = this.files[this.files.length - 1]!;
    await this.closeFile(false);
    if (!empty) return;
    try {
      await this.fs.remove(path);
      this.files.pop();
      this.fileCount--;
    } catch (err) {
      this.log.debug({ path, error: (err as Error).message }, 'capture: cannot remove a failed empty file');
    }
  }

  /** Closes the current file; a full one is compressed in the background when asked. */
  private async closeFile(compress: boolean): Promise<void> {
    const file = this.file;
    if (file === null) return;
    this.file = null;
    const path = this.files[this.files.length - 1]!;
    try {
      await file.close();
    } catch (err) {
      this.fail(errorReason(err), err, 0);
    }
    if (compress) {
      const job = gzipFile(path).then(
        (gz) => {
          this.files[this.files.indexOf(path)] = gz;
        },
        (err: unknown) => this.fail(errorReason(err), err, 0),
      );
      this.gzips.add(job);
      void job.finally(() => this.gzips.delete(job));
    }
  }

  private dropPending(reason: CaptureErrorReason, err: unknown): void {
    const count = this.pending.length;
    this.pending = [];
    this.pendingBytes = 0;
    this.fail(reason, err, count);
  }

  /** Counts and, once per burst of one reason, logs a failure (never the record: it holds traffic). */
  private fail(reason: CaptureErrorReason, err: unknown, records: number): void {
    this.stats.dropped += records;
    this.options.onError?.(reason, records);
    if (records > 0 && this.ok) {
      this.ok = false;
      this.options.onHealth?.(false);
    }
    const lost = this.failing.get(reason);
    this.failing.set(reason, (lost ?? 0) + records);
    if (lost !== undefined) return;
    const e = err as { code?: string; message?: string };
    this.log.error(
      { reason, code: e.code, error: e.message ?? String(err), dir: this.options.dir, recordsLost: records },
      'capture write failed: records are dropped until it recovers',
    );
  }

  private recovered(): void {
    if (!this.ok) {
      this.ok = true;
      this.options.onHealth?.(true);
    }
    if (this.failing.size === 0) return;
    this.log.warn({ recordsLost: Object.fromEntries(this.failing) }, 'capture writes recovered');
    this.failing.clear();
  }
}

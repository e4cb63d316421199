import { createReadStream } from 'node:fs';
import { open, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { READABLE_CAPTURE_VERSIONS, type CaptureRecord } from './record.js';
import { errnoReason, LogprobeError, unreadableFile } from '../errors/index.js';

/** One line of a JSONL file: its parsed value, or why it could not be used (`file:line: error`). */
export type LineItem =
  | { file: string; line: number; value: unknown; error?: undefined }
  | { file: string; line: number; error: string; value?: undefined };

/** Longest line kept in memory; a longer one is skipped and reported (a corrupt file without newlines must not exhaust memory). */
export const MAX_LINE_BYTES = 256 * 1024 * 1024;

/** Checks that `file` can be opened and says whether it is gzip (magic bytes 1f 8b); throws an unreadable-file {@link LogprobeError}. */
export async function probeFile(file: string): Promise<{ gzip: boolean; size: number }> {
  let handle;
  try {
    handle = await open(file, 'r');
  } catch (err) {
    throw unreadableFile(file, errnoReason(err, 'read'), err);
  }
  try {
    const st = await handle.stat();
    if (st.isDirectory()) throw unreadableFile(file, 'is a directory');
    const head = Buffer.alloc(2);
    const { bytesRead } = await handle.read(head, 0, 2, 0);
    return { gzip: bytesRead === 2 && head[0] === 0x1f && head[1] === 0x8b, size: st.size };
  } catch (err) {
    throw err instanceof LogprobeError ? err : unreadableFile(file, errnoReason(err, 'read'), err);
  } finally {
    await handle.close();
  }
}

/**
 * The files behind command-line inputs: a file as given, a directory as its `*.jsonl` and
 * `*.jsonl.gz` files in name order (not recursive; `logprobe analyze captures/`). Every file is
 * probed first, so that an unreadable one is a usage error before any output. Throws
 * an unreadable-file {@link LogprobeError}.
 */
export async function resolveInputs(paths: readonly string[]): Promise<{ files: string[]; bytes: number }> {
  const files: string[] = [];
  let bytes = 0;
  for (const path of paths) {
    let listed = [path];
    const st = await stat(path).catch(() => null);
    if (st?.isDirectory()) {
      let names: string[];
      try {
        names = await readdir(path);
      } catch (err) {
        throw unreadableFile(path, errnoReason(err, 'read'), err);
      }
      listed = names
        .filter((n) => /\.jsonl(\.gz)?$/.test(n))
        .sort()
        .map((n) => join(path, n));
      if (listed.length === 0) throw unreadableFile(path, 'no .jsonl or .jsonl.gz file in this directory');
    }
    for (const file of listed) {
      bytes += (await probeFile(file)).size;
      files.push(file);
    }
  }
  return { files, bytes };
}

/**
 * Streams the lines of a JSONL file, plain or gzip, in constant memory (one line at a time).
 * Blank lines are skipped. A line that is not JSON is an error item; an unterminated last line
 * that is not JSON is `truncated record (incomplete JSON)` (a crash mid-write), and a gzip stream
 * cut short is reported once, after the lines it held. `onBytes` gets the file bytes consumed
 * (compressed bytes for gzip), for progress.
 */
export async function* readJsonLines(
  file: string,
  options: { onBytes?: (n: number) => void; maxLineBytes?: number } = {},
): AsyncGenerator<LineItem> {
  const { gzip } = await probeFile(file);
  const { raw, source } = openSource(file, gzip, options.onBytes);
  const lines = new LineSplitter(file, options.maxLineBytes ?? MAX_LINE_BYTES);
  try {
    for await (const chunk of source as AsyncIterable<Buffer>) {
      if (!gzip) options.onBytes?.(chunk.length);
      yield* lines.push(chunk);
    }
  } catch (err) {
    const item = lines.end();
    if (item) yield item;
    yield { file, line: lines.count + 1, error: readFailure(err, gzip) };
    return;
  } finally {
    raw.destroy();
    if (source !== raw) source.destroy();
  }
  const item = lines.end();
  if (item) yield item;
}

/** The file's byte stream, gunzipped when `gzip`; `onBytes` sees the compressed bytes then. */
function openSource(
  file: string,
  gzip: boolean,
  onBytes: ((n: number) => void) | undefined,
): { raw: Readable; source: Readable } {
  const raw = createReadStream(file, { highWaterMark: 256 * 1024 });
  if (!gzip) return { raw, source: raw };
  const gunzip = createGunzip();
  raw.on('error', (err) => gunzip.destroy(err));
  // pipe() already reads raw in flowing mode, so a 'data' listener sees the compressed bytes.
  if (onBytes) raw.on('data', (c) => onBytes((c as Buffer).length));
  return { raw, source: raw.pipe(gunzip) };
}

/** Why reading stopped: a gzip stream cut short or corrupt, or the read's own error. */
function readFailure(err: unknown, gzip: boolean): string {
  const code = (err as { code?: string }).code;
  return gzip && (code === 'Z_BUF_ERROR' || code === 'Z_DATA_ERROR')
    ? `gzip stream cut short or corrupt (${(err as Error).message})`
    : `read failed (${errnoReason(err, 'read')})`;
}

/**
 * Splits chunks into lines and parses each: the parts of the line so far, its size, whether it is
 * over the limit and the line number live across chunks. A line over the limit is dropped as it
 * grows and reported once it ends.
 */
class LineSplitter {
  private parts: Buffer[] = [];
  private size = 0;
  private overlong = false;
  /** Lines ended so far (blank ones included). */
  count = 0;

  constructor(
    private readonly file: string,
    private readonly maxLine: number,
  ) {}

  /** The items of the lines this chunk ends, one at a time. */
  *push(chunk: Buffer): Generator<LineItem> {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(10, start);
      const end = nl < 0 ? chunk.length : nl;
      if (end > start && !this.overlong) {
        if (this.size + (end - start) > this.maxLine) {
          this.overlong = true;
          this.parts = [];
          this.size = 0;
        } else {
          this.parts.push(chunk.subarray(start, end));
          this.size += end - start;
        }
      }
      if (nl < 0) break;
      const item = this.finish(true);
      if (item) yield item;
      start = nl + 1;
    }
  }

  /** The unterminated last line's item, if there is one. */
  end(): LineItem | null {
    return this.size > 0 || this.overlong ? this.finish(false) : null;
  }

  private finish(complete: boolean): LineItem | null {
    const { file, maxLine } = this;
    const line = ++this.count;
    const bytes = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, this.size);
    const wasOverlong = this.overlong;
    this.parts = [];
    this.size = 0;
    this.overlong = false;
    if (wasOverlong) return { file, line, error: `line longer than ${Math.round(maxLine / 1024 / 1024)} MB, skipped` };
    const text = bytes.toString('utf8').replace(/\r$/, '');
    if (text.trim() === '') return null;
    try {
      return { file, line, value: JSON.parse(text) as unknown };
    } catch (err) {
      if (!complete) return { file, line, error: 'truncated record (incomplete JSON)' };
      return { file, line, error: `invalid JSON (${(err as Error).message.split('\n')[0]})` };
    }
  }
}

/** Why a parsed line is not a capture record of a version this logprobe reads, or null when it is one. */
export function captureRecordError(value: unknown): string | null {
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    return 'not a capture record (not an object)';
  const r = value as Record<string, unknown>;
  if (r.v === undefined) return 'not a capture record (no "v" field)';
  if (typeof r.v !== 'number' || !READABLE_CAPTURE_VERSIONS.includes(r.v))
    return `unsupported capture version ${JSON.stringify(r.v)} (this logprobe reads ${READABLE_CAPTURE_VERSIONS.slice(0, -1).join(', ')} and ${READABLE_CAPTURE_VERSIONS.at(-1)})`;
  if (typeof r.route !== 'string') return 'not a capture record (no "route")';
  for (const side of ['candidate', 'baseline'] as const) {
    const s = r[side] as Record<string, unknown> | null | undefined;
    // Baseline-free records have no baseline side.
    if (side === 'baseline' && s === null) continue;
    // Golden records (logprobe record) have no candidate side.
    if (side === 'candidate' && s === null && r.golden === true) continue;
    if (s === null || typeof s !== 'object' || Array.isArray(s)) return `not a capture record (no "${side}")`;
    if (typeof s.status !== 'number') return `not a capture record (no "${side}.status")`;
    if (!('body' in s)) return `not a capture record (no "${side}.body")`;
  }
  if (r.request === null || typeof r.request !== 'object' || Array.isArray(r.request))
    return 'not a capture record (no "request")';
  return null;
}

/** Narrows a parsed line to a capture record (after {@link captureRecordError} returned null). */
export function asCaptureRecord(value: unknown): CaptureRecord {
  return value as CaptureRecord;
}

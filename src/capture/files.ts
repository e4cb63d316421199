import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, stat, unlink, utimes } from 'node:fs/promises';
import { dirname } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';

/** An open capture file: appends whole buffers. */
export interface CaptureFile {
  /** Writes all of `data` (looping over short writes). */
  write(data: Uint8Array): Promise<void>;
  close(): Promise<void>;
}

/**
 * The file system the capture writer uses. Injectable so that tests can produce ENOSPC and
 * EACCES without root tricks (CI runs as root, where a read-only directory stops nothing).
 */
export interface CaptureFs {
  /** Creates the directory (and parents); 0700 when new: captures hold traffic. */
  mkdir(dir: string): Promise<void>;
  /** Opens a file for writing, created 0600; `truncate` empties an existing one instead of appending. */
  open(path: string, options: { truncate: boolean }): Promise<CaptureFile>;
  /** Removes a file (one that failed before it held a whole record). */
  remove(path: string): Promise<void>;
}

/**
 * `mkdir -p` with mode 0700 that fails instead of looping: node's own recursive mkdir retries a
 * directory whose creation answers ENOENT after its parent exists — what procfs and sysfs answer
 * (`/proc/nope`) — forever, in a libuv thread at full CPU, and its promise never settles. Here
 * each level is tried once more after its parent was made, and a second ENOENT is thrown.
 */
export async function makeDir(dir: string): Promise<void> {
  const once = async (): Promise<boolean> => {
    try {
      await mkdir(dir, { mode: 0o700 });
      return true;
    } catch (err) {
      const code = (err as { code?: string }).code;
      // An existing directory is what we want; an existing file is an error (EEXIST says so).
      if (code === 'EEXIST' && (await stat(dir).catch(() => null))?.isDirectory()) return true;
      if (code === 'ENOENT') return false;
      throw err;
    }
  };
  if (await once()) return;
  const parent = dirname(dir);
  if (parent !== dir) await makeDir(parent);
  if (!(await once()))
    throw Object.assign(new Error(`ENOENT: cannot create directory '${dir}'`), { code: 'ENOENT', path: dir });
}

/** The real file system. */
export const nodeCaptureFs: CaptureFs = {
  async mkdir(dir) {
    await makeDir(dir);
  },
  async open(path, options) {
    const handle = await open(path, options.truncate ? 'w' : 'a', 0o600);
    try {
      // The mode given to open() only applies to a new file; a file replay truncates may exist.
      // Regular files only: `--out /dev/null` must not chmod the device.
      if ((await handle.stat()).isFile()) await handle.chmod(0o600);
    } catch (err) {
      await handle.close();
      throw err;
    }
    return {
      async write(data) {
        let offset = 0;
        while (offset < data.length) {
          const { bytesWritten } = await handle.write(data, offset, data.length - offset);
          offset += bytesWritten;
        }
      },
      close: () => handle.close(),
    };
  },
  async remove(path) {
    await unlink(path);
  },
};

/**
 * `capture-<UTC time>-<pid>-<n>.jsonl`, e.g. `capture-2026-11-29T070000.123Z-41-1.jsonl`: sorts
 * by time, unique per process and file. No colons: scp, tar and some file systems treat them
 * specially.
 */
export function captureFileName(n: number, now: Date = new Date(), pid: number = process.pid): string {
  return `capture-${now.toISOString().replace(/:/g, '')}-${pid}-${n}.jsonl`;
}

/**
 * Compresses a finished capture file to `<file>.gz` (0600) and removes the plain one. The .gz
 * keeps the plain file's mtime, so a pruner that deletes the oldest files by mtime (config/k8s)
 * never mistakes a freshly compressed old file for the newest one. On failure the partial .gz is
 * removed and the plain file kept.
 */
export async function gzipFile(path: string): Promise<string> {
  const target = `${path}.gz`;
  const before = await stat(path);
  try {
    await pipeline(createReadStream(path), createGzip(), createWriteStream(target, { mode: 0o600, flags: 'wx' }));
    await utimes(target, before.atime, before.mtime);
  } catch (err) {
    await unlink(target).catch(() => undefined);
    throw err;
  }
  await unlink(path);
  return target;
}

/** The `logprobe_capture_errors_total` reason of a failure: the disk's own codes, else `write`. */
export function errorReason(err: unknown): 'ENOSPC' | 'EACCES' | 'EROFS' | 'write' {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return 'ENOSPC';
  if (code === 'EACCES' || code === 'EPERM') return 'EACCES';
  if (code === 'EROFS') return 'EROFS';
  return 'write';
}

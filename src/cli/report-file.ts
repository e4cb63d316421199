import { open, writeFile } from 'node:fs/promises';
import { renderHtml, type HtmlContext } from '../report/html.js';
import type { SummaryData } from '../report/summary.js';
import { UsageError } from './errors.js';

/** Why an output file cannot be written, in a few words. */
export function reason(err: unknown): string {
  const code = (err as { code?: string }).code;
  if (code === 'ENOENT') return 'no such directory';
  if (code === 'EACCES' || code === 'EPERM') return 'permission denied';
  if (code === 'EISDIR') return 'is a directory';
  // mkdir -p answers EEXIST when a part of the path is a file.
  if (code === 'ENOTDIR' || code === 'EEXIST') return 'a part of the path is not a directory';
  if (code === 'EROFS') return 'read-only file system';
  return (err as Error).message;
}

/** Fails fast (before a long analysis) when the report cannot be written: `logprobe: FILE: reason`, exit 2. */
export async function checkWritable(file: string): Promise<void> {
  try {
    const h = await open(file, 'a', 0o600);
    await h.close();
  } catch (err) {
    throw new UsageError(`${file}: ${reason(err)}`);
  }
}

/** Writes the HTML report (0600: it quotes generated text, like the captures it comes from). */
export async function writeHtmlReport(file: string, data: SummaryData, ctx: HtmlContext): Promise<void> {
  try {
    await writeFile(file, renderHtml(data, ctx), { mode: 0o600 });
  } catch (err) {
    throw new UsageError(`${file}: ${reason(err)}`);
  }
}

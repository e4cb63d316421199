import { open, writeFile } from 'node:fs/promises';
import { renderHtml, type HtmlContext } from '../report/html.js';
import type { SummaryData } from '../report/summary.js';
import { unwritableFile } from '../errors/index.js';

/** Fails fast (before a long analysis) when the report cannot be written: `logprobe: FILE: reason`, exit 2. */
export async function checkWritable(file: string): Promise<void> {
  try {
    const h = await open(file, 'a', 0o600);
    await h.close();
  } catch (err) {
    throw unwritableFile(file, err);
  }
}

/** Writes the HTML report (0600: it quotes generated text, like the captures it comes from). */
export async function writeHtmlReport(file: string, data: SummaryData, ctx: HtmlContext): Promise<void> {
  try {
    await writeFile(file, renderHtml(data, ctx), { mode: 0o600 });
  } catch (err) {
    throw unwritableFile(file, err);
  }
}

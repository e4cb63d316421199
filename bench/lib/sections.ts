import { readFileSync, writeFileSync } from 'node:fs';

/**
 * Replaces what lies between `begin` and `end` in a Markdown file, keeping the hand-written text
 * around it. Without the markers, the section goes after `fallbackBefore` (a new file) or at the
 * end of the existing file.
 */
export function writeSection(path: string, begin: string, end: string, body: string, fallbackBefore: string): void {
  let before = fallbackBefore;
  let after = '';
  try {
    const old = readFileSync(path, 'utf8');
    const i = old.indexOf(begin);
    const j = old.indexOf(end);
    if (i >= 0 && j > i) {
      before = old.slice(0, i);
      after = old.slice(j + end.length);
    } else {
      before = `${old.trimEnd()}\n\n`;
      after = '\n';
    }
  } catch {
    /* first run */
  }
  writeFileSync(path, `${before}${begin}\n${body}${end}${after}`);
}

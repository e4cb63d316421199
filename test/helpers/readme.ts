// The README's command blocks, run as written by the tests: a block is the fenced `sh` block after
// a `<!-- readme-test: NAME -->` marker, one command a line (`\` continuations joined, comments
// dropped); `logprobe`, `npx logprobe` and `node bin/logprobe.js` run this checkout's bin/logprobe.js.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { BIN } from './cli.js';

const README = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

/** The commands of the block after the marker. */
export function readmeBlock(marker: string): string[] {
  const at = README.indexOf(`<!-- readme-test: ${marker} -->`);
  assert.ok(at >= 0, `README has the ${marker} block`);
  const fence = /```sh\n([\s\S]*?)```/.exec(README.slice(at));
  assert.ok(fence, `a sh block follows the ${marker} marker`);
  return fence[1]!
    .replace(/\\\n\s*/g, '')
    .split('\n')
    .map((l) => l.replace(/(^|\s+)#\s.*$/, '').trim())
    .filter((l) => l !== '');
}

/**
 * A README command as this checkout runs it: `logprobe` (installed), `npx logprobe` and
 * `node bin/logprobe.js` (in the clone) each become this checkout's node and bin/logprobe.js.
 */
export const asHere = (line: string): string =>
  line.replace(/(^|\s)(?:npx logprobe|node bin\/logprobe\.js|logprobe)(?=\s|$)/g, `$1"${process.execPath}" "${BIN}"`);

/** Runs one command line with bash in `cwd`, `env` added to the environment. */
export function runLine(
  cmd: string,
  cwd: string,
  env: Record<string, string> = {},
): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn('bash', ['-c', cmd], {
      cwd,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    child.on('close', (code) => resolve({ code, out }));
  });
}

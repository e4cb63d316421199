/**
 * The demo's alert line numbers the pair that caused it (#26 point 7: "at mirrored request 10"
 * beside "over 11 requests"): the mirror's thread reports a transition before its pair, as a
 * message of its own, so the line waits for that pair. With a window that fires on the third
 * compared request at once, the line must say request 3 over 3 requests, after pair #3's line.
 * Runs the built demo (dist/, as the CLI tests do): its mirror worker thread is the built one.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chooseEngines, planFault } from '@logprobe/engine';
import { tempDir } from './helpers/capture.js';

const BUILT = new URL('../dist/demo/run.js', import.meta.url).href;

test('the alert line comes after the pair that fired it, with its number and the window it counted', async (t) => {
  const { runDemo } = (await import(BUILT)) as typeof import('../src/demo/run.js');
  const lines: string[] = [];
  const summary = await runDemo({
    duration: 3,
    rate: 4,
    port: 0,
    adminPort: 0,
    captureDir: tempDir(t, 'logprobe-demo-order-'),
    alert: { window: 20, minRequests: 3, forSeconds: 0 },
    engines: () =>
      chooseEngines({
        choice: 'sim',
        plan: planFault('state-shift'),
        seed: 1,
        notice: () => {},
        engine: { api: 'llamacpp' },
      }),
    signal: new AbortController().signal,
    out: (l) => lines.push(l),
  });
  const firing = lines.findIndex((l) => l.startsWith('▲ ALERT FIRING  LogprobGlobalShift'));
  assert.ok(firing >= 0, lines.join('\n'));
  const m = /at mirrored request (\d+) .* over the last (\d+) compared requests?/.exec(lines[firing]!);
  assert.ok(m, lines[firing]);
  assert.equal(Number(m[2]), 3, 'the window held three requests when it fired');
  assert.equal(Number(m[1]), 3, 'and that was the third mirrored pair');
  const before = lines.slice(0, firing).filter((l) => /^# +\d+ /.test(l));
  assert.match(before[before.length - 1] ?? '', /^# {3}3 /, "pair #3's line comes first");
  assert.ok(summary.mirrored >= 3);
});

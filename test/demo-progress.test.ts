/**
 * The demo talks from its first second: before the engines answer it says that it is starting
 * them, what the engines' start reports on the way, every few seconds the stage still running,
 * and the proxy's start — all before the banner. Engines that take 5.5 s to start stand for a
 * first run's model generation and library load. Runs the built demo (dist/, as the CLI tests do).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { chooseEngines, planFault } from '@logprobe/engine';
import { tempDir } from './helpers/capture.js';

const BUILT = new URL('../dist/demo/run.js', import.meta.url).href;

test('the demo says what it is doing while the engines start, before its banner', async (t) => {
  const { runDemo, StartProgress } = (await import(BUILT)) as typeof import('../src/demo/run.js');
  assert.equal(typeof StartProgress, 'function');
  const lines: Array<{ at: number; line: string }> = [];
  const t0 = Date.now();
  await runDemo({
    duration: 1,
    rate: 2,
    port: 0,
    adminPort: 0,
    startedAt: t0,
    captureDir: tempDir(t, 'logprobe-demo-progress-'),
    engines: async (progress) => {
      await sleep(5500);
      return chooseEngines({
        choice: 'sim',
        plan: planFault('state-shift'),
        seed: 1,
        notice: () => {},
        progress,
        engine: { api: 'llamacpp' },
      });
    },
    signal: new AbortController().signal,
    out: (line) => lines.push({ at: Date.now() - t0, line }),
  });
  const text = lines.map((l) => `${l.at} ms ${l.line}`).join('\n');
  assert.ok(lines.length > 0 && lines[0]!.at < 1000, `a first line within a second:\n${text}`);
  assert.match(lines[0]!.line, /^… 0\.\d s: starting the engines$/);
  const banner = lines.findIndex((l) => l.line.startsWith('logprobe demo — '));
  assert.ok(banner > 0, text);
  const before = lines.slice(0, banner).map((l) => l.line);
  assert.ok(
    before.some((l) => /^… 5\.\d s: still starting the engines$/.test(l)),
    `every 5 s, the stage still running:\n${text}`,
  );
  assert.ok(
    before.some((l) => / s: starting the simulated engines in this process$/.test(l)),
    text,
  );
  assert.ok(
    before.some((l) => / s: starting the proxy \(and checking that the engines answer it\)$/.test(l)),
    text,
  );
});

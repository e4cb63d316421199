/**
 * `logprobe demo` on llama.cpp, as a user runs it: two engine processes (a clean baseline, the
 * candidate with zero-layer:1 by default), the proxy, traffic, LogprobGlobalShift firing, exit 0
 * after --duration, and no engine process left behind — also when stopped with SIGINT.
 * Runs the built CLI (`npm test` builds first).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { tempDir } from './helpers/capture.js';
import { runCli, startCli } from './helpers/cli.js';
import { llamaSkip } from './helpers/llama-e2e.js';

const skip = llamaSkip;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function enginePids(output: string): number[] {
  const m = /pids (\d+), (\d+)\)/.exec(output);
  assert.ok(m, `the banner names the engine processes:\n${output}`);
  return [Number(m[1]), Number(m[2])];
}

test(
  'logprobe demo --duration runs two llama.cpp engine processes, shows LogprobGlobalShift firing, exits 0 and leaves no engine behind',
  { skip },
  async (t) => {
    const { code, stdout, stderr } = await runCli(
      ['demo', '--duration', '15', '--port', '0', '--admin-port', '0', '--captures', tempDir(t, 'logprobe-demo-')],
      { timeoutMs: 90_000 },
    );
    assert.equal(code, 0, stderr);
    assert.match(stdout, /^logprobe demo — llama\.cpp engines/m);
    assert.match(stdout, /^ {2}candidate http:\/\/127\.0\.0\.1:\d+ {2}\(fault: zero-layer:1\)$/m);
    assert.doesNotMatch(stdout, /falling back/);
    const firing = /^▲ ALERT FIRING {2}LogprobGlobalShift at mirrored request (\d+) \(([\d.]+) s since start\)/m.exec(
      stdout,
    );
    assert.ok(firing, `LogprobGlobalShift fired:\n${stdout}`);
    assert.ok(Number(firing[1]) >= 10, 'not before the window holds minRequests (10)');
    assert.ok(Number(firing[2]) < 15, `within the run (${firing[2]} s)`);
    assert.match(
      stdout,
      /^done \(llama\.cpp engines\): \d+ client requests, \d+ mirrored; .*alerts .*LogprobGlobalShift firing/m,
    );
    assert.ok(!/candidate_error|baseline_error/.test(stdout), 'every mirrored pair was compared');
    for (const pid of enginePids(stdout)) assert.equal(alive(pid), false, `engine ${pid} stopped`);
  },
);

test('Ctrl-C (SIGINT) stops the demo with exit 0 and stops both engine processes', { skip }, async (t) => {
  const demo = await startCli(
    ['demo', '--port', '0', '--admin-port', '0', '--captures', tempDir(t, 'logprobe-demo-'), '--fault', 'kv:q4_0'],
    /^#\s+3 /m,
    { timeoutMs: 60_000 },
  );
  t.after(() => demo.child.kill('SIGKILL'));
  const pids = enginePids(demo.output());
  assert.match(demo.output(), /\(fault: kv:q4_0\)/);
  for (const pid of pids) assert.equal(alive(pid), true);
  demo.child.kill('SIGINT');
  assert.equal(await demo.exited, 0, demo.output());
  assert.match(demo.output(), /^done \(llama\.cpp engines\)/m);
  for (const pid of pids) assert.equal(alive(pid), false, `engine ${pid} stopped`);
});

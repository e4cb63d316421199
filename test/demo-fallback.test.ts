/**
 * `logprobe demo` where llama.cpp engines cannot start: one line says why and that the simulated
 * engines run instead, the banner and the summary say so, and the demo still shows the alert.
 * The failure is real: the engines cannot write their generated model (LOGPROBE_CACHE_DIR under
 * a file). `--engine llama` refuses to fall back; `--engine sim` maps a llama.cpp fault to its
 * simulated stand-in. Runs the built CLI (`npm test` builds first).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { tempDir } from './helpers/capture.js';
import { runCli } from './helpers/cli.js';

const BROKEN = { LOGPROBE_CACHE_DIR: '/dev/null/logprobe-cache' };

test('when llama.cpp engines cannot start, the demo says why in one line, runs the simulated engines and still fires LogprobGlobalShift', async (t) => {
  const { code, stdout, stderr } = await runCli(
    ['demo', '--duration', '15', '--port', '0', '--admin-port', '0', '--captures', tempDir(t, 'logprobe-demo-')],
    { env: BROKEN, timeoutMs: 90_000 },
  );
  assert.equal(code, 0, stderr);
  const notices = stdout.split('\n').filter((l) => l.includes('falling back'));
  assert.equal(notices.length, 1, stdout);
  assert.match(notices[0] ?? '', /^llama\.cpp engines unavailable \(.*ENOTDIR.*\): falling back to simulated engines$/);
  assert.match(stdout, /^logprobe demo — simulated engines/m);
  assert.match(stdout, /\(fault: state-shift, for --fault zero-layer:1\)/);
  assert.match(stdout, /^▲ ALERT FIRING {2}LogprobGlobalShift at mirrored request \d+/m);
  assert.match(stdout, /^done \(simulated engines\): /m);
});

test('--engine llama does not fall back: it exits 1 with the reason in one line', async (t) => {
  const { code, stdout, stderr } = await runCli(
    [
      'demo',
      '--engine',
      'llama',
      '--duration',
      '5',
      '--port',
      '0',
      '--admin-port',
      '0',
      '--captures',
      tempDir(t, 'logprobe-demo-'),
    ],
    {
      env: BROKEN,
      timeoutMs: 60_000,
    },
  );
  assert.equal(code, 1);
  // Only the start's progress lines (what it tried) before the error: no banner, no traffic.
  const said = stdout.split('\n').filter((l) => l !== '');
  assert.ok(said.length > 0 && said.every((l) => /^… \d+\.\d s: /.test(l)), stdout);
  assert.match(stdout, /starting two llama\.cpp engines/);
  assert.match(stderr, /^logprobe: --engine llama: llama\.cpp engines unavailable \(.*ENOTDIR.*\)\n$/);
});

test('--engine sim runs a llama.cpp noise fault as the simulated noise: no shift, no alert', async (t) => {
  const { code, stdout, stderr } = await runCli(
    [
      'demo',
      '--engine',
      'sim',
      '--fault',
      'flash-attention',
      '--duration',
      '4',
      '--port',
      '0',
      '--admin-port',
      '0',
      '--captures',
      tempDir(t, 'logprobe-demo-'),
    ],
    { timeoutMs: 60_000 },
  );
  assert.equal(code, 0, stderr);
  assert.doesNotMatch(stdout, /falling back/);
  assert.match(stdout, /^logprobe demo — simulated engines/m);
  assert.match(stdout, /\(fault: noise, for --fault flash-attention\)/);
  assert.doesNotMatch(stdout, /ALERT FIRING/);
  assert.doesNotMatch(stdout, /_shift /);
});

test('a --fault or --engine neither kind of engine knows is a usage error (exit 2) naming both lists', async () => {
  const bad = await runCli(['demo', '--fault', 'zero-layer:9']);
  assert.equal(bad.code, 2);
  assert.match(
    bad.stderr,
    /^logprobe: --fault: fault "zero-layer:9": expected an integer from 0 to 1; the demo takes a llama\.cpp engine fault \(zero-layer:L, .*\) or a simulated one \(state-shift, .*\)\n$/,
  );
  const unknown = await runCli(['demo', '--fault', 'gremlins']);
  assert.equal(unknown.code, 2);
  assert.match(
    unknown.stderr,
    /^logprobe: --fault: unknown fault "gremlins"; the demo takes a llama\.cpp engine fault/,
  );
  const engine = await runCli(['demo', '--engine', 'gpu']);
  assert.equal(engine.code, 2);
  assert.equal(engine.stderr, "logprobe: --engine: expected one of auto, llama, sim, got 'gpu'\n");
});

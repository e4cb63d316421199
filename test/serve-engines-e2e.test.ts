// `logprobe serve` as built (dist/, bin/logprobe.js) in front of two engines that run as their own
// processes (the engine workspace's bin, --sim): one client request, its mirrored pair compared,
// and /metrics counting it. Every process runs on the node that runs this file, so it checks the
// product on whichever Node runs it: CI runs it on the machine's Node and again on the LTS binary
// it installs (.ci/run). The built files come from `npm run build` (`npm test` builds first).
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { startCli } from './helpers/cli.js';
import { metricValue } from './helpers/sim.js';

const ENGINE_BIN = fileURLToPath(new URL('../packages/engine/bin/logprobe-engine.js', import.meta.url));

/** Starts `logprobe-engine --sim ARGS…` on a free port; resolves with its URL once it listens. */
async function startEngine(t: TestContext, args: string[]): Promise<string> {
  const child = spawn(process.execPath, [ENGINE_BIN, '--sim', '--port', '0', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
  t.after(async () => {
    if (child.exitCode !== null) return;
    child.kill('SIGTERM');
    assert.equal(await exited, 0, 'the engine stops cleanly on SIGTERM');
  });
  let out = '';
  child.stderr.on('data', (c: Buffer) => (out += c.toString()));
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`engine not listening:\n${out}`)), 20_000);
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1] as string);
      }
    });
    void exited.then((code) => reject(new Error(`engine exited ${code}:\n${out}`)));
  });
}

test('serve in front of two engines: the client gets the candidate, the mirrored pair is compared and counted in /metrics', async (t) => {
  const baseline = await startEngine(t, ['--seed', '11', '--model-id', 'sim-baseline']);
  // A corrupted prefill state: every mirrored pair is a shift (as in mirror-e2e).
  const candidate = await startEngine(t, ['--seed', '11', '--state-shift', '0.6', '--model-id', 'sim-candidate']);
  const dir = mkdtempSync(join(tmpdir(), 'logprobe-serve-e2e-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'logprobe.yaml');
  writeFileSync(
    file,
    [
      'listen: { host: 127.0.0.1, port: 0 }',
      'admin: { host: 127.0.0.1, port: 0 }',
      `candidate: { url: ${candidate} }`,
      `baseline: { url: ${baseline} }`,
      'mirror: { sampleRate: 1 }',
      'capture: { enabled: false }',
      // The start-up probe would send its own requests to the engines; this test counts one pair.
      'probe: { atStart: off }',
      '',
    ].join('\n'),
  );
  const proc = await startCli(
    ['serve', '--config', file],
    /"proxyUrl":"(http:\/\/[^"]+)","adminUrl":"(http:\/\/[^"]+)"/,
  );
  t.after(() => {
    if (proc.child.exitCode === null) proc.child.kill('SIGKILL');
  });
  const [, proxyUrl, adminUrl] = proc.match as unknown as [string, string, string];

  const res = await request(`${proxyUrl}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({ model: 'sim', prompt: 'The capital of France is', max_tokens: 16 }),
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(res.statusCode, 200);
  const answer = (await res.body.json()) as { object: string; model: string };
  assert.equal(answer.object, 'text_completion');
  assert.equal(answer.model, 'sim-candidate', "the client gets the candidate's answer");

  // The mirror answers after the client: poll until the pair is compared.
  let metrics = '';
  for (let i = 0; i < 200; i++) {
    metrics = await (await request(`${adminUrl}/metrics`)).body.text();
    if ((metricValue(metrics, 'logprobe_mirror_total', { outcome: 'ok' }) ?? 0) >= 1) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(metricValue(metrics, 'logprobe_mirror_total', { outcome: 'ok' }), 1, metrics);
  const shifts =
    (metricValue(metrics, 'logprobe_verdicts_total', { verdict: 'global_shift' }) ?? 0) +
    (metricValue(metrics, 'logprobe_verdicts_total', { verdict: 'early_shift' }) ?? 0);
  assert.equal(shifts, 1, 'the one pair is compared and found shifted');
  assert.equal(metricValue(metrics, 'logprobe_upstream_duration_seconds_count', { backend: 'baseline' }), 1);
  // serve really ran on this node (prom-client's default metrics name the runtime).
  assert.equal(metricValue(metrics, 'nodejs_version_info', { version: process.version }), 1);

  proc.child.kill('SIGTERM');
  assert.equal(await proc.exited, 0, proc.output());
});

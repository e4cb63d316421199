/**
 * Baseline-free, online and offline agree: serve mirrors traffic to one engine whose prefix-cache
 * hits are restored wrong, every request a repeat probe (cold, then warm), and
 * LogprobSelfInconsistency fires online after some pair; `analyze` over the capture runs the self
 * detector over the same cold→warm pairs in the same order, with the floor each had online, and
 * names that same pair (its number and id). Default alert section on both sides, as a user runs them.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { request } from 'undici';
import { createSimModel, startEngineServer } from '@logprobe/engine';
import { startLogprobe } from './helpers/logprobe.js';
import { tempDir } from './helpers/capture.js';
import { runCli } from './helpers/cli.js';
import type { AlertTransition } from '../src/core/detector.js';

test('analyze names the pair at which LogprobSelfInconsistency fired online, baseline-free', async (t) => {
  const cand = await startEngineServer({
    model: createSimModel({ seed: 7, id: 'm', cacheHitShift: 0.6 }),
    api: 'llamacpp',
    slotSavePath: '/tmp',
  });
  t.after(() => cand.close());
  const dir = tempDir(t, 'logprobe-self-offline-');
  // What the mirror told its listeners, in order: a transition comes before the pair that caused it.
  const events: Array<{ pair: string } | { alert: AlertTransition }> = [];
  const lp = await startLogprobe(
    {
      candidate: { url: cand.url },
      baseline: null,
      mirror: { sampleRate: 1, concurrency: 1, repeat: { rate: 1, backends: ['candidate'], flush: true } },
      capture: { enabled: true, dir },
    },
    { listeners: { onPair: (p) => events.push({ pair: p.id }), onAlert: (a) => events.push({ alert: a }) } },
  );
  t.after(() => lp.close());
  for (let i = 0; i < 24; i++) {
    const r = await request(`${lp.proxyUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        prompt: `Request number ${i}: a prompt long enough for the prefix cache to matter`,
        max_tokens: 16,
      }),
    });
    assert.equal(r.statusCode, 200);
    await r.body.dump();
  }
  await lp.runtime.mirror!.idle();
  await lp.close();
  const firing = events.findIndex(
    (e) => 'alert' in e && e.alert.alert === 'LogprobSelfInconsistency' && e.alert.to === 'firing',
  );
  assert.ok(firing >= 0, 'LogprobSelfInconsistency fired online');
  const pairs = events.filter((e): e is { pair: string } => 'pair' in e);
  const caused = events.slice(firing).find((e): e is { pair: string } => 'pair' in e);
  assert.ok(caused, 'the pair that fired it came after the transition');
  const n = pairs.indexOf(caused) + 1;

  const res = await runCli(['analyze', dir], { timeoutMs: 60_000 });
  assert.equal(res.code, 0, res.stderr);
  const m = /LogprobSelfInconsistency \(candidate\) would fire at pair (\d+), id (\S+) /.exec(res.stdout);
  assert.ok(m, res.stdout);
  assert.equal(m[2], caused.pair, `the same pair as online:\n${res.stdout}`);
  assert.equal(Number(m[1]), n);
  // The opening and the repeats say the repeat pairs' own figures, and no health block of n/a.
  assert.match(
    res.stdout,
    /^ {2}baseline-free: 24 repeat pairs on the candidate \(cold, then warm\), \d+ compared, \d+ self_inconsistent; self shift max \d+\.\d+; self detector: window share \d\.\d\d over the last \d+ cold→warm pairs \(fires at ≥ [\d.]+ over ≥ \d+\), CUSUM \d+\.\d$/m,
  );
  assert.doesNotMatch(res.stdout, /n\/a/);
  assert.match(res.stdout, /^health: not measured — /m);
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { createSimModel, startEngineServer } from '@logprobe/engine';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import { runCli } from './helpers/cli.js';
import { meaningMismatch } from '../src/probe/probe.js';
import type { MirroredPair } from '../src/pair/types.js';

// What a logprob means differs by server setting: vLLM's --logprobs-mode changes what the same
// field holds. Two sides of different meaning are named once and never compared (no shift
// verdicts); the same mode on both sides compares as ever.

function vllm(mode: string, o: { stateShift?: number } = {}) {
  return startEngineServer({
    model: createSimModel({ seed: 4, id: 'm', ...o }),
    api: 'vllm',
    logprobsMode: mode,
    devMode: true,
  });
}

async function traffic(proxyUrl: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const r = await request(`${proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: `Question ${i}` }], max_tokens: 12 }),
    });
    assert.equal(r.statusCode, 200);
    await r.body.dump();
  }
}

test('meaningMismatch: told modes that differ are named with the flag; unknown or the same are not', () => {
  const raw = { mode: 'raw_logprobs', detail: 'told' };
  assert.match(
    meaningMismatch({ mode: 'processed_logprobs', detail: 'told' }, raw)!,
    /^the candidate reports processed_logprobs and the baseline raw_logprobs: .* --logprobs-mode/,
  );
  assert.equal(meaningMismatch(raw, raw), null);
  assert.equal(meaningMismatch({ mode: null, detail: '?' }, raw), null);
  assert.equal(meaningMismatch({ mode: 'logits', detail: 'behaviour' }, { mode: 'raw_logits', detail: 'told' }), null);
  assert.ok(meaningMismatch({ mode: 'logits', detail: 'behaviour' }, raw));
});

test('candidate processed_logprobs, baseline raw_logprobs: one line at start, pairs skipped, no shift verdict; probe says the mode', async (t) => {
  const cand = await vllm('processed_logprobs');
  const base = await vllm('raw_logprobs');
  t.after(() => Promise.all([cand.close(), base.close()]));
  const pairs: MirroredPair[] = [];
  const lp = await startLogprobe(
    {
      candidate: { url: cand.url },
      baseline: { url: base.url },
      mirror: { sampleRate: 1 },
      probe: { atStart: 'reachability' },
    },
    { listeners: { onPair: (p) => pairs.push(p) } },
  );
  t.after(() => lp.close());
  const deadline = Date.now() + 10_000;
  const said = () => lp.logs.lines.find((l) => String(l.msg).startsWith('the candidate reports processed_logprobs'));
  while (!said() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  assert.ok(said(), 'said once at start');
  assert.match(String(said()!.msg), /start both with the same vLLM --logprobs-mode/);
  assert.equal(lp.logs.lines.filter((l) => String(l.msg).startsWith('the candidate reports')).length, 1, 'one line');
  await traffic(lp.proxyUrl, 6);
  await lp.runtime.mirror!.idle();
  assert.equal(pairs.length, 0, 'no pair compared');
  const m = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  assert.equal(metricValue(m, 'logprobe_mirror_total', { outcome: 'skipped' }), 6);
  assert.equal(metricValue(m, 'logprobe_mirror_skipped_total', { reason: 'meaning_differs' }), 6, 'with its reason');
  assert.equal(metricValue(m, 'logprobe_verdicts_total', { kind: 'pair', verdict: 'global_shift' }) ?? 0, 0);

  const probed = await runCli(['probe', cand.url]);
  assert.equal(probed.code, 0, probed.stderr);
  assert.match(probed.stdout, /^logprobs: processed_logprobs — --logprobs-mode, from \/server_info$/m);
});

test('the same --logprobs-mode on both sides: compared as ever (a shift is a shift)', async (t) => {
  const cand = await vllm('processed_logprobs', { stateShift: 0.6 });
  const base = await vllm('processed_logprobs');
  t.after(() => Promise.all([cand.close(), base.close()]));
  const pairs: MirroredPair[] = [];
  const lp = await startLogprobe(
    {
      candidate: { url: cand.url },
      baseline: { url: base.url },
      mirror: { sampleRate: 1 },
      probe: { atStart: 'reachability' },
    },
    { listeners: { onPair: (p) => pairs.push(p) } },
  );
  t.after(() => lp.close());
  await new Promise((r) => setTimeout(r, 500));
  await traffic(lp.proxyUrl, 6);
  await lp.runtime.mirror!.idle();
  assert.equal(pairs.length, 6);
  assert.ok(pairs.every((p) => p.analysis && p.analysis.verdict !== 'identical'));
  assert.ok(!lp.logs.lines.some((l) => String(l.msg).startsWith('the candidate reports')));
});

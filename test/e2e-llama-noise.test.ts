/**
 * Implementation noise on real llama.cpp numerics — flash attention, f16 weights, another batch
 * size — behind logprobe with design.md's default thresholds (noise floor 0.1) and a small alert
 * window: logprobs move (so the fault took effect), but never above the floor, and nothing
 * alerts. Engines are `logprobe engine --llama` processes (threads 1); one clean baseline serves
 * every case. Needs the built CLI (`npm test` builds first).
 */
import assert from 'node:assert/strict';
import { sendAlternating } from './helpers/llama.js';
import { after, before, describe, test } from 'node:test';
import { request } from 'undici';
import { spawnLlamaEngine, type LlamaEngineProcess } from '../src/demo/engine-process.js';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';

const skip =
  (process.platform === 'linux' && process.arch === 'x64') || process.env['CI']
    ? false
    : `llama.cpp engines run on x64 Linux here (this is ${process.platform}-${process.arch}); set CI=1 to run them anyway`;

const PROMPTS = ['The quick brown fox', 'Once upon a time, in a small village by the sea,', 'def fibonacci(n):', 'Why do floating point sums depend on the order of addition?', 'Artificial intelligence is', 'The capital of France is'];
const VERDICTS = ['incomparable', 'tokenizer_mismatch', 'identical', 'noise', 'early_shift', 'global_shift', 'local_shift'] as const;

/** Sends `n` client requests through logprobe to a candidate with `fault`; returns the mirror's verdict counts and the metrics text. */
async function mirrorThrough(baseline: LlamaEngineProcess, fault: string, n: number): Promise<{ verdicts: Record<string, number>; metrics: string }> {
  const candidate = await spawnLlamaEngine({ seed: 1, fault });
  try {
    const lp = await startLogprobe({
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1, concurrency: 1, maxTokens: 24 },
      analysis: { noiseFloor: 0.1 },
      alert: { window: 10, minRequests: 5, forSeconds: 0 },
    });
    try {
      for (let i = 0; i < n; i++) {
        const prompt = `${PROMPTS[i % PROMPTS.length]} ${i}`;
        await sendAlternating(lp.proxyUrl, prompt, i, 24);
      }
      await lp.runtime.mirror!.idle();
      const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
      const verdicts = Object.fromEntries(VERDICTS.map((v) => [v, metricValue(metrics, 'logprobe_verdicts_total', { verdict: v }) ?? 0]).filter(([, c]) => c !== 0));
      return { verdicts, metrics };
    } finally {
      await lp.close();
    }
  } finally {
    await candidate.stop();
  }
}

function assertQuiet(metrics: string): void {
  assert.equal(metricValue(metrics, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }), 0, 'LogprobGlobalShift stays quiet');
  assert.equal(metricValue(metrics, 'logprobe_alert_firing', { alert: 'LogprobSustainedShift' }), 0, 'LogprobSustainedShift stays quiet');
  assert.equal(metricValue(metrics, 'logprobe_window_global_shift_ratio'), 0, 'no position above the floor');
}

describe('implementation noise on llama.cpp stays below the default floor', { skip }, () => {
  let baseline: LlamaEngineProcess;
  before(async () => {
    baseline = await spawnLlamaEngine({ seed: 1 });
  });
  after(() => baseline?.stop());

  test('flash attention: every mirrored pair is noise (moved, never identical), no alert', async () => {
    const { verdicts, metrics } = await mirrorThrough(baseline, 'flash-attention', 20);
    assert.deepEqual(verdicts, { noise: 20 });
    assertQuiet(metrics);
  });

  test('f16 weights: every mirrored pair is noise (moved, never identical), no alert', async () => {
    const { verdicts, metrics } = await mirrorThrough(baseline, 'weights:f16', 20);
    assert.deepEqual(verdicts, { noise: 20 });
    assertQuiet(metrics);
  });

  test('batch size 8: logprobs move by ~1e-6, so pairs are identical or noise, never a shift, no alert', async () => {
    const { verdicts, metrics } = await mirrorThrough(baseline, 'batch:8', 20);
    assert.equal((verdicts['identical'] ?? 0) + (verdicts['noise'] ?? 0), 20, JSON.stringify(verdicts));
    assert.ok((verdicts['noise'] ?? 0) > 0, `batch:8 took effect on a long prompt: ${JSON.stringify(verdicts)}`);
    assertQuiet(metrics);
  });
});

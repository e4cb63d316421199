/**
 * Data-level bugs on real llama.cpp numerics — a zeroed attention layer (the seed story's zero
 * layers), a KV cell lost after prefill, a q4_0 KV cache — behind logprobe: the mirrored pairs are
 * shifts, and LogprobGlobalShift fires once the window holds its minimum (window 20, min 10,
 * forSeconds 0). Engines are `logprobe engine --llama` processes (threads 1); one clean baseline
 * serves every case. Needs the built CLI (`npm test` builds first).
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
const SHIFTS = ['early_shift', 'global_shift', 'local_shift'] as const;

interface Seen {
  /** Mirrored pairs per verdict. */
  verdicts: Record<string, number>;
  /** The mirrored request at which LogprobGlobalShift fired (1-based), or null. */
  globalFiredAt: number | null;
  metrics: string;
}

/** Sends `n` client requests through logprobe to a candidate with `fault`, one mirrored pair at a time. */
async function mirrorThrough(baseline: LlamaEngineProcess, fault: string, n: number): Promise<Seen> {
  const candidate = await spawnLlamaEngine({ seed: 1, fault });
  try {
    const lp = await startLogprobe({
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1, concurrency: 1, maxTokens: 24 },
      alert: { window: 20, minRequests: 10, fireFraction: 0.5, forSeconds: 0 },
    });
    try {
      let globalFiredAt: number | null = null;
      for (let i = 0; i < n; i++) {
        const prompt = `${PROMPTS[i % PROMPTS.length]} ${i}`;
        await sendAlternating(lp.proxyUrl, prompt, i, 24);
        await lp.runtime.mirror!.idle();
        if (globalFiredAt === null && lp.runtime.mirror!.detectorState.global.phase === 'firing') globalFiredAt = i + 1;
      }
      const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
      const verdicts: Record<string, number> = {};
      for (const v of ['identical', 'noise', ...SHIFTS]) {
        const c = metricValue(metrics, 'logprobe_verdicts_total', { verdict: v }) ?? 0;
        if (c > 0) verdicts[v] = c;
      }
      return { verdicts, globalFiredAt, metrics };
    } finally {
      await lp.close();
    }
  } finally {
    await candidate.stop();
  }
}

function assertShiftAndAlert(seen: Seen, n: number): void {
  const shifts = SHIFTS.reduce((sum, v) => sum + (seen.verdicts[v] ?? 0), 0);
  assert.equal(seen.verdicts['identical'], undefined, `no pair identical: ${JSON.stringify(seen.verdicts)}`);
  assert.ok(shifts >= 0.9 * n, `at least 90% of pairs are shifts: ${JSON.stringify(seen.verdicts)}`);
  assert.equal(seen.globalFiredAt, 10, 'LogprobGlobalShift fires as soon as the window holds minRequests');
  assert.equal(metricValue(seen.metrics, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }), 1);
  assert.ok((metricValue(seen.metrics, 'logprobe_window_global_shift_ratio') ?? 0) > 0.8, 'most comparable positions shifted');
}

describe('data-level bugs on llama.cpp are shifts and fire LogprobGlobalShift', { skip }, () => {
  let baseline: LlamaEngineProcess;
  before(async () => {
    baseline = await spawnLlamaEngine({ seed: 1 });
  });
  after(() => baseline?.stop());

  test('zero-layer:1 (a zeroed attention layer): the pairs are shifts, LogprobGlobalShift at the 10th mirrored request', async () => {
    assertShiftAndAlert(await mirrorThrough(baseline, 'zero-layer:1', 14), 14);
  });

  test('drop-prompt-token:3 (a KV cell lost after prefill): shifts, LogprobGlobalShift at the 10th mirrored request', async () => {
    assertShiftAndAlert(await mirrorThrough(baseline, 'drop-prompt-token:3', 14), 14);
  });

  test('kv:q4_0 (a 4-bit KV cache): shifts, LogprobGlobalShift at the 10th mirrored request', async () => {
    assertShiftAndAlert(await mirrorThrough(baseline, 'kv:q4_0', 14), 14);
  });
});

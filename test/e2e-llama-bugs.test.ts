/**
 * Data-level bugs on real llama.cpp numerics — a zeroed attention layer, a KV cell lost after
 * prefill, a q4_0 KV cache — behind logprobe: the mirrored pairs are shifts, and
 * LogprobGlobalShift fires once the window holds its minimum (window 20, min 10, forSeconds 0).
 * Engines are `logprobe engine --llama` processes (threads 1); one clean baseline serves every
 * case. Needs the built CLI (`npm test` builds first).
 */
import assert from 'node:assert/strict';
import { llamaSkip, mirrorThrough, type E2ERun } from './helpers/llama-e2e.js';
import { after, before, describe, test } from 'node:test';
import { spawnLlamaEngine, type LlamaEngineProcess } from '@logprobe/engine';
import type { ConfigInput } from '../src/config/schema.js';
import { metricValue } from './helpers/sim.js';

const skip = llamaSkip;

const SHIFTS = ['early_shift', 'global_shift', 'local_shift'] as const;
/** A small window that fires at once: the alert's latency in mirrored requests is what is checked. */
const FAST_ALERT: ConfigInput = { alert: { window: 20, minRequests: 10, fireFraction: 0.5, forSeconds: 0 } };

function assertShiftAndAlert(seen: E2ERun, n: number): void {
  const shifts = SHIFTS.reduce((sum, v) => sum + (seen.verdicts[v] ?? 0), 0);
  assert.equal(seen.verdicts['identical'], undefined, `no pair identical: ${JSON.stringify(seen.verdicts)}`);
  assert.ok(shifts >= 0.9 * n, `at least 90% of pairs are shifts: ${JSON.stringify(seen.verdicts)}`);
  assert.equal(seen.globalFiredAt, 10, 'LogprobGlobalShift fires as soon as the window holds minRequests');
  assert.equal(metricValue(seen.metrics, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }), 1);
  assert.ok(
    (metricValue(seen.metrics, 'logprobe_window_global_shift_ratio') ?? 0) > 0.8,
    'most comparable positions shifted',
  );
}

describe('data-level bugs on llama.cpp are shifts and fire LogprobGlobalShift', { skip }, () => {
  let baseline: LlamaEngineProcess;
  before(async () => {
    baseline = await spawnLlamaEngine({ seed: 1 });
  });
  after(() => baseline?.stop());

  test('zero-layer:1 (a zeroed attention layer): the pairs are shifts, LogprobGlobalShift at the 10th mirrored request', async () => {
    assertShiftAndAlert(await mirrorThrough(baseline, 'zero-layer:1', 14, FAST_ALERT), 14);
  });

  test('drop-prompt-token:3 (a KV cell lost after prefill): shifts, LogprobGlobalShift at the 10th mirrored request', async () => {
    assertShiftAndAlert(await mirrorThrough(baseline, 'drop-prompt-token:3', 14, FAST_ALERT), 14);
  });

  test('kv:q4_0 (a 4-bit KV cache): shifts, LogprobGlobalShift at the 10th mirrored request', async () => {
    assertShiftAndAlert(await mirrorThrough(baseline, 'kv:q4_0', 14, FAST_ALERT), 14);
  });
});

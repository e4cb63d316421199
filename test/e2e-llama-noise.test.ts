/**
 * Implementation noise on real llama.cpp numerics — flash attention, f16 weights, another batch
 * size — behind logprobe with the documented default thresholds (noise floor 0.1) and a small alert
 * window: logprobs move (so the fault took effect), but never above the floor, and nothing
 * alerts. Engines are `logprobe engine --llama` processes (threads 1); one clean baseline serves
 * every case. Needs the built CLI (`npm test` builds first).
 */
import assert from 'node:assert/strict';
import { llamaSkip, mirrorThrough } from './helpers/llama-e2e.js';
import { after, before, describe, test } from 'node:test';
import { spawnLlamaEngine, type LlamaEngineProcess } from '@logprobe/engine';
import type { ConfigInput } from '../src/config/schema.js';
import { metricValue } from './helpers/sim.js';

const skip = llamaSkip;
/** The default floor, and a small window so that an alert would show within the run. */
const DEFAULT_FLOOR: ConfigInput = {
  analysis: { noiseFloor: 0.1 },
  alert: { window: 10, minRequests: 5, forSeconds: 0 },
};

function assertQuiet(metrics: string): void {
  assert.equal(
    metricValue(metrics, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }),
    0,
    'LogprobGlobalShift stays quiet',
  );
  assert.equal(
    metricValue(metrics, 'logprobe_alert_firing', { alert: 'LogprobSustainedShift' }),
    0,
    'LogprobSustainedShift stays quiet',
  );
  assert.equal(metricValue(metrics, 'logprobe_window_global_shift_ratio'), 0, 'no position above the floor');
}

describe('implementation noise on llama.cpp stays below the default floor', { skip }, () => {
  let baseline: LlamaEngineProcess;
  before(async () => {
    baseline = await spawnLlamaEngine({ seed: 1 });
  });
  after(() => baseline?.stop());

  test('flash attention: every mirrored pair is noise (moved, never identical), no alert', async () => {
    const { verdicts, metrics } = await mirrorThrough(baseline, 'flash-attention', 20, DEFAULT_FLOOR);
    assert.deepEqual(verdicts, { noise: 20 });
    assertQuiet(metrics);
  });

  test('f16 weights: every mirrored pair is noise (moved, never identical), no alert', async () => {
    const { verdicts, metrics } = await mirrorThrough(baseline, 'weights:f16', 20, DEFAULT_FLOOR);
    assert.deepEqual(verdicts, { noise: 20 });
    assertQuiet(metrics);
  });

  test('batch size 8: logprobs move by ~1e-6, so pairs are identical or noise, never a shift, no alert', async () => {
    const { verdicts, metrics } = await mirrorThrough(baseline, 'batch:8', 20, DEFAULT_FLOOR);
    assert.equal((verdicts['identical'] ?? 0) + (verdicts['noise'] ?? 0), 20, JSON.stringify(verdicts));
    assert.ok((verdicts['noise'] ?? 0) > 0, `batch:8 took effect on a long prompt: ${JSON.stringify(verdicts)}`);
    assertQuiet(metrics);
  });
});

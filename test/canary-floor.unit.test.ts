/**
 * The canaries' own floor (`canary.noiseFloor`, src/mirror/calibration.ts `ownFloor`): null
 * follows the slice's pair floor, a number is the floor, `auto` learns from the trusted side's
 * canary repeats alone — apart from the traffic's floor and from the path check's.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildConfig } from '../src/config/load.js';
import { MirrorCalibration } from '../src/mirror/calibration.js';
import { Metrics } from '../src/metrics/registry.js';
import type { PairPipeline } from '../src/pair/pipeline.js';

function calibration(canary: Record<string, unknown>, analysis: Record<string, unknown> = {}): MirrorCalibration {
  const config = buildConfig({ canary, analysis, calibration: { minSamples: 5, minFloor: 0.01, margin: 3 } });
  const metrics = new Metrics({ thread: 'worker', mirrorRoutes: config.mirror.routes });
  // The pipeline is only for calibration's own repeats of mirrored pairs, not used here.
  return new MirrorCalibration({ config, metrics, pipeline: null as unknown as PairPipeline });
}

test('canary.noiseFloor: null follows the pair floor in force, a number is the floor', () => {
  assert.equal(calibration({ noiseFloor: null }, { noiseFloor: 0.2 }).ownFloor('canary', 'm'), 0.2);
  assert.equal(calibration({ noiseFloor: 0.004 }, { noiseFloor: 0.2 }).ownFloor('canary', 'm'), 0.004);
});

test('canary.noiseFloor auto: minFloor until enough trusted repeats, then p99 × margin of theirs alone, per model', () => {
  const c = calibration({ noiseFloor: 'auto' }, { noiseFloor: 0.2 });
  assert.equal(c.ownFloor('canary', 'm'), 0.01, 'nothing learned yet: calibration.minFloor');
  for (let i = 0; i < 5; i++) c.addOwn('canary', 'm', 'candidate', [5, 5], false);
  assert.equal(c.ownFloor('canary', 'm'), 0.01, "the candidate's repeats never teach it");
  for (let i = 0; i < 4; i++) c.addOwn('canary', 'm', 'baseline', [0.01, 0.02], true);
  assert.equal(c.ownFloor('canary', 'm'), 0.01, 'four of five trusted repeats: not yet');
  c.addOwn('canary', 'm', 'baseline', [0.01, 0.02], true);
  assert.ok(Math.abs(c.ownFloor('canary', 'm') - 0.06) < 1e-12, `p99 0.02 × 3: ${c.ownFloor('canary', 'm')}`);
  assert.equal(c.ownFloor('canary', 'other'), 0.01, 'per model slice');
  assert.equal(c.noiseFloor('m'), 0.2, "the traffic's floor is untouched");
  assert.equal(c.ownFloor('path', 'm'), 0.2, "and so is the path check's (path.noiseFloor null: the pair floor)");
});

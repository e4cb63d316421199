import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildConfig } from '../src/config/load.js';
import { compare, DEFAULT_THRESHOLDS } from '../src/core/index.js';
import { initialDetectorState, observe } from '../src/core/detector.js';
import { configFloor } from '../src/cli/thresholds.js';
import { chatBody, step } from './core-bodies.js';

const steps = (delta: number) =>
  ['The', ' cache', ' holds', ' key', ' 3'].map((t, i) =>
    step(t, -0.5 - i / 10 + delta, [
      [t, -0.5 - i / 10 + delta],
      ['x', -3],
    ]),
  );

test('noiseFloor: exact is accepted and means a floor of 0', () => {
  const config = buildConfig({ analysis: { noiseFloor: 'exact' } });
  assert.equal(config.analysis.noiseFloor, 'exact');
  assert.equal(configFloor(config), 0);
});

test('with a floor of 0 any difference is a shift, bitwise equal runs stay identical', () => {
  const t = { ...DEFAULT_THRESHOLDS, noiseFloor: 0 };
  const same = compare(chatBody(steps(0)), chatBody(steps(0)), t);
  assert.equal(same.verdict, 'identical');
  // 1e-6 nats on every position: noise at the default floor, a global shift at exact.
  const moved = compare(chatBody(steps(1e-6)), chatBody(steps(0)), t);
  assert.equal(moved.verdict, 'global_shift');
  assert.equal(moved.shifted, 5);
  assert.match(moved.explanation, /a floor of 0 \(noiseFloor: exact\)/);
  assert.equal(compare(chatBody(steps(1e-6)), chatBody(steps(0)), DEFAULT_THRESHOLDS).verdict, 'noise');
});

test('the CUSUM counts any shift at a floor of 0 (a whole step), and nothing for none', () => {
  const cfg = { window: 50, minRequests: 20, fireFraction: 0.5, forSeconds: 0, cusum: { k: 0.5, h: 5 } };
  const moved = observe(
    initialDetectorState(),
    { shifted: 5, comparable: 5, maxShift: 1e-6, noiseFloor: 0, requestId: 'a' },
    cfg,
    0,
  );
  assert.ok(moved.state.cusum > 0, String(moved.state.cusum));
  const still = observe(
    initialDetectorState(),
    { shifted: 0, comparable: 5, maxShift: 0, noiseFloor: 0, requestId: 'b' },
    cfg,
    0,
  );
  assert.equal(still.state.cusum, 0);
});

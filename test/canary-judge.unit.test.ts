/**
 * The canary spread test (src/canary/runner.ts `oneSidedPValue`): exact under the null — the
 * candidate's shift and the trusted side's own repeat drawn alike — and decisive when every probe
 * moved more than the spread, as 0.3% weight noise does on llama.cpp.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mulberry32 } from '../src/core/random.js';
import { oneSidedPValue } from '../src/canary/runner.js';

test('spread test: under the null (cross and self shifts alike) p ≤ α at most α of the time; 12 of 12 probes above the spread give p ≈ 2⁻¹²', () => {
  const rng = mulberry32(7);
  const draws: Record<string, () => number> = {
    halfNormal: () => Math.abs(Math.sqrt(-2 * Math.log(1 - rng())) * Math.cos(2 * Math.PI * rng())) * 0.02,
    lumpy: () => [0, 0, 0.01, 0.03][Math.floor(rng() * 4)]!,
    exponential: () => -Math.log(1 - rng()) * 0.01,
  };
  for (const [name, draw] of Object.entries(draws)) {
    let fired = 0;
    const rounds = 2000;
    for (let r = 0; r < rounds; r++) {
      const e = Array.from({ length: 12 }, () => draw() - draw());
      if (oneSidedPValue(e, 199, mulberry32(r)) <= 0.05) fired++;
    }
    assert.ok(fired / rounds <= 0.05 + 0.015, `${name}: ${fired} of ${rounds} at α 0.05`);
  }
  assert.equal(oneSidedPValue(new Array(12).fill(0), 999, mulberry32(1)), 1, 'deterministic twins: no evidence');
  assert.equal(oneSidedPValue([], 999, mulberry32(1)), 1);
  const moved = Array.from({ length: 12 }, (_, i) => 0.015 + i * 0.001);
  assert.ok(oneSidedPValue(moved, 999, mulberry32(1)) <= 0.003);
  assert.equal(
    oneSidedPValue(
      moved.map((x) => -x),
      999,
      mulberry32(1),
    ),
    1,
    'one-sided: less than the spread is no change',
  );
});

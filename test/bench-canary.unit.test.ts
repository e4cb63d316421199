import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  b3itChanged,
  b3itFlipped,
  ltMatrices,
  ltPValue,
  ltStatistic,
  selectBorderInputs,
} from '../bench/canary-methods.js';
import { borderShifted, type CanaryPair } from '../src/canary/runner.js';
import { mulberry32 } from '../src/core/random.js';

test("LT's statistic is the mean over tokens of |mean logprob of sample 1 − of sample 2|", () => {
  const a = [
    [-1, -2],
    [-1, -4],
  ];
  const b = [[-2, -3]];
  // Token 0: |−1 − (−2)| = 1; token 1: |−3 − (−3)| = 0; mean 0.5.
  assert.equal(ltStatistic(a, b), 0.5);
  assert.equal(ltStatistic(a, a), 0);
});

test('LT censors a token missing from a row at that row’s smallest logprob', () => {
  const m = ltMatrices([{ x: -0.1, y: -3 }], [{ x: -0.2, z: -5 }]);
  assert.deepEqual(m.a, [[-0.1, -3, -3]]);
  assert.deepEqual(m.b, [[-0.2, -5, -5]]);
});

test("LT's permutation test: 1 on equal samples, below α on six rows apart, rarely below α on exchangeable noise", () => {
  const row = (shift: number, r: () => number): Record<string, number> => ({
    a: -0.5 + shift + (r() - 0.5) * 1e-3,
    b: -1.2 - shift + (r() - 0.5) * 1e-3,
  });
  const r = mulberry32(7);
  const same = Array.from({ length: 5 }, () => ({ a: -0.5, b: -1.2 }));
  assert.equal(ltPValue(same, same, 199, mulberry32(1)), 1);
  const ref = Array.from({ length: 6 }, () => row(0, r));
  const moved = Array.from({ length: 6 }, () => row(0.01, r));
  assert.ok(
    ltPValue(ref, moved, 999, mulberry32(1)) <= 0.01,
    'a shift 10× the noise over 6 + 6 rows (2 of 924 splits as extreme)',
  );
  assert.ok(
    ltPValue(ref, moved.slice(0, 2), 999, mulberry32(1)) > 0.01,
    '6 + 2 rows cannot reach 0.01 (2 of 28 splits)',
  );
  let fires = 0;
  for (let t = 0; t < 200; t++) {
    const x = Array.from({ length: 6 }, () => row(0, r));
    const y = Array.from({ length: 6 }, () => row(0, r));
    if (ltPValue(x, y, 99, mulberry32(t)) <= 0.05) fires++;
  }
  assert.ok(fires <= 25, `exchangeable samples fired ${fires} of 200 times at 0.05`);
});

test("B3IT's flip rule: a border input changed when its greedy token is not the reference's", () => {
  assert.equal(b3itFlipped(' the', ' the'), false);
  assert.equal(b3itFlipped(' the', ' a'), true);
  assert.equal(b3itChanged([false, false, false]), false);
  assert.equal(b3itChanged([false, true]), true);
  assert.equal(b3itChanged([true, false], 2), false);
});

test('B3IT takes the smallest gaps', () => {
  const c = [0.3, 1e-4, 0.01, 0.002, 0.05].map((gap, i) => ({ probe: i, token: 't', gap }));
  assert.deepEqual(
    selectBorderInputs(c, 3).map((b) => b.gap),
    [1e-4, 0.002, 0.01],
  );
});

test("judgeRound's border evidence: a border probe's first token moved by its gap, or flipped", () => {
  const pair = (gap: number | null, shift: number, firstDivergence: number | null = null): CanaryPair =>
    ({
      probe: { id: 'p', route: '/v1/completions', body: { prompt: 'ab' }, gap },
      result: {
        comparison: {
          verdict: 'noise',
          firstDivergence,
          positions: [{ i: 0, shift }],
        },
      },
    }) as unknown as CanaryPair;
  assert.equal(borderShifted(pair(0.01, 0.012)), true);
  assert.equal(borderShifted(pair(0.01, 0.009)), false);
  assert.equal(borderShifted(pair(null, 5)), false, 'no built gap: no border evidence');
  assert.equal(borderShifted(pair(0.01, 0, 0)), true, 'the first token flipped');
});

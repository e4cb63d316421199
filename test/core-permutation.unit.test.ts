import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { mulberry32 } from '../src/core/random.js';
import { pairDifference, permutationPValue, PermutationWindow } from '../src/core/permutation.js';
import type { Comparison, PositionRow } from '../src/core/types.js';

/** A standard normal from two uniforms (Box–Muller). */
function normal(r: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
}

/** Symmetric noise of a few shapes: the test's rate must not depend on it. */
const SHAPES: Record<string, (r: () => number) => number> = {
  normal: (r) => 0.01 * normal(r),
  laplace: (r) => (r() < 0.5 ? -1 : 1) * -0.01 * Math.log(1 - r()),
  // Heavy tails: a Student t with 2 degrees of freedom.
  t2: (r) => (0.01 * normal(r)) / Math.sqrt((normal(r) ** 2 + normal(r) ** 2) / 2),
  // Discrete and lumpy: many exact zeros (deterministic kernels), some ±1e-3 steps.
  lumpy: (r) => (r() < 0.6 ? 0 : (r() < 0.5 ? -1 : 1) * 1e-3 * Math.ceil(3 * r())),
};

test('under identical distributions the share of p ≤ α is α (property test over noise shapes, window sizes and seeds)', () => {
  fc.assert(
    fc.property(
      fc.constantFrom(...Object.keys(SHAPES)),
      fc.integer({ min: 5, max: 50 }),
      fc.integer({ min: 1, max: 2 ** 31 - 1 }),
      (shape, n, seed) => {
        const draw = SHAPES[shape]!;
        const r = mulberry32(seed);
        const windows = 1000;
        const B = 99;
        const rejected = { 0.05: 0, 0.1: 0 };
        for (let w = 0; w < windows; w++) {
          const d = Array.from({ length: n }, () => draw(r));
          const p = permutationPValue(d, B, mulberry32(seed + w + 1));
          if (p <= 0.05) rejected[0.05]++;
          if (p <= 0.1) rejected[0.1]++;
        }
        for (const [alpha, count] of Object.entries(rejected)) {
          const a = Number(alpha);
          // Exact test: the count is Binomial(windows, ≤ α); 4 σ either side (the lumpy shape's ties make it conservative, never liberal).
          const sd = Math.sqrt(windows * a * (1 - a));
          assert.ok(count <= windows * a + 4 * sd, `${shape}, n ${n}: ${count} of ${windows} windows at p ≤ ${a}`);
          if (shape !== 'lumpy')
            assert.ok(
              count >= windows * a - 4 * sd,
              `${shape}, n ${n}: ${count} of ${windows} windows at p ≤ ${a} (too few: not exact)`,
            );
        }
      },
    ),
    { numRuns: 8, seed: 25 },
  );
});

test('it detects a shift: a 0.01-nat bias under 0.01-nat noise over 50 pairs gives p at the floor of 1/(B+1)', () => {
  const r = mulberry32(7);
  const w = new PermutationWindow({ window: 50, permutations: 999, seed: 1 });
  for (let i = 0; i < 50; i++) w.addDifference(-0.01 + 0.01 * normal(r));
  assert.ok(w.pValue() <= 0.002, `p ${w.pValue()}`);
  // Null data of the same size: not rejected at 1%.
  const nul = new PermutationWindow({ window: 50, permutations: 999, seed: 1 });
  const r2 = mulberry32(8);
  for (let i = 0; i < 50; i++) nul.addDifference(0.01 * normal(r2));
  assert.ok(nul.pValue() > 0.01, `null p ${nul.pValue()}`);
});

test('the window is bounded, the p-value deterministic, and 1 without evidence', () => {
  const w = new PermutationWindow({ window: 10, permutations: 199, seed: 3 });
  assert.equal(w.pValue(), 1, 'no pair yet');
  for (let i = 0; i < 25; i++) w.addDifference(i % 3 === 0 ? 0.02 : 0.01);
  assert.equal(w.pairs, 10);
  const again = new PermutationWindow({ window: 10, permutations: 199, seed: 3 });
  for (let i = 15; i < 25; i++) again.addDifference(i % 3 === 0 ? 0.02 : 0.01);
  assert.equal(w.pValue(), again.pValue(), 'same window, same seed: same p');
  // Ten positive differences: every relabelling but the all-positive and all-negative ones is smaller.
  assert.ok(w.pValue() < 0.05);
  assert.equal(permutationPValue([0, 0, 0], 99, mulberry32(1)), 1, 'identical logprobs: no evidence');
});

test('pairDifference: the mean lp_c − lp_b over the aligned positions with both logprobs known', () => {
  const row = (diff: number | null): PositionRow => ({
    i: 0,
    token: 'a',
    candidate: null,
    baseline: null,
    diff,
    shift: null,
    gap: null,
    kl: null,
  });
  const c = { positions: [row(0.01), row(-0.03), row(null), row(0.05)] } as unknown as Comparison;
  assert.ok(Math.abs((pairDifference(c) ?? NaN) - 0.01) < 1e-12);
  assert.equal(
    pairDifference({ positions: [row(null)] } as unknown as Comparison),
    null,
    'nothing aligned: the pair adds nothing',
  );
});

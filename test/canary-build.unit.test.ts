/**
 * `canary build`'s choice (src/canary/build.ts chooseProbes): by gap, or by worth per token — a
 * probe fires when its first token moves by min(floor, gap), so a short prompt with a slightly
 * larger gap is worth more per token than a long one with the smallest gap.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chooseProbes, type Measured } from '../src/canary/build.js';

const m = (id: string, gap: number, promptTokens: number | null, prompt = 'x'): Measured => ({
  candidate: { id, route: '/v1/completions', body: { prompt }, model: null },
  gap,
  promptTokens,
});

/** Every probe, by worth per token at a 0.1-nat floor and two generated tokens. */
const BY_COST = { count: 10, perSlice: null, minGap: 1e-3, rank: { by: 'cost', floor: 0.1, maxTokens: 2 } } as const;

const measured = [m('long-small', 0.01, 200), m('short-larger', 0.02, 4), m('mid', 0.015, 20), m('noise', 1e-4, 3)];

test('rank gap: the smallest gap first, whatever the prompt costs; gaps under the flip-noise floor skipped', () => {
  const c = chooseProbes(measured, { count: 10, perSlice: null, minGap: 1e-3, rank: { by: 'gap' } });
  assert.deepEqual(
    c.probes.map((p) => p.id),
    ['long-small', 'mid', 'short-larger'],
  );
  assert.equal(c.skipped['below the flip-noise floor'], 1);
});

test('rank cost: the smallest min(floor, gap) × (prompt tokens + maxTokens) first', () => {
  const c = chooseProbes(measured, BY_COST);
  // 0.02 × 6 = 0.12, 0.015 × 22 = 0.33, 0.01 × 202 = 2.02.
  assert.deepEqual(
    c.probes.map((p) => p.id),
    ['short-larger', 'mid', 'long-small'],
  );
  // Above the floor the move needed is the floor: the gap no longer matters, the cost does.
  const capped = chooseProbes([m('a', 0.5, 10), m('b', 0.2, 30)], BY_COST);
  assert.deepEqual(
    capped.probes.map((p) => p.id),
    ['a', 'b'],
  );
  // A backend that did not say its prompt tokens: estimated from the prompt (four bytes a token).
  const est = chooseProbes([m('unsaid-long', 0.01, null, 'y'.repeat(400)), m('said-short', 0.01, 3)], BY_COST);
  assert.deepEqual(
    est.probes.map((p) => p.id),
    ['said-short', 'unsaid-long'],
  );
});

test('the generated set: the built-in probes, 95 one-character and 676 two-letter prompts, each once, named', async () => {
  const { generatedInput } = await import('../src/canary/build.js');
  const { DEFAULT_PROBES } = await import('../src/canary/probes.js');
  const g = generatedInput();
  assert.equal(g.candidates.length, DEFAULT_PROBES.length + 95 + 676);
  assert.deepEqual(g.skipped, {});
  assert.equal(new Set(g.candidates.map((c) => c.id)).size, g.candidates.length, 'distinct ids');
  assert.deepEqual(
    g.candidates.slice(DEFAULT_PROBES.length, DEFAULT_PROBES.length + 2).map((c) => [c.id, c.body.prompt]),
    [
      ['char-32', ' '],
      ['char-33', '!'],
    ],
  );
  assert.equal(g.candidates.at(-1)!.id, 'zz');
});

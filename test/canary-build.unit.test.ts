/**
 * `canary build`'s choice (src/canary/build.ts chooseProbes): by gap, or by worth per token — a
 * probe fires when its first token moves by min(floor, gap), so a short prompt with a slightly
 * larger gap is worth more per token than a long one with the smallest gap.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chooseProbes, type Measured } from '../src/canary/build.js';

const m = (
  id: string,
  gap: number,
  promptTokens: number | null,
  prompt = 'x',
  decodeGap: number | null = null,
): Measured => ({
  candidate: { id, route: '/v1/completions', body: { prompt, max_tokens: 50 }, model: null },
  gap,
  decodeGap,
  promptTokens,
});

/** Every probe a first-token probe, by worth per token at a 0.1-nat floor (a decode probe would generate two tokens). */
const BY_COST = {
  count: 10,
  decode: 0,
  perSlice: null,
  minGap: 1e-3,
  rank: { by: 'cost', floor: 0.1, maxTokens: 2 },
} as const;

const measured = [m('long-small', 0.01, 200), m('short-larger', 0.02, 4), m('mid', 0.015, 20), m('noise', 1e-4, 3)];

test('rank gap: the smallest gap first, whatever the prompt costs; gaps under the flip-noise floor skipped', () => {
  const c = chooseProbes(measured, { count: 10, decode: 0, perSlice: null, minGap: 1e-3, rank: { by: 'gap' } });
  assert.deepEqual(
    c.probes.map((p) => p.id),
    ['long-small', 'mid', 'short-larger'],
  );
  assert.equal(c.skipped['below the flip-noise floor'], 1);
});

test('rank cost: the smallest min(floor, gap) × (prompt tokens + 1) first', () => {
  const c = chooseProbes(measured, BY_COST);
  // 0.02 × 5 = 0.10, 0.015 × 21 = 0.32, 0.01 × 201 = 2.01.
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

test('decode probes: chosen by their second token, placed evenly from second in line, no length of their own', () => {
  const pool = [
    m('f1', 0.01, 3),
    m('f2', 0.02, 3),
    m('f3', 0.03, 3),
    m('f4', 0.04, 3),
    m('f5', 0.05, 3),
    m('d-cheap', 0.5, 3, 'x', 0.01),
    m('d-long', 0.5, 300, 'x', 0.01),
    m('d-noise', 0.5, 3, 'x', 1e-4),
    m('one-token-answer', 0.2, 3, 'x', null),
  ];
  const c = chooseProbes(pool, { ...BY_COST, count: 6, decode: 2 });
  // Decode worth: 0.01 × (3 + 2) = 0.05 and 0.01 × 302; d-noise's second gap is flip noise; the
  // answer that stopped after one token has no decode step to watch.
  assert.deepEqual(
    c.probes.map((p) => p.id),
    ['f1', 'd-cheap', 'f2', 'f3', 'd-long', 'f4'],
  );
  for (const p of c.probes) {
    if (p.id.startsWith('d-')) assert.equal(p.body.max_tokens, undefined, `${p.id}: canary.maxTokens long`);
    else assert.equal(p.body.max_tokens, 1, `${p.id}: one token`);
    assert.equal(p.body.prompt, 'x');
  }
  assert.equal(c.skipped['over --count or --per-route'], 3);
  // More decode probes asked than there are: the first-token ones fill the count.
  const few = chooseProbes(pool, { ...BY_COST, count: 4, decode: 4 });
  assert.deepEqual(
    few.probes.map((p) => p.id),
    ['f1', 'd-cheap', 'f2', 'd-long'],
  );
});

test('the built-in set: first-token probes ask one token, decode probes none (canary.maxTokens), the first decode probe second', async () => {
  const { DEFAULT_PROBES, isDecodeProbe } = await import('../src/canary/probes.js');
  const decode = DEFAULT_PROBES.filter(isDecodeProbe);
  assert.ok(decode.length >= 2 && decode.length < DEFAULT_PROBES.length / 2, `${decode.length} decode probes`);
  assert.equal(isDecodeProbe(DEFAULT_PROBES[0]!), false);
  assert.equal(isDecodeProbe(DEFAULT_PROBES[1]!), true);
  for (const p of DEFAULT_PROBES) assert.equal(p.body.max_tokens, isDecodeProbe(p) ? undefined : 1, p.id);
});

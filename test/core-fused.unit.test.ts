import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  compare,
  definitionChecks,
  healthOf,
  parseResponse,
  type ParsedResponse,
  type TokenStep,
} from '../src/core/index.js';
import { chatBody, completionsBody, llamaCompletionsBody, type Pair, type Spec } from './core-bodies.js';

/**
 * `compare` takes the health and definition figures in its own pass over the positions (each
 * position matched once, the exponentials shared): they must be exactly what the standalone
 * `healthOf` and `definitionChecks` give on the same pair.
 */

const token = fc.constantFrom(' a', ' b', ' c', 'x', 'y', ' the', '');
const value = fc.oneof(
  { weight: 12, arbitrary: fc.double({ min: -20, max: 0, noNaN: true, noDefaultInfinity: true }) },
  { weight: 2, arbitrary: fc.constantFrom<number | null>(0, -9999, null, -Infinity) },
  { weight: 2, arbitrary: fc.double({ min: 0, max: 1, noNaN: true }) },
);
const spec: fc.Arbitrary<Spec> = fc
  .record({
    token,
    logprob: value,
    alts: fc.array(fc.tuple(token, value), { maxLength: 12 }),
    chosenInTop: fc.boolean(),
  })
  .map(({ token: t, logprob, alts, chosenInTop }) => ({
    token: t,
    logprob,
    top: (chosenInTop ? [[t, logprob] as Pair, ...alts] : alts) as Pair[],
  }));
const steps = fc.array(spec, { minLength: 1, maxLength: 24 });
const make = fc.constantFrom(chatBody, completionsBody, llamaCompletionsBody);
const eps = fc.array(fc.double({ min: -0.5, max: 0.5, noNaN: true }), { minLength: 1, maxLength: 6 });

function perturb(s: Spec[], e: number[], scale: number): Spec[] {
  let k = 0;
  const move = (v: number | null): number | null =>
    v !== null && v > -9000 && v <= 0 ? v * scale + (e[k++ % e.length] ?? 0) : v;
  return s.map((x) => ({ token: x.token, logprob: move(x.logprob), top: x.top.map(([t, v]) => [t, move(v)] as Pair) }));
}

function byIds(steps: readonly TokenStep[]): boolean {
  return steps.every((s) => s.id !== undefined) && steps.every((s) => s.top.length === 0 || s.topIds !== undefined);
}

test("compare's health and definition figures are the standalone functions' own, exactly", () => {
  fc.assert(
    fc.property(steps, eps, fc.constantFrom(1, 0.7), fc.nat(3), make, make, (s, e, scale, cut, mc, mb) => {
      const c = parseResponse(mc(perturb(s, e, scale).slice(0, s.length - cut)));
      const b = parseResponse(mb(s));
      const r = compare(c, b);
      if (r.verdict === 'incomparable') return;
      const byId = byIds(c.steps) && byIds(b.steps);
      assert.deepEqual(r.health, healthOf(r.positions, c.steps, b.steps, byId));
      assert.deepEqual(r.definition, definitionChecks(c.steps, b.steps, r.comparable, byId));
    }),
    { numRuns: 400 },
  );
});

test('a top list longer than the scratch has room for compares the same the first time as the next', () => {
  // The scratch grows on the first position with more than 31 entries: what compare reads must be the grown arrays.
  const long = (shift: number): ParsedResponse => {
    const st: TokenStep[] = [];
    for (let i = 0; i < 6; i++) {
      const top: [string, number][] = Array.from({ length: 40 }, (_, j) => [
        `t${j}`,
        -0.1 - j * 0.3 - (j === 35 ? shift : 0),
      ]);
      st.push({ token: 't0', logprob: top[0]![1], top });
    }
    return { format: 'chat', stream: false, steps: st, text: '', flags: [] };
  };
  const first = compare(long(0.7), long(0));
  const again = compare(long(0.7), long(0));
  assert.deepEqual(first, again);
  assert.ok(
    first.maxShift !== null && Math.abs(first.maxShift - 0.7) < 1e-9,
    `the shift of entry 35 is seen: ${first.maxShift}`,
  );
});

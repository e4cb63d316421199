import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { compare, DEFAULT_THRESHOLDS, parseResponse, type Comparison, type TokenStep } from '../src/core/index.js';
import {
  chatBody,
  chatStream,
  completionsBody,
  completionsStream,
  llamaCompletionsBody,
  sse,
  type Pair,
  type Spec,
} from './core-bodies.js';

const RUNS = { numRuns: 300 };

const token = fc.constantFrom(' a', ' b', ' c', 'x', 'y', ' the', 'é', '', ' a ');
const finite = fc.double({ min: -20, max: 0, noNaN: true, noDefaultInfinity: true });
const value = fc.oneof(
  { weight: 12, arbitrary: finite },
  { weight: 1, arbitrary: fc.constantFrom<number | null>(-9999, null, -3.4028234663852886e38, Number.NaN, -Infinity) },
  { weight: 1, arbitrary: fc.double() },
);
const spec: fc.Arbitrary<Spec> = fc
  .record({
    token,
    logprob: value,
    alts: fc.array(fc.tuple(token, value), { maxLength: 6 }),
    chosenInTop: fc.boolean(),
  })
  .map(({ token: t, logprob, alts, chosenInTop }) => ({
    token: t,
    logprob,
    top: (chosenInTop ? [[t, logprob] as Pair, ...alts] : alts) as Pair[],
  }));
const steps = fc.array(spec, { minLength: 1, maxLength: 12 });
const builders: Array<[string, (s: Spec[]) => unknown]> = [
  ['chat', chatBody],
  ['chat json text', (s) => JSON.stringify(chatBody(s))],
  ['chat stream', chatStream],
  ['completions', completionsBody],
  ['completions stream', (s) => completionsStream(s, 2)],
  ['llama.cpp completions', llamaCompletionsBody],
];
const builder = fc.constantFrom(...builders);

/** Every number in the comparison is finite (nothing non-finite can reach JSON). */
function assertFinite(x: unknown, path = '$'): void {
  if (typeof x === 'number') assert.ok(Number.isFinite(x), `${path} is ${x}`);
  else if (Array.isArray(x)) x.forEach((v, i) => assertFinite(v, `${path}[${i}]`));
  else if (x !== null && typeof x === 'object') for (const [k, v] of Object.entries(x)) assertFinite(v, `${path}.${k}`);
}

/** Moves every ordinary value by a bounded amount; sentinels and tokens stay as they are. */
function perturb(s: Spec[], eps: number[]): Spec[] {
  let k = 0;
  const move = (v: number | null): number | null =>
    v !== null && v > -9000 && v <= 1 ? v + (eps[k++ % eps.length] ?? 0) : v;
  return s.map((x) => ({ token: x.token, logprob: move(x.logprob), top: x.top.map(([t, v]) => [t, move(v)] as Pair) }));
}

const hasFinite = (c: Comparison): boolean => c.verdict !== 'incomparable';

/**
 * The properties below skip a run whose pair has nothing to compare. The generators make such a
 * pair rarely (measured: under 1 % of runs for each property, over many runs), so more than this
 * share skipped means compare() stopped comparing, and a property that skips everything proves
 * nothing.
 */
const MAX_SKIPPED = 0.05;

/** Counts a property's runs and its skipped runs; `check` fails when too many were skipped. */
function skipCounter(name: string) {
  const c = { runs: 0, skipped: 0 };
  return {
    run: () => void c.runs++,
    skip: () => void c.skipped++,
    check: () => {
      assert.ok(c.runs > 0, `${name}: no run`);
      assert.ok(
        c.skipped <= MAX_SKIPPED * c.runs,
        `${name}: ${c.skipped} of ${c.runs} runs skipped (more than ${MAX_SKIPPED * 100} %)`,
      );
    },
  };
}

test('compare(x, x) is identical (or incomparable when x has no usable value), in every format', () => {
  const count = skipCounter('compare(x, x)');
  fc.assert(
    fc.property(steps, builder, (s, [, make]) => {
      count.run();
      const r = compare(make(s), make(s), DEFAULT_THRESHOLDS);
      if (!hasFinite(r)) return count.skip();
      assert.equal(r.verdict, 'identical');
      assert.equal(r.shifted, 0);
      assert.equal(r.firstDivergence, null);
      assertFinite(r);
    }),
    RUNS,
  );
  count.check();
});

test('swapping the sides negates every diff and keeps every shift', () => {
  const eps = fc.array(fc.double({ min: -0.6, max: 0.6, noNaN: true }), { minLength: 1, maxLength: 8 });
  const swap = fc.array(fc.tuple(fc.nat(11), token), { maxLength: 2 });
  fc.assert(
    fc.property(steps, eps, swap, builder, (s, e, swaps, [, make]) => {
      const other = perturb(s, e);
      for (const [i, t] of swaps) if (other[i]) other[i] = { ...other[i], token: t };
      const ab = compare(make(other), make(s), DEFAULT_THRESHOLDS);
      const ba = compare(make(s), make(other), DEFAULT_THRESHOLDS);
      assert.equal(ab.comparable, ba.comparable);
      assert.equal(ab.firstDivergence, ba.firstDivergence);
      ab.positions.forEach((p, i) => {
        const q = ba.positions[i]!;
        if (p.diff === null) assert.equal(q.diff, null);
        else assert.ok(q.diff !== null && p.diff === -q.diff, `diff at ${i}: ${p.diff} vs ${q.diff}`);
        const unique = !ab.notes.some((n) => n.includes('duplicateTopKeys') || n.includes('collapsedTopK'));
        if (unique) assert.equal(p.shift, q.shift, `shift at ${i}`);
      });
      assertFinite(ab);
    }),
    RUNS,
  );
});

test('float noise far below the floor never turns noise into a shift', () => {
  const eps = fc.array(fc.double({ min: -1e-4, max: 1e-4, noNaN: true }), { minLength: 1, maxLength: 8 });
  const count = skipCounter('float noise');
  fc.assert(
    fc.property(steps, eps, builder, (s, e, [, make]) => {
      count.run();
      const r = compare(make(perturb(s, e)), make(s), DEFAULT_THRESHOLDS);
      if (!hasFinite(r)) return count.skip();
      assert.ok(r.verdict === 'noise' || r.verdict === 'identical', `${r.verdict}: ${r.explanation}`);
      assert.ok((r.maxShift ?? 0) <= 2e-4);
    }),
    RUNS,
  );
  count.check();
});

test('a shift of every value by more than the floor is never noise', () => {
  const count = skipCounter('a shift of every value');
  fc.assert(
    fc.property(steps, fc.double({ min: 0.11, max: 3, noNaN: true }), builder, (s, shift, [, make]) => {
      count.run();
      // Downwards, so that no value crosses the "above 1 is not a logprob" bound.
      const r = compare(make(perturb(s, [-shift])), make(s), DEFAULT_THRESHOLDS);
      if (!hasFinite(r) || r.positions.every((p) => p.shift === null)) return count.skip();
      assert.ok(['early_shift', 'global_shift', 'local_shift'].includes(r.verdict), r.verdict);
    }),
    RUNS,
  );
  count.check();
});

const anyValue = fc.oneof(fc.anything({ withNullPrototype: true, withBigInt: true }), fc.jsonValue());
/** Objects shaped like the formats' bodies, with any value (`loose`) at every leaf. */
const shapedWith = (loose: fc.Arbitrary<unknown>) =>
  fc.record(
    {
      object: fc.constantFrom('chat.completion', 'text_completion', 'chat.completion.chunk', 'error'),
      error: loose,
      model: loose,
      meta_info: fc.oneof(
        loose,
        fc.record({ output_token_logprobs: loose, output_top_logprobs: loose }, { requiredKeys: [] }),
      ),
      completion_probabilities: fc.oneof(loose, fc.array(loose)),
      choices: fc.oneof(
        loose,
        fc.array(
          fc.record(
            {
              index: fc.oneof(fc.constant(0), loose),
              text: loose,
              message: loose,
              delta: loose,
              token_ids: loose,
              logprobs: fc.oneof(
                loose,
                fc.record({
                  content: fc.oneof(
                    loose,
                    fc.array(
                      fc.oneof(
                        loose,
                        fc.record(
                          {
                            token: loose,
                            logprob: loose,
                            top_logprobs: loose,
                            bytes: loose,
                            id: loose,
                            prob: loose,
                            top_probs: loose,
                          },
                          { requiredKeys: [] },
                        ),
                      ),
                    ),
                  ),
                }),
                fc.record(
                  {
                    tokens: loose,
                    token_logprobs: loose,
                    top_logprobs: fc.oneof(loose, fc.array(fc.dictionary(fc.string(), loose))),
                  },
                  { requiredKeys: [] },
                ),
              ),
            },
            { requiredKeys: [] },
          ),
          { maxLength: 3 },
        ),
      ),
    },
    { requiredKeys: [] },
  );
const loose = anyValue;
const shaped = shapedWith(anyValue);
const shapedJson = shapedWith(fc.jsonValue());

test('arbitrary JSON, text, bytes and response-shaped junk never throw and never produce non-finite numbers', () => {
  const input = fc.oneof(
    loose,
    shaped,
    fc.string(),
    fc.uint8Array({ maxLength: 200 }),
    fc.array(shapedJson, { maxLength: 4 }).map((chunks) => sse(chunks)),
    fc.jsonValue().map((v) => `data: ${JSON.stringify(v)}\n\n`),
  );
  fc.assert(
    fc.property(input, input, (a, b) => {
      const pa = parseResponse(a);
      assert.ok(Array.isArray(pa.steps));
      const r = compare(a, b, DEFAULT_THRESHOLDS);
      assertFinite(r);
      assert.equal(typeof JSON.stringify(r), 'string');
    }),
    { numRuns: 1000 },
  );
});

/**
 * A slow, Map-based reading of the documented shift and flip, to hold the allocation-free hot loop
 * to: each side's tokens are its top list (first entry of a repeated token) plus the chosen
 * token with its own logprob.
 */
function reference(
  cs: TokenStep[],
  bs: TokenStep[],
): { d: number; shifts: Array<number | null>; gap: number | null; lowerBound: boolean } {
  const known = (s: TokenStep): Map<string, number> => {
    const m = new Map<string, number>();
    for (const [t, v] of s.top) if (!m.has(t)) m.set(t, Number.isFinite(v) ? v : Number.NaN);
    if (s.logprob !== null) m.set(s.token, s.logprob);
    else if (!m.has(s.token)) m.set(s.token, Number.NaN);
    return m;
  };
  const n = Math.min(cs.length, bs.length);
  let d = -1;
  for (let i = 0; i < n; i++) {
    if (cs[i]!.token !== bs[i]!.token) {
      d = i;
      break;
    }
  }
  const comparable = d >= 0 ? d + 1 : n;
  const shifts: Array<number | null> = [];
  let gap: number | null = null;
  let lowerBound = false;
  for (let i = 0; i < comparable; i++) {
    const mc = known(cs[i]!);
    const mb = known(bs[i]!);
    let s: number | null = null;
    for (const [t, v] of mc) {
      const w = mb.get(t);
      if (w === undefined || Number.isNaN(w) || Number.isNaN(v)) continue;
      s = Math.max(s ?? 0, Math.abs(v - w));
    }
    shifts.push(s);
    if (i === d) {
      const a = mb.get(bs[i]!.token)!;
      const b = mb.get(cs[i]!.token);
      // B listed by the baseline with a placeholder: its value is unknown, there is no gap.
      if (!Number.isNaN(a) && !(b !== undefined && Number.isNaN(b))) {
        if (b !== undefined && !Number.isNaN(b)) gap = a - b;
        else {
          lowerBound = true;
          // Every reported value bounds lp_b(B), repeated tokens included (they are other ids);
          // the chosen token's entry stands for its own logprob.
          const own = bs[i]!.top.findIndex((e) => e[0] === bs[i]!.token);
          const values = bs[i]!.top.map((e, j) => (j === own ? a : e[1]));
          gap = a - Math.min(a, ...values.filter((x) => Number.isFinite(x)));
        }
      }
    }
  }
  return { d, shifts, gap, lowerBound };
}

test('the allocation-free matching agrees with a Map-based reference on shifts and the flip', () => {
  const eps = fc.array(fc.double({ min: -0.6, max: 0.6, noNaN: true }), { minLength: 1, maxLength: 8 });
  const swap = fc.array(fc.tuple(fc.nat(11), token), { maxLength: 2 });
  const count = skipCounter('matching vs reference');
  fc.assert(
    fc.property(steps, eps, swap, fc.boolean(), (s, e, swaps, reorder) => {
      count.run();
      const other = perturb(s, e).map((x) => (reorder ? { ...x, top: [...x.top].reverse() } : x));
      for (const [i, t] of swaps) if (other[i]) other[i] = { ...other[i], token: t };
      const pc = parseResponse(chatBody(other));
      const pb = parseResponse(chatBody(s));
      const r = compare(pc, pb, DEFAULT_THRESHOLDS);
      if (r.verdict === 'incomparable') return count.skip();
      const ref = reference(pc.steps, pb.steps);
      assert.equal(r.firstDivergence, ref.d >= 0 ? ref.d : null);
      assert.deepEqual(
        r.positions.map((p) => p.shift),
        ref.shifts,
      );
      if (r.flip) {
        assert.equal(r.flip.gap, ref.gap);
        assert.equal(r.flip.lowerBound, ref.lowerBound);
      }
    }),
    { numRuns: 500 },
  );
  count.check();
});

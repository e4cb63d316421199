import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  compare,
  DEFAULT_THRESHOLDS,
  detectorEvidence,
  forcedStats,
  notScored,
  recount,
  scoredBlocks,
  withScoring,
  type ScoredPair,
  type TokenStep,
} from '../src/core/index.js';
import { locusOfShares } from '../src/core/scored.js';
import { chatBody, step, type Spec } from './core-bodies.js';
import { forced } from './helpers/steps.js';

// Past the first divergence (docs/format.md §7): the verdict over teacher-forced positions, the prompt
// block, and the locus — table-driven over hand-made pairs.

const T = DEFAULT_THRESHOLDS;

/** n forced steps, each moved by `move(i)` on this side. */
const side = (n: number, move: (i: number) => number, base = 0): TokenStep[] =>
  Array.from({ length: n }, (_, i) => forced(base + i, -0.3 + move(i), move(i)));

/** A free-running pair that diverges at `d` after shifts `moves` (the candidate flips at d). */
function freeRun(moves: number[], d: number | null) {
  const b: Spec[] = moves.map((_, i) =>
    step(` t${i}`, -0.3, [
      [' x', -2],
      [' y', -3],
    ]),
  );
  const c: Spec[] = moves.map((m, i) =>
    step(i === d ? ' x' : ` t${i}`, -0.3 + m, [
      [' x', -2 + m],
      [' y', -3],
    ]),
  );
  if (d !== null)
    c[d] = step(' x', -0.2, [
      [` t${d}`, -0.3 + moves[d]!],
      [' y', -3],
    ]);
  return compare(chatBody(c), chatBody(b), T);
}

function pair(o: {
  prompt: [TokenStep[], TokenStep[]];
  cont: [TokenStep[], TokenStep[]];
  mode?: 'prefill' | 'incremental';
}): ScoredPair {
  return {
    candidate: { prompt: o.prompt[0], continuation: o.cont[0] },
    baseline: { prompt: o.prompt[1], continuation: o.cont[1] },
    method: 'test scoring',
    mode: o.mode ?? 'prefill',
    promptStart: 1,
  };
}

test('forcedStats: shifts over the forced tokens and their alternatives, shifted above the floor', () => {
  const s = forcedStats(
    side(10, (i) => (i % 2 === 0 ? 0.5 : 0)),
    side(10, () => 0),
    T,
  );
  assert.equal(s.positions, 10);
  assert.equal(s.comparable, 10);
  assert.equal(s.shifted, 5);
  assert.equal(s.shiftedFraction, 0.5);
  assert.ok(Math.abs(s.maxShift! - 0.5) < 1e-12);
  assert.deepEqual(recount(s.shifts, { ...T, noiseFloor: 0.6 }).shifted, 0, 'recount against another floor');
});

test('a compute fault (zeroed layer): an early shift free-running becomes global over the scored positions, prompt shifted → compute', () => {
  const free = freeRun([0.9, 0.9], 1);
  assert.equal(free.verdict, 'early_shift');
  const p = pair({
    prompt: [side(8, () => 0.7), side(8, () => 0)],
    cont: [side(40, () => 0.8, 100), side(40, () => 0, 100)],
  });
  const { scored, prompt } = scoredBlocks(p, T);
  const r = withScoring(free, scored, prompt, T);
  assert.equal(r.verdict, 'global_shift');
  assert.equal(r.locus, 'compute');
  assert.equal(r.scored.shifted, 40);
  assert.equal(r.prompt?.shifted, 8);
  assert.match(r.explanation, /Global shift: 40 of 40 teacher-forced positions moved .*\(teacher-forced max shift /);
  assert.match(r.explanation, /teacher-forced positions/);
  assert.match(r.explanation, /Locus: compute — 8 of 8 prompt positions shifted/);
  // The cause follows the locus: a compute fault never points at the cache.
  assert.doesNotMatch(r.explanation, /KV cache|suspect the shared prefill/);
  assert.match(r.explanation, /and the prompt with it/);
  // The free-running fields stay as they were.
  assert.equal(r.firstDivergence, 1);
  assert.equal(r.comparable, free.comparable);
  assert.equal(r.shifted, free.shifted);
});

test('a decode-state fault scored incrementally: prompt agrees, the continuation moves → global_shift, decode_state', () => {
  const free = freeRun([0.05, 0.9], 1);
  const p = pair({
    prompt: [side(8, () => 0), side(8, () => 0)],
    cont: [side(30, () => 0.6, 100), side(30, () => 0, 100)],
    mode: 'incremental',
  });
  const { scored, prompt } = scoredBlocks(p, T);
  const r = withScoring(free, scored, prompt, T);
  assert.equal(r.verdict, 'global_shift');
  assert.equal(r.locus, 'decode_state');
  assert.match(r.explanation, /Locus: decode state — 0 of 8 prompt positions shifted/);
  assert.match(
    r.explanation,
    /while the prompt agrees: not decode-time noise — suspect the state carried into decode \(KV cache \/ state\)/,
  );
  assert.deepEqual(
    detectorEvidence(r),
    { shifted: 30, comparable: 30, maxShift: Math.max(free.maxShift!, r.scored.maxShift!) },
    'the scored positions, and the largest shift of either',
  );
});

test('a decode-state fault scored in one prefill pass: everything scored agrees, the generated tokens moved → the free verdict stands, decode_state', () => {
  const free = freeRun([0.05, 0.7, 0.9], 2);
  const p = pair({
    prompt: [side(8, () => 0), side(8, () => 0)],
    cont: [side(30, () => 0, 100), side(30, () => 0, 100)],
    mode: 'prefill',
  });
  const { scored, prompt } = scoredBlocks(p, T);
  const r = withScoring(free, scored, prompt, T);
  assert.equal(r.verdict, free.verdict, 'not turned into noise');
  assert.equal(r.locus, 'decode_state');
  assert.match(
    r.explanation,
    /scored in one prefill pass \(test scoring\) agree while generating them step by step moved/,
  );
  assert.deepEqual(
    detectorEvidence(r),
    { shifted: free.shifted, comparable: free.comparable, maxShift: free.maxShift },
    'the detectors count the positions that moved',
  );
});

test('noise everywhere: scoring keeps it noise, no locus; a local fault stays local', () => {
  const free = freeRun([0.001, 0.002, 0.001, 0.05], null);
  const p = pair({
    prompt: [side(4, () => 0.001), side(4, () => 0)],
    cont: [side(20, () => 0.002, 50), side(20, () => 0, 50)],
  });
  const { scored, prompt } = scoredBlocks(p, T);
  const r = withScoring(free, scored, prompt, T);
  assert.equal(r.verdict, 'noise');
  assert.equal(r.locus, null);
  const local = withScoring(
    free,
    ...(Object.values(
      scoredBlocks(
        pair({ prompt: [[], []], cont: [side(20, (i) => (i === 7 ? 0.9 : 0), 50), side(20, () => 0, 50)] }),
        T,
      ),
    ) as [never, never]),
    T,
  );
  assert.equal(local.verdict, 'local_shift');
  assert.equal(local.locus, 'unknown', 'no prompt block: where cannot be said');
});

test('not scored: the free-running verdict stays, with the reason; settled verdicts are never changed', () => {
  const free = freeRun([0.9, 0.9], 1);
  const r = withScoring(free, notScored('unsupported', 'SGLang has no chat-template endpoint'), null, T);
  assert.equal(r.verdict, 'early_shift');
  assert.match(r.explanation, /Not scored past the divergence: SGLang has no chat-template endpoint\./);
  const same = compare(chatBody([step(' a', -0.1, [])]), chatBody([step(' a', -0.1, [])]), T);
  assert.equal(same.verdict, 'identical');
  const kept = withScoring(
    same,
    scoredBlocks(pair({ prompt: [[], []], cont: [side(5, () => 0.9), side(5, () => 0)] }), T).scored,
    null,
    T,
  );
  assert.equal(kept.verdict, 'identical');
  assert.equal(kept.locus, null);
});

test('one continuation position cannot flip the locus: 1 of 30 scored positions at 0.161, the prompt at most 0.070 → unknown, not decode_state', () => {
  const free = freeRun([0.05, 0.02], null);
  const p = pair({
    prompt: [side(16, (i) => (i === 3 ? 0.07 : 0.01)), side(16, () => 0)],
    cont: [side(30, (i) => (i === 11 ? 0.161 : 0.02), 100), side(30, () => 0, 100)],
    mode: 'incremental',
  });
  const { scored, prompt } = scoredBlocks(p, T);
  assert.equal(scored.shifted, 1);
  assert.equal(prompt!.shifted, 0);
  const r = withScoring(free, scored, prompt, T);
  assert.equal(r.locus, 'unknown');
  assert.match(
    r.explanation,
    /Locus: unknown — 0 of 16 prompt positions shifted .*too few continuation positions moved/,
  );
});

test('locusOfShares: decode_state needs the continuation moved broadly and the prompt (almost) not; compute when the prompt moved otherwise', () => {
  assert.equal(locusOfShares({ shifted: 0, comparable: 16 }, 1), 'decode_state');
  assert.equal(
    locusOfShares({ shifted: 1, comparable: 16 }, 0.9),
    'decode_state',
    'one prompt position of 16 does not make it compute',
  );
  assert.equal(locusOfShares({ shifted: 8, comparable: 16 }, 0.9), 'compute');
  assert.equal(locusOfShares({ shifted: 2, comparable: 16 }, 0.1), 'compute');
  assert.equal(locusOfShares({ shifted: 0, comparable: 16 }, 0.3), 'unknown');
});

/**
 * The canary spread test (src/canary/runner.ts `oneSidedPValue`): exact under the null — the
 * candidate's shift and the trusted side's own repeat drawn alike — and decisive when every probe
 * moved more than the spread, as 0.3% weight noise does on llama.cpp. And the decode steps'
 * share (`judgeRound`), judged apart from the first tokens.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mulberry32 } from '../src/core/random.js';
import { decodeEvidence, judgeRound, oneSidedPValue, type CanaryPair } from '../src/canary/runner.js';
import type { BackendResult } from '../src/backend/dispatch.js';
import { DEFAULT_THRESHOLDS } from '../src/core/index.js';
import { analyzePair } from '../src/pair/analyze.js';

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

/** A completions answer of `tokens`, each chosen at `lp` beside a runner-up at `lp − 1`. */
function answer(tokens: string[], lp: number[]): BackendResult {
  return {
    status: 200,
    latencyMs: 1,
    serverHeaders: {},
    error: null,
    body: {
      choices: [
        {
          text: tokens.join(''),
          logprobs: {
            tokens,
            token_logprobs: lp,
            top_logprobs: tokens.map((t, i) => ({ [t]: lp[i]!, other: lp[i]! - 1 })),
            text_offset: tokens.map((_, i) => i),
          },
          finish_reason: 'length',
        },
      ],
      usage: { prompt_tokens: 3, completion_tokens: tokens.length, total_tokens: 3 + tokens.length },
    },
  };
}

const FLOOR = 0.01;

/** A probe compared at the floor: `n` tokens, the candidate's logprobs moved by `moves` (one per position). */
function pair(n: number, moves: number[]): CanaryPair {
  const tokens = Array.from({ length: n }, (_, i) => `t${i}`);
  const base = tokens.map(() => -0.5);
  const thresholds = { ...DEFAULT_THRESHOLDS, noiseFloor: FLOOR };
  const result = analyzePair(
    answer(
      tokens,
      base.map((x, i) => x + (moves[i] ?? 0)),
    ),
    answer(tokens, base),
    thresholds,
  );
  const probe = { id: `p${n}`, route: '/v1/completions', body: { prompt: 'x' }, gap: null } as const;
  return {
    probe,
    model: null,
    request: {},
    candidate: answer(tokens, base),
    baseline: answer(tokens, base),
    reference: false,
    result,
    decode: decodeEvidence(result.comparison, FLOOR),
    tokens: 0,
    bound: 0,
  };
}

const JUDGE = { alpha: 0.01, fireFraction: 0.5, permutations: 999, seed: 1 };

test('decode steps judged apart: a decode-only shift fires through first-token probes that would dilute the pooled share', () => {
  const firstTokens = Array.from({ length: 8 }, () => pair(1, [0]));
  const decodeShift = Array.from({ length: 3 }, () => pair(4, [0, 0.3, -0.3, 0.3]));
  const j = judgeRound([...firstTokens, ...decodeShift], JUDGE);
  // 9 shifted of 20 positions: under the pooled fraction; 9 of 9 decode steps: over it.
  assert.equal(j.pooledShare, 9 / 20);
  assert.equal(j.decodeShare, 1);
  assert.equal(j.decodePositions, 9);
  assert.ok(j.pValue > JUDGE.alpha, `the mean test does not see it (p ${j.pValue})`);
  assert.equal(j.verdict, 'changed');
  assert.match(j.summary, /decode-step share 1\.000 over 9 positions/);

  const clean = judgeRound([...firstTokens, ...Array.from({ length: 3 }, () => pair(4, [0, 0, 0, 0]))], JUDGE);
  assert.equal(clean.verdict, 'same');
  assert.equal(clean.decodeShare, 0);
  // One noisy decode step of nine is not a change; only first-token probes: no decode share at all.
  const noisy = [pair(4, [0, 0.3, 0, 0]), pair(4, [0, 0, 0, 0]), pair(4, [0, 0, 0, 0])];
  assert.equal(judgeRound([...firstTokens, ...noisy], JUDGE).verdict, 'same');
  const none = judgeRound(firstTokens, JUDGE);
  assert.equal(none.decodeShare, null);
  assert.doesNotMatch(none.summary, /decode-step/);
});

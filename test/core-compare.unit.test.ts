import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compare, DEFAULT_THRESHOLDS, parseResponse, type Comparison } from '../src/core/index.js';
import {
  chatBody,
  chatStream,
  completionsBody,
  completionsStream,
  llamaCompletionsBody,
  workedExample,
  sglangNativeBody,
  step,
  type Spec,
} from './core-bodies.js';

const close = (actual: number | null | undefined, expected: number, what: string, eps = 1e-9): void => {
  assert.ok(
    typeof actual === 'number' && Math.abs(actual - expected) <= eps,
    `${what}: expected ${expected}, got ${actual}`,
  );
};

/** Ten aligned steps with three alternatives each; `moves[i]` shifts the chosen logprob at i. */
function run(moves: number[], opts: { altMove?: number[] } = {}): { baseline: Spec[]; candidate: Spec[] } {
  const baseline: Spec[] = [];
  const candidate: Spec[] = [];
  moves.forEach((m, i) => {
    const tok = ` t${i}`;
    const b = -0.2 - 0.05 * i;
    const a = opts.altMove?.[i] ?? 0;
    baseline.push(
      step(tok, b, [
        [' x', -2.5],
        [' y', -3.5],
      ]),
    );
    candidate.push(
      step(tok, b + m, [
        [' x', -2.5 + a],
        [' y', -3.5],
      ]),
    );
  });
  return { baseline, candidate };
}

function cmp(candidate: Spec[], baseline: Spec[]): Comparison {
  return compare(chatBody(candidate), chatBody(baseline), DEFAULT_THRESHOLDS);
}

test('the worked example: gap 0.45 is systematic and every comparable position moved → global_shift', () => {
  const { candidate, baseline } = workedExample();
  const r = cmp(candidate, baseline);
  assert.equal(r.verdict, 'global_shift');
  assert.equal(r.firstDivergence, 5);
  assert.equal(r.aligned, 5);
  assert.equal(r.comparable, 6);
  assert.equal(r.shifted, 6);
  close(r.shiftedFraction, 1, 'shiftedFraction');
  const diffs = r.positions.map((p) => p.diff);
  [-0.2, 0.28, -0.36, 0.51, -0.15].forEach((d, i) => close(diffs[i], d, `diff_${i}`));
  assert.equal(diffs[5], null, 'no diff at the divergence');
  close(r.maxAbsDiff, 0.51, 'maxAbsDiff');
  close(r.meanAbsDiff, 0.3, 'meanAbsDiff');
  close(r.positions[5]!.shift, 0.37, 'shift at the flip (B moved by 0.37)');
  close(r.maxShift, 0.51, 'maxShift');
  assert.ok(r.flip);
  assert.equal(r.flip.index, 5);
  assert.equal(r.flip.baselineToken, ' Artificial');
  assert.equal(r.flip.candidateToken, ' artificial');
  close(r.flip.gap, 0.45, 'gap');
  assert.equal(r.flip.lowerBound, false);
  assert.equal(r.flip.class, 'systematic');
  close(r.flip.crossPathDiff, -0.31, 'crossPathDiff');
  assert.equal(r.positions[5]!.candidateToken, ' artificial');
  assert.match(r.explanation, /every decode step moved: suspect the shared prefill input \(KV cache \/ state\)/i);
  assert.match(r.explanation, /where it is written, in the cache medium and where it is read back/);
});

test('the worked example gives the same verdict and numbers in every wire format, streamed or not', () => {
  const { candidate, baseline } = workedExample();
  const ref = cmp(candidate, baseline);
  const forms: Array<[string, (s: Spec[]) => unknown]> = [
    ['completions', completionsBody],
    ['completions stream', (s) => completionsStream(s)],
    ['chat stream', chatStream],
  ];
  for (const [name, make] of forms) {
    const r = compare(make(candidate), make(baseline), DEFAULT_THRESHOLDS);
    assert.equal(r.verdict, ref.verdict, name);
    assert.deepEqual(r.flip, ref.flip, name);
    assert.deepEqual(
      r.positions.map((p) => p.shift),
      ref.positions.map((p) => p.shift),
      name,
    );
  }
});

test('identical: no divergence and every value equal', () => {
  const { baseline } = run([0, 0, 0, 0]);
  const r = compare(chatBody(baseline), structuredClone(chatBody(baseline)), DEFAULT_THRESHOLDS);
  assert.equal(r.verdict, 'identical');
  assert.equal(r.maxShift, 0);
  assert.equal(r.shifted, 0);
  assert.equal(r.positions[2]!.kl, 0);
});

test('noise: float-sized differences stay under the floor, and the caveat is said', () => {
  const { candidate, baseline } = run([1e-3, -2e-3, 0.05, -0.08, 0]);
  const r = cmp(candidate, baseline);
  assert.equal(r.verdict, 'noise');
  close(r.maxShift, 0.08, 'maxShift', 1e-12);
  assert.equal(r.shifted, 0);
  assert.match(r.explanation, /does not prove there is no bug/);
});

test('a shift exactly equal to the floor is not above it', () => {
  // Dyadic values, so the difference is exactly 0.125.
  const baseline = [step(' a', -0.25), step(' b', -0.5), step(' c', -0.5)];
  const candidate = [step(' a', -0.375), step(' b', -0.5), step(' c', -0.5)];
  const t = { ...DEFAULT_THRESHOLDS, noiseFloor: 0.125 };
  const r = compare(chatBody(candidate), chatBody(baseline), t);
  assert.equal(r.maxShift, 0.125);
  assert.equal(r.verdict, 'noise');
  const above = compare(chatBody(candidate), chatBody(baseline), { ...t, noiseFloor: 0.124 });
  assert.equal(above.verdict, 'local_shift');
});

test('noise with a near-tie flip: ambiguous, "cannot be attributed"', () => {
  const baseline = [step(' a', -0.3, [[' b', -1]]), step(' Yes', -0.65, [[' yes', -0.75]])];
  const candidate = [step(' a', -0.31, [[' b', -1.0]]), step(' yes', -0.7, [[' Yes', -0.71]])];
  const r = cmp(candidate, baseline);
  assert.equal(r.verdict, 'noise');
  close(r.flip?.gap ?? null, 0.1, 'gap');
  assert.equal(r.flip?.class, 'ambiguous');
  assert.match(r.explanation, /near-tie, cannot be attributed/);
});

test('a gray flip whose B is outside the baseline top-k: lower-bound gap, no shift → noise', () => {
  const baseline = [step(' a', -0.1), step(' b', -0.1), step(' c', -0.1), step(' A', -0.2, [[' X', -0.55]])];
  const candidate = [step(' a', -0.1), step(' b', -0.1), step(' c', -0.1), step(' B', -0.27, [[' A', -0.28]])];
  const r = cmp(candidate, baseline);
  assert.equal(r.flip?.lowerBound, true);
  close(r.flip?.gap ?? null, 0.35, 'gap ≥ lp_b(A) − smallest reported');
  assert.equal(r.flip?.class, 'gray');
  close(r.flip?.crossPathDiff ?? null, -0.08, 'crossPathDiff');
  assert.equal(r.positions[3]!.shift !== null && r.positions[3]!.shift < 0.1, true);
  assert.equal(r.verdict, 'noise');
});

test('early_shift: a systematic flip at the first token leaves one comparable position', () => {
  const baseline = [step(' The', -0.1, [[' A', -1.2]]), step(' cat', -0.2)];
  const candidate = [step(' A', -0.5, [[' The', -0.6]]), step(' dog', -0.2)];
  const r = cmp(candidate, baseline);
  assert.equal(r.verdict, 'early_shift');
  assert.equal(r.comparable, 1);
  assert.equal(r.aligned, 0);
  assert.equal(r.flip?.class, 'systematic');
  close(r.flip?.gap ?? null, 1.1, 'gap');
  assert.match(
    r.explanation,
    /diverged at once with a large shift .*too few positions to localise from this pair alone/,
  );
  // The same text is read online (a live pair) and offline (compare of two files): no "window" to see.
  assert.doesNotMatch(r.explanation, /see the window/);
});

test('local_shift: two of ten positions moved → specific positions, a token-specific path', () => {
  const moves = [0, 0, 0, 0.4, 0, 0, 0, -0.3, 0, 0];
  const { candidate, baseline } = run(moves);
  const r = cmp(candidate, baseline);
  assert.equal(r.verdict, 'local_shift');
  assert.equal(r.shifted, 2);
  close(r.shiftedFraction, 0.2, 'shiftedFraction');
  assert.equal(r.firstDivergence, null);
  assert.equal(r.flip, null);
  assert.match(r.explanation, /specific positions: suspect a token-specific path/i);
  assert.match(r.explanation, /positions 3, 7/);
});

test('the shift sees top-k alternatives: a near-certain chosen token that did not move still shifts', () => {
  const { candidate, baseline } = run([0, 0, 0, 0, 0], { altMove: [0.5, 0.5, 0.5, 0.5, 0.5] });
  const r = cmp(candidate, baseline);
  assert.equal(r.maxAbsDiff, 0);
  close(r.maxShift, 0.5, 'maxShift');
  assert.equal(r.verdict, 'global_shift');
});

test('global_fraction is inclusive: 4 of 5 shifted is global at 0.8, local at 0.81', () => {
  const { candidate, baseline } = run([0.3, 0.3, 0.3, 0.3, 0]);
  assert.equal(cmp(candidate, baseline).verdict, 'global_shift');
  const r = compare(chatBody(candidate), chatBody(baseline), { ...DEFAULT_THRESHOLDS, globalFraction: 0.81 });
  assert.equal(r.verdict, 'local_shift');
});

test('a systematic flip with no shifted position is still not noise', () => {
  // B is outside the baseline's list and A outside the candidate's: no token both sides report.
  const baseline = [step(' a', -0.1), step(' b', -0.1), step(' c', -0.1), step(' A', -0.1, [[' X', -0.9]])];
  const candidate = [step(' a', -0.1), step(' b', -0.1), step(' c', -0.1), step(' B', -0.2, [[' Y', -1.5]])];
  const r = cmp(candidate, baseline);
  assert.equal(r.shifted, 0);
  assert.equal(r.positions[3]!.shift, null);
  assert.equal(r.flip?.class, 'systematic');
  assert.equal(r.flip?.crossPathDiff, null);
  assert.equal(r.verdict, 'local_shift');
});

test('flip classes at the thresholds: a gap equal to a threshold is gray', () => {
  for (const [gap, cls] of [
    [0.25, 'ambiguous'],
    [0.3, 'gray'],
    [0.375, 'gray'],
    [0.5, 'systematic'],
  ] as const) {
    const baseline = [step(' A', -0.125, [[' B', -0.125 - gap]])];
    const candidate = [step(' B', -0.125 - gap, [[' A', -0.125]])];
    assert.equal(cmp(candidate, baseline).flip?.class, cls, `gap ${gap}`);
  }
});

test('tokenizer_mismatch: the same text split at different boundaries', () => {
  const baseline = [step(' Hello', -0.1), step(' world', -0.2), step('!', -0.3)];
  const candidate = [step(' Hel', -0.4), step('lo', -0.01), step(' world', -0.2), step('!', -0.3)];
  const r = cmp(candidate, baseline);
  assert.equal(r.verdict, 'tokenizer_mismatch');
  assert.equal(r.firstDivergence, 0);
  assert.match(r.explanation, /same text with different token boundaries/);
  // A max_tokens cap cuts the side with more tokens earlier: the shorter text is a prefix.
  const capped = cmp(candidate.slice(0, 3), baseline);
  assert.equal(capped.verdict, 'tokenizer_mismatch');
  // The split side hit the cap while the other stopped earlier: still a prefix from more tokens.
  const cut = [step(' Hel', -0.4), step('lo', -0.01), step(' wor', -0.2)];
  assert.equal(cmp(cut, baseline.slice(0, 2)).verdict, 'tokenizer_mismatch');
  // A shorter text from fewer tokens is a side that stopped, not a split.
  assert.notEqual(cmp(candidate.slice(0, 2), baseline).verdict, 'tokenizer_mismatch');
});

test('tokenizer_mismatch when ids are carried: split pieces that kept the whole token id', () => {
  const mk = (token: string, id: number, lp: number): Spec => ({
    token,
    logprob: lp,
    id,
    top: [[token, lp]],
    topIds: [id],
  });
  const baseline = llamaCompletionsBody([mk(' Hello', 100, -0.1), mk(' world', 200, -0.2)]);
  const candidate = llamaCompletionsBody([mk(' Hel', 100, -0.4), mk('lo', 100, -0.1), mk(' world', 200, -0.2)]);
  const r = compare(candidate, baseline, DEFAULT_THRESHOLDS);
  assert.equal(r.firstDivergence, 1, 'aligned by id, the texts differ from position 0 already');
  assert.equal(r.verdict, 'tokenizer_mismatch');
});

test('not a tokenizer mismatch: texts unknown (SGLang without text), or an empty special token', () => {
  const a: Spec[] = [
    {
      token: '',
      logprob: -0.1,
      id: 1,
      top: [
        ['', -0.1],
        ['', -2],
      ],
      topIds: [1, 2],
    },
  ];
  const b: Spec[] = [
    {
      token: '',
      logprob: -0.1,
      id: 2,
      top: [
        ['', -0.1],
        ['', -2],
      ],
      topIds: [2, 1],
    },
  ];
  assert.notEqual(
    compare(sglangNativeBody(a, false), sglangNativeBody(b, false), DEFAULT_THRESHOLDS).verdict,
    'tokenizer_mismatch',
  );
  const special = cmp(
    [step('{', -0.1), step('}', -0.1), step('\n', -0.5)],
    [step('{', -0.1), step('}', -0.1), step('', -0.4)],
  );
  assert.equal(special.firstDivergence, 2);
  assert.notEqual(special.verdict, 'tokenizer_mismatch');
});

test('tokenizer_mismatch by bytes: a multi-byte character split across two byte tokens', () => {
  const euro = [...Buffer.from('€', 'utf8')];
  const base = chatBody([step(' €', -0.1), step('5', -0.2)]);
  const cand = chatBody([step(' ', -0.1), step('�', -0.2), step('5', -0.2)]);
  const items = (cand.choices as Array<{ logprobs: { content: Array<{ bytes: number[] }> } }>)[0]!.logprobs.content;
  items[1]!.bytes = euro;
  const r = compare(cand, base, DEFAULT_THRESHOLDS);
  assert.equal(r.verdict, 'tokenizer_mismatch');
});

test('a real flip to a different word is not a tokenizer mismatch', () => {
  const baseline = [step(' Hello', -0.1, [[' Hi', -2.1]]), step(' world', -0.2)];
  const candidate = [step(' Hi', -0.1, [[' Hello', -2.1]]), step(' world', -0.2)];
  assert.equal(cmp(candidate, baseline).verdict, 'early_shift');
});

test('incomparable: a side without logprobs, or with only sentinels', () => {
  const ok = chatBody([step(' a', -0.1)]);
  const none = chatBody([step(' a', -0.1)]);
  (none.choices as Array<Record<string, unknown>>)[0]!.logprobs = null;
  const r = compare(ok, none, DEFAULT_THRESHOLDS);
  assert.equal(r.verdict, 'incomparable');
  assert.match(r.explanation, /baseline has no logprobs/);
  assert.deepEqual(r.positions, []);
  const sentinels = chatBody([{ token: ' a', logprob: -9999, top: [[' a', -9999]] }]);
  assert.equal(compare(sentinels, ok, DEFAULT_THRESHOLDS).verdict, 'incomparable');
  assert.equal(compare('not json', ok, DEFAULT_THRESHOLDS).verdict, 'incomparable');
});

test('different lengths without divergence: the common part is compared, no flip, a note says so', () => {
  const { candidate, baseline } = run([0, 0, 0, 0, 0, 0]);
  const r = cmp(candidate.slice(0, 4), baseline);
  assert.equal(r.comparable, 4);
  assert.equal(r.aligned, 4);
  assert.equal(r.firstDivergence, null);
  assert.equal(r.flip, null);
  assert.equal(r.verdict, 'noise', 'not identical: the lengths differ');
  assert.match(r.notes.join('\n'), /lengths differ \(candidate 4 tokens, baseline 6\)/);
});

test('tokens are matched by id when both sides carry ids', () => {
  const mk = (text: string, id: number): Spec => ({
    token: text,
    logprob: -0.2,
    id,
    top: [
      [text, -0.2],
      ['z', -2],
    ],
    topIds: [id, 99],
  });
  // Same ids, texts rendered differently (one server strips a SentencePiece space): aligned.
  const r = compare(
    llamaCompletionsBody([mk(' true', 5), mk('.', 6)]),
    llamaCompletionsBody([mk('true', 5), mk('.', 6)]),
    DEFAULT_THRESHOLDS,
  );
  assert.equal(r.firstDivergence, null);
  assert.equal(r.verdict, 'noise', 'aligned, equal values, but the texts are not exactly equal');
  assert.ok(r.notes.includes('tokens matched by id'));
  // Same text, different ids: a divergence.
  const s = compare(llamaCompletionsBody([mk('true', 5)]), llamaCompletionsBody([mk('true', 7)]), DEFAULT_THRESHOLDS);
  assert.equal(s.firstDivergence, 0);
});

test('sentinels never enter a number: the position keeps its other tokens', () => {
  const baseline = [step(' a', -0.1, [[' b', -2]]), step(' c', -0.2, [[' d', -3]])];
  const candidate = [
    {
      token: ' a',
      logprob: -9999,
      top: [
        [' a', -9999],
        [' b', -2.5],
      ],
    } as Spec,
    step(' c', -0.2, [[' d', -3]]),
  ];
  const r = cmp(candidate, baseline);
  assert.equal(r.positions[0]!.diff, null);
  close(r.positions[0]!.shift, 0.5, 'shift from the alternative');
  assert.equal(r.positions[0]!.candidate, null);
  assert.ok(r.notes.some((n) => n.startsWith('candidate: ') && n.includes('sentinel')));
  assert.doesNotMatch(JSON.stringify(r), /Infinity|NaN/);
});

test('KL estimate: exact on full two-token distributions, zero on identical ones', () => {
  const ln = Math.log;
  const baseline = [
    {
      token: 'a',
      logprob: ln(0.5),
      top: [
        ['a', ln(0.5)],
        ['b', ln(0.5)],
      ],
    } as Spec,
  ];
  const candidate = [
    {
      token: 'a',
      logprob: ln(0.25),
      top: [
        ['b', ln(0.75)],
        ['a', ln(0.25)],
      ],
    } as Spec,
  ];
  const r = cmp(candidate, baseline);
  close(r.positions[0]!.kl, 0.5 * ln(4 / 3), 'KL(b‖c)', 1e-9);
  assert.equal(cmp(baseline, baseline).positions[0]!.kl, 0);
});

test('compare accepts parsed responses and raw bodies alike', () => {
  const { candidate, baseline } = workedExample();
  const a = compare(
    parseResponse(chatBody(candidate)),
    parseResponse(JSON.stringify(chatBody(baseline))),
    DEFAULT_THRESHOLDS,
  );
  const b = cmp(candidate, baseline);
  assert.deepEqual(a, b);
});

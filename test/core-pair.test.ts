import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_THRESHOLDS } from '../src/core/index.js';
import { classifyPair, type SideAnswer } from '../src/core/pair.js';
import { analyzePair } from '../src/pair/analyze.js';
import { chatBody } from './helpers/capture.js';

// classifyPair is the one classification of a pair: the mirror, analyze and replay run it, so
// its order is what every outcome count means (docs/format.md, logprobe_mirror_total).

const t = DEFAULT_THRESHOLDS;
const good = (shift = 0): SideAnswer => ({
  status: 200,
  body: chatBody([
    [' a', -0.5 + shift],
    [' b', -0.7 + shift],
    [' c', -0.9 + shift],
    [' d', -1.1 + shift],
  ]),
  error: null,
});
const http500: SideAnswer = { status: 500, body: { error: { message: 'boom' } }, error: null };
const reset: SideAnswer = { status: 0, body: null, error: 'ECONNRESET: read ECONNRESET' };
const html: SideAnswer = { status: 200, body: '<html>proxy page</html>', error: null };
const noLogprobs: SideAnswer = {
  status: 200,
  body: {
    object: 'chat.completion',
    choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, logprobs: null }],
  },
  error: null,
};

test('classifyPair: the candidate failing first, then the baseline, then an unreadable body (the candidate blamed first), then compare', () => {
  assert.deepEqual(classifyPair(reset, http500, t), {
    outcome: 'candidate_error',
    side: 'candidate',
    comparison: null,
    candidate: null,
    baseline: null,
  });
  assert.equal(classifyPair(http500, html, t).outcome, 'candidate_error');
  assert.equal(classifyPair(good(), http500, t).outcome, 'baseline_error');
  assert.equal(classifyPair(good(), reset, t).side, 'baseline');
  const both = classifyPair(html, html, t);
  assert.equal(both.outcome, 'unparseable');
  assert.equal(both.side, 'candidate');
  assert.equal(classifyPair(good(), html, t).side, 'baseline');
  assert.equal(classifyPair(noLogprobs, good(), t).outcome, 'incomparable');
  const same = classifyPair(good(), good(), t);
  assert.equal(same.outcome, 'ok');
  assert.equal(same.comparison?.verdict, 'identical');
  assert.equal(classifyPair(good(0.5), good(), t).comparison?.verdict, 'global_shift');
});

test('classifyPair without a baseline: a candidate that answered is ok with nothing compared, a failed one candidate_error', () => {
  assert.deepEqual(classifyPair(good(), null, t), { outcome: 'ok', comparison: null, candidate: null, baseline: null });
  assert.equal(classifyPair(http500, null, t).outcome, 'candidate_error');
});

test('classifyPair reads the verdict after `score`: a rescored comparison decides ok or incomparable', () => {
  const r = classifyPair(good(), good(), t, (free) => ({ ...free, verdict: 'incomparable' }));
  assert.equal(r.outcome, 'incomparable');
  assert.equal(r.comparison?.verdict, 'incomparable');
});

test("analyzePair says why a pair was not compared, in the mirror's words", () => {
  assert.equal(analyzePair(http500, good(), t).reason, 'HTTP 500: boom');
  assert.equal(analyzePair(good(), reset, t).reason, 'ECONNRESET');
  assert.match(analyzePair(good(), html, t).reason ?? '', /^baseline: /);
  assert.equal(analyzePair(good(), good(), t).reason, undefined);
});

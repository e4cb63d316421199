/**
 * `prompt_mismatch` (issue #36): the two sides of a pair read different prompt tokens. Classified
 * from the usage counts both sides report, never a shift; its window detector fires
 * LogprobPromptMismatch at `fireFraction` of the compared pairs; offline re-classification keeps
 * the first differing token the engines named live.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { classifyPair, promptTokens } from '../src/core/pair.js';
import { initialDetectorState, observePrompt, tickPrompt, type AlertConfig } from '../src/core/detector.js';
import { DEFAULT_THRESHOLDS } from '../src/core/types.js';
import { analyzePair } from '../src/pair/analyze.js';

/** A chat completion of two tokens with logprobs, reporting `prompt` prompt tokens. */
function chat(prompt: number | undefined, lp = -0.1) {
  const content = ['Hel', 'lo'].map((token) => ({
    token,
    logprob: lp,
    bytes: null,
    top_logprobs: [
      { token, logprob: lp, bytes: null },
      { token: 'x', logprob: -3, bytes: null },
    ],
  }));
  return {
    status: 200,
    body: {
      object: 'chat.completion',
      choices: [
        { index: 0, message: { role: 'assistant', content: 'Hello' }, logprobs: { content }, finish_reason: 'length' },
      ],
      ...(prompt !== undefined
        ? { usage: { prompt_tokens: prompt, completion_tokens: 2, total_tokens: prompt + 2 } }
        : {}),
    },
    error: null,
  };
}

test('different prompt token counts are prompt_mismatch, with the counts; equal or unknown counts are compared', () => {
  const m = classifyPair(chat(34), chat(33, -0.5), DEFAULT_THRESHOLDS);
  assert.equal(m.comparison?.verdict, 'prompt_mismatch');
  assert.deepEqual(m.comparison?.promptMismatch, { candidateTokens: 34, baselineTokens: 33 });
  assert.match(m.comparison!.explanation, /the candidate 34 prompt tokens, the baseline 33/);
  // Equal counts: the shift of 0.4 nats on both tokens is a shift (early: two positions).
  assert.equal(classifyPair(chat(33), chat(33, -0.5), DEFAULT_THRESHOLDS).comparison?.verdict, 'early_shift');
  // A side that does not say: compared as before.
  assert.notEqual(classifyPair(chat(undefined), chat(33), DEFAULT_THRESHOLDS).comparison?.verdict, 'prompt_mismatch');
});

test('the prompt counts of every API: chat and completions usage, the Responses API, SGLang /generate', () => {
  assert.equal(promptTokens({ usage: { prompt_tokens: 7 } }), 7);
  assert.equal(promptTokens({ usage: { input_tokens: 9 } }), 9);
  assert.equal(promptTokens({ meta_info: { prompt_tokens: 11 } }), 11);
  assert.equal(promptTokens({ usage: { prompt_tokens: -1 } }), null);
  assert.equal(promptTokens('text'), null);
});

test('LogprobPromptMismatch fires once half of the window is mismatched, resolves when the prompts agree again', () => {
  const cfg: AlertConfig = { window: 10, minRequests: 4, fireFraction: 0.5, forSeconds: 0, cusum: { k: 0.5, h: 5 } };
  let s = initialDetectorState();
  const fired: string[] = [];
  const feed = (mismatched: boolean, i: number) => {
    const r = observePrompt(s, mismatched, `r${i}`, cfg, i);
    s = r.state;
    for (const t of r.transitions) fired.push(`${t.alert} ${t.to} at ${i}`);
  };
  for (let i = 0; i < 3; i++) feed(i === 0, i); // 1 of 3: under minRequests and the share
  assert.deepEqual(fired, []);
  feed(true, 3); // 2 of 4: half
  assert.deepEqual(fired, ['LogprobPromptMismatch firing at 3']);
  for (let i = 4; i < 10; i++) feed(true, i);
  assert.equal(s.cusum, 0, 'no CUSUM: a mismatch is all or nothing');
  for (let i = 10; i < 30; i++) feed(false, i);
  assert.deepEqual(fired, ['LogprobPromptMismatch firing at 3', 'LogprobPromptMismatch resolved at 15']);
  assert.deepEqual(tickPrompt(s, cfg, 31).transitions, []);
});

test('offline, a prompt_mismatch keeps the first differing token the engines named live', () => {
  const live = {
    candidateTokens: 34,
    baselineTokens: 33,
    at: 1,
    candidate: { id: 91, text: '[' },
    baseline: { id: 117, text: 'u' },
  };
  const r = analyzePair(chat(34), chat(33), DEFAULT_THRESHOLDS, { promptMismatch: live });
  assert.deepEqual(r.comparison?.promptMismatch, live);
  assert.match(
    r.comparison!.explanation,
    /first differ at prompt token 1: the candidate read "\[" \(id 91\), the baseline "u" \(id 117\)/,
  );
  // A capture whose counts no longer match the bodies is not trusted.
  const stale = analyzePair(chat(35), chat(33), DEFAULT_THRESHOLDS, { promptMismatch: live });
  assert.equal(stale.comparison?.promptMismatch?.at, undefined);
});

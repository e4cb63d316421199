import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createLlamaModel, type LlamaEngineModel } from '../src/llama/model.js';
import { flatten, greedy, PROMPTS } from './helpers/llama.js';

// threads 1 throughout: on a 2-core machine shared with other work, 2 threads are ~20× slower.
let a: LlamaEngineModel;
let b: LlamaEngineModel;
before(async () => {
  a = await createLlamaModel({ seed: 1, threads: 1 });
  b = await createLlamaModel({ seed: 1, threads: 1 });
});
after(async () => {
  await a.close();
  await b.close();
});

test('the model loads with the clean setup llama.cpp reports back', () => {
  assert.deepEqual(a.context, {
    contextSize: 2048,
    batchSize: 512,
    threads: 1,
    flashAttention: false,
    kvCacheKeyType: 'F16',
    kvCacheValueType: 'F16',
  });
  assert.equal(a.eosToken, a.vocabSize - 1);
  assert.equal(a.tokenText(a.eosToken ?? -1), '<|endoftext|>');
});

test('tokenize and detokenize round-trip text, including multi-byte characters split across tokens', () => {
  for (const text of ['The quick brown fox', 'héllo wörld — 日本語 🎉\n', '']) {
    const ids = a.tokenize(text);
    assert.equal(a.detokenize(ids), text);
    assert.equal(Buffer.concat(ids.map((id) => a.tokenBytes(id))).toString('utf8'), text);
  }
  assert.deepEqual(a.tokenize(' the'), [a.tokenize(' the')[0]], 'merges apply: " the" is one token');
  assert.equal(a.tokenText(0xc3), '\ufffd', 'a lone UTF-8 lead byte renders as U+FFFD');
  assert.throws(() => a.tokenText(a.vocabSize), RangeError);
});

test('greedy generation is deterministic and mostly printable', async () => {
  const prompt = PROMPTS[0] ?? '';
  const first = await greedy(a, prompt, 32);
  const second = await greedy(a, prompt, 32);
  assert.deepEqual(second.tokens, first.tokens);
  const text = a.detokenize(first.tokens);
  assert.match(text, /^[\x20-\x7e\n]+$/, `output ${JSON.stringify(text)}`);
  assert.ok(new Set(first.tokens).size > 5, 'not a single repeated token');
});

test('two clean engines give bitwise-equal logprobs over the whole vocabulary', async () => {
  for (const prompt of PROMPTS) {
    const ta = await greedy(a, prompt, 24);
    const tb = await greedy(b, prompt, 24);
    assert.deepEqual(tb.tokens, ta.tokens);
    ta.dists.forEach((d, i) => {
      const other = tb.dists[i];
      assert.ok(other);
      assert.deepEqual(flatten(other), flatten(d));
      assert.equal(d.ids.length, a.vocabSize);
    });
  }
});

test('distributions are real: logprobs normalised, sorted, and logprobOf agrees with the list', async () => {
  const { dists } = await greedy(a, PROMPTS[1] ?? '', 8);
  for (const d of dists) {
    const lps = Array.from(d.logprobs);
    const mass = lps.reduce((s, lp) => s + Math.exp(lp), 0);
    assert.ok(Math.abs(mass - 1) < 1e-4, `mass ${mass}`);
    for (let i = 1; i < lps.length; i++) assert.ok((lps[i] ?? 0) <= (lps[i - 1] ?? 0));
    Array.from(d.ids).forEach((id, i) => assert.equal(d.logprobOf(id), lps[i]));
    assert.equal(d.logprobOf(-1), -Infinity);
  }
});

test('no prefix reuse: a request after a different one equals a request on a fresh engine', async () => {
  const prompt = PROMPTS[2] ?? '';
  await greedy(b, `${prompt} and something else entirely`, 16);
  const after = await greedy(b, prompt, 16);
  const fresh = await createLlamaModel({ seed: 1, threads: 1 });
  try {
    const ref = await greedy(fresh, prompt, 16);
    assert.deepEqual(after.tokens, ref.tokens);
    after.dists.forEach((d, i) => assert.deepEqual(flatten(d), flatten(ref.dists[i] ?? d)));
  } finally {
    await fresh.close();
  }
});

test('echo: prompt distributions predict prompt tokens 1..n-1, before or after decoding, without disturbing it', async () => {
  const prompt = a.tokenize(PROMPTS[1] ?? '');
  const early = await a.start(prompt, { requestSeed: 0 });
  const echo = await early.promptDistributions?.();
  const firstEarly = await early.next();
  await early.push(firstEarly.ids[0] ?? 0);
  const secondEarly = await early.next();
  await early.dispose();
  assert.equal(echo?.length, prompt.length - 1);
  // A real model assigns its own prompt a spread of logprobs, not a constant.
  assert.ok(new Set(echo?.map((d, i) => d.logprobOf(prompt[i + 1] ?? 0))).size > 3);

  const late = await a.start(prompt, { requestSeed: 0 });
  const firstLate = await late.next();
  await late.push(firstLate.ids[0] ?? 0);
  const echoLate = await late.promptDistributions?.();
  const secondLate = await late.next();
  await late.dispose();
  assert.deepEqual(echoLate?.map(flatten), echo?.map(flatten));
  assert.deepEqual(flatten(secondLate), flatten(secondEarly));
});

test('one request at a time: a new start supersedes the previous sequence', async () => {
  const first = await a.start(a.tokenize('one'), { requestSeed: 0 });
  await first.next();
  const second = await a.start(a.tokenize('two'), { requestSeed: 0 });
  await assert.rejects(first.next(), /superseded/);
  await second.next();
  await second.dispose();
  await assert.rejects(second.next(), /after dispose/);
  await assert.rejects(a.start([a.vocabSize], { requestSeed: 0 }), RangeError);
});

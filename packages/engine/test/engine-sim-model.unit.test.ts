/**
 * The simulated model on its own: deterministic, a realistic mix of near-ties and confident
 * steps, varied lengths, text that round-trips through the tokenizer, and fast enough never to
 * be a proxy benchmark's bottleneck.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { EngineModel, NextTokenDistribution } from '../src/model.js';
import { createSimModel } from '../src/sim/model.js';

interface Run {
  ids: number[];
  dists: NextTokenDistribution[];
  eos: boolean;
}

async function greedy(model: EngineModel, prompt: string, steps: number, requestSeed = 0): Promise<Run> {
  const seq = await model.start(model.tokenize(prompt), { requestSeed });
  const run: Run = { ids: [], dists: [], eos: false };
  for (let i = 0; i < steps; i++) {
    const d = await seq.next();
    const id = d.ids[0] as number;
    run.dists.push(d);
    if (id === model.eosToken) {
      run.eos = true;
      break;
    }
    run.ids.push(id);
    await seq.push(id);
  }
  await seq.dispose();
  return run;
}

const PROMPTS = Array.from(
  { length: 20 },
  (_, i) => `Prompt ${i}: what did the ${i % 2 ? 'artificial' : 'Artificial'} intelligence say about layer ${i}?`,
);

test('same seed and prompt give the same tokens and bitwise-equal logprobs; another seed does not', async () => {
  const a = await greedy(createSimModel({ seed: 7 }), PROMPTS[0] as string, 32);
  const b = await greedy(createSimModel({ seed: 7 }), PROMPTS[0] as string, 32);
  assert.deepEqual(b.ids, a.ids);
  a.dists.forEach((d, i) => {
    const e = b.dists[i] as NextTokenDistribution;
    assert.deepEqual(Array.from(e.ids), Array.from(d.ids));
    // Object.is: bitwise equality, not a tolerance.
    Array.from(d.logprobs).forEach((lp, k) =>
      assert.ok(Object.is(lp, e.logprobs[k]), `step ${i} entry ${k}: ${lp} vs ${e.logprobs[k]}`),
    );
  });
  const c = await greedy(createSimModel({ seed: 8 }), PROMPTS[0] as string, 32);
  assert.notDeepEqual(c.ids, a.ids);
  const other = await greedy(createSimModel({ seed: 7 }), PROMPTS[1] as string, 32);
  assert.notDeepEqual(other.ids, a.ids, 'the prompt matters');
});

test('without noise the request seed changes nothing', async () => {
  const model = createSimModel({ seed: 3 });
  const a = await greedy(model, PROMPTS[2] as string, 16, 1);
  const b = await greedy(model, PROMPTS[2] as string, 16, 999);
  assert.deepEqual(b.ids, a.ids);
  a.dists.forEach((d, i) =>
    assert.deepEqual(Array.from((b.dists[i] as NextTokenDistribution).logprobs), Array.from(d.logprobs)),
  );
});

test('top-1/top-2 gaps mix near-ties and confident steps (20 prompts × 32 steps)', async () => {
  const model = createSimModel({ seed: 1 });
  const gaps: number[] = [];
  for (const p of PROMPTS) {
    const run = await greedy(model, p, 32);
    for (const d of run.dists) gaps.push((d.logprobs[0] as number) - (d.logprobs[1] as number));
  }
  gaps.sort((x, y) => x - y);
  const median = gaps[Math.floor(gaps.length / 2)] as number;
  assert.ok(
    gaps.some((g) => g < 0.01),
    `no near-tie below 0.01 nats (smallest ${gaps[0]})`,
  );
  assert.ok(
    gaps.some((g) => g > 3),
    `no confident step above 3 nats (largest ${gaps.at(-1)})`,
  );
  assert.ok(median > 0.3 && median < 3, `median gap ${median}`);
});

test('distributions are normalised, sorted, and logprobOf agrees with the listed prefix', async () => {
  const model = createSimModel({ seed: 2 });
  const run = await greedy(model, 'Hello', 8);
  for (const d of run.dists) {
    assert.equal(d.ids.length, 20);
    for (let k = 1; k < d.ids.length; k++) assert.ok((d.logprobs[k] as number) <= (d.logprobs[k - 1] as number));
    assert.equal(d.logprobOf(d.ids[3] as number), d.logprobs[3]);
    let mass = 0;
    for (let id = 0; id < model.vocabSize; id++) mass += Math.exp(d.logprobOf(id));
    assert.ok(Math.abs(mass - 1) < 1e-9, `mass ${mass}`);
    assert.equal(d.logprobOf(model.vocabSize), -Infinity);
  }
});

test('some prompts end by end-of-sequence after ~20-60 tokens, others run to max_tokens', async () => {
  const model = createSimModel({ seed: 1 });
  const lengths: number[] = [];
  let ended = 0;
  for (const p of PROMPTS) {
    const run = await greedy(model, p, 120);
    lengths.push(run.ids.length);
    if (run.eos) ended++;
  }
  assert.ok(ended >= 4 && ended <= 18, `${ended} of 20 ended: ${lengths.join(' ')}`);
  const endedLengths = lengths.filter((n) => n < 120);
  assert.ok(
    endedLengths.every((n) => n >= 5),
    `an end after fewer than 5 tokens: ${endedLengths.join(' ')}`,
  );
  assert.ok(new Set(endedLengths).size > 2, `lengths vary: ${endedLengths.join(' ')}`);
});

test('text round-trips through the tokenizer, multi-byte characters included', () => {
  const model = createSimModel();
  for (const text of ['The artificial intelligence', ' Artificial  layers\n\nof noise', 'naïve café — 東京 🎉', '']) {
    const ids = model.tokenize(text);
    assert.equal(model.detokenize(ids), text);
    assert.equal(
      ids.map((id) => Buffer.from(model.tokenBytes(id)).toString('latin1')).join(''),
      Buffer.from(text).toString('latin1'),
    );
  }
  const ids = model.tokenize(' artificial Artificial');
  assert.deepEqual(
    ids.map((id) => model.tokenText(id)),
    [' artificial', ' Artificial'],
  );
  assert.ok(model.vocabSize > 300 && model.vocabSize < 1000, `vocabulary of ${model.vocabSize}`);
});

test('generates 60k top-5 steps, every one a distribution over its vocabulary (the rate is printed, not asserted: speed is measured in bench/)', async (t) => {
  const model = createSimModel({ seed: 5 });
  let tokens = 0;
  const t0 = performance.now();
  for (let p = 0; tokens < 60_000; p++) {
    const seq = await model.start(model.tokenize(`speed ${p}`), { requestSeed: p });
    for (let i = 0; i < 128; i++) {
      const d = await seq.next();
      const id = d.ids[0] as number;
      for (let k = 0; k < 5; k++) void d.logprobs[k];
      const own = d.logprobOf(id);
      if (!(own <= 0 && Number.isFinite(own))) assert.fail(`step ${tokens}: logprob ${own} of the chosen token`);
      tokens++;
      if (id === model.eosToken) break;
      await seq.push(id);
    }
  }
  const perSecond = tokens / ((performance.now() - t0) / 1000);
  t.diagnostic(`sim model: ${Math.round(perSecond)} tokens/s`);
  assert.ok(tokens >= 60_000);
});

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createLlamaModel, type LlamaEngineModel } from '../src/llama/model.js';
import { flatten, forced, greedy, PROMPTS, shiftOf, type Shift, type Trace } from './helpers/llama.js';

// The baseline is greedy on a clean engine; each faulty engine is forced along the same tokens,
// so every position is comparable (4 prompts × 48 steps, as in the table). Thresholds
// are classes, not stored numbers: llama.cpp picks a CPU-specific kernel build at run time.
const STEPS = 48;
let clean: LlamaEngineModel;
const baseline: Trace[] = [];

before(async () => {
  clean = await createLlamaModel({ seed: 1, threads: 1 });
  for (const p of PROMPTS) baseline.push(await greedy(clean, p, STEPS));
});
after(async () => {
  await clean.close();
});

async function shiftFor(fault: string | null): Promise<Shift & { engine: LlamaEngineModel['context'] }> {
  const model = await createLlamaModel({ seed: 1, threads: 1, fault });
  try {
    const acc: Shift = { chosen: 0, top5: 0, flips: 0, positions: 0 };
    for (const [i, p] of PROMPTS.entries()) {
      const base = baseline[i];
      assert.ok(base);
      shiftOf(base, await forced(model, p, base.tokens), acc);
    }
    assert.equal(acc.positions, PROMPTS.length * STEPS);
    return { ...acc, engine: model.context };
  } finally {
    await model.close();
  }
}

test('a clean rerun is bitwise identical', async () => {
  // (2 threads are also bitwise identical — see bench/llama-faults.ts — but ~20× slower here.)
  const s = await shiftFor(null);
  assert.deepEqual([s.chosen, s.top5, s.flips], [0, 0, 0]);
});

test('noise-class faults move logprobs, but by less than 0.05 nats on the chosen token', async () => {
  const cases: Array<[string, Partial<LlamaEngineModel['context']>]> = [
    ['batch:8', { batchSize: 8 }],
    ['flash-attention', { flashAttention: true }],
    ['weights:f16', {}],
  ];
  for (const [fault, context] of cases) {
    const s = await shiftFor(fault);
    for (const [key, value] of Object.entries(context))
      assert.equal(s.engine[key as keyof typeof s.engine], value, `${fault}: ${key}`);
    // Only the 128-token prompt splits at batch 8; the shift is tiny but must exist.
    assert.ok(s.top5 > 0, `${fault} changes something`);
    assert.ok(s.chosen < 0.05, `${fault}: chosen ${s.chosen}`);
    assert.ok(s.top5 < 0.1, `${fault}: top-5 ${s.top5}`);
    assert.ok(s.flips <= 3, `${fault}: ${s.flips} flips`);
  }
});

test('subtle faults (q8_0 K cache, 1% FFN weight noise) sit between noise and gross bugs', async () => {
  for (const fault of ['kv:q8_0', 'weight-noise:0.01']) {
    const s = await shiftFor(fault);
    assert.ok(s.chosen > 0.01 && s.chosen < 0.5, `${fault}: chosen ${s.chosen}`);
  }
});

test('bug-class faults move logprobs by more than 0.5 nats and flip many tokens', async () => {
  for (const fault of ['zero-layer:1', 'drop-prompt-token:3', 'kv:q4_0']) {
    const s = await shiftFor(fault);
    assert.ok(s.chosen > 0.5, `${fault}: chosen ${s.chosen}`);
    assert.ok(s.flips >= 10, `${fault}: ${s.flips} flips`);
  }
});

test('drop-prompt-token: a shorter prompt is untouched; losing the last prompt token shows from step 2', async () => {
  const model = await createLlamaModel({ seed: 1, threads: 1, fault: 'drop-prompt-token:3' });
  try {
    const short = 'Hi'; // two tokens: nothing at index 3
    const ref = await greedy(clean, short, 8);
    const got = await forced(model, short, ref.tokens);
    got.forEach((d, i) => assert.deepEqual(flatten(d), flatten(ref.dists[i] ?? d)));

    const four = 'abcd'; // four byte tokens: index 3 is the last, already evaluated for step 1
    assert.equal(clean.tokenize(four).length, 4);
    const ref4 = await greedy(clean, four, 8);
    const got4 = await forced(model, four, ref4.tokens);
    assert.deepEqual(flatten(got4[0] ?? ref4.dists[0]!), flatten(ref4.dists[0]!));
    assert.ok(shiftOf({ tokens: ref4.tokens.slice(1), dists: ref4.dists.slice(1) }, got4.slice(1)).top5 > 0.01);
  } finally {
    await model.close();
  }
});

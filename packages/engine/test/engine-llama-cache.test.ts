/**
 * The llama engine's one-slot prefix cache and the two state faults, on real llama.cpp numerics:
 * a warm request reuses all but the last prompt token (llama-server's rule) and moves logprobs
 * only by kernel noise; `decode-state:I` leaves the prompt's logits clean and moves every later
 * evaluation on that state; `cache-hit:I` is clean cold and wrong warm.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createLlamaModel, type LlamaEngineModel } from '../src/llama/model.js';
import { bits, CACHE, moved, request } from './helpers/cache.js';

let clean: LlamaEngineModel;
let prompt: number[];
before(async () => {
  clean = await createLlamaModel({ seed: 1, threads: 1 });
  prompt = [clean.bosToken as number, ...clean.tokenize('The cache holds key 3 and value')];
});
after(() => clean.close());

test('the prefix cache: a repeat reuses all but the last token; kernel noise only; cache_prompt false and flush empty the slot', async () => {
  const model = await createLlamaModel({ seed: 1, threads: 1 });
  try {
    const ref = await request(clean, prompt, 12, { addBos: false });
    const cold = await request(model, prompt, 12, { addBos: false, cache: CACHE }, ref.tokens);
    assert.deepEqual(cold.state, { cells: prompt.length, reused: 0, held: prompt.length + 11 });
    cold.dists.forEach((d, i) => assert.deepEqual(bits(d), bits(ref.dists[i]!), `cold step ${i}`));
    const warm = await request(model, prompt, 12, { addBos: false, cache: CACHE }, ref.tokens);
    assert.equal(warm.state?.reused, prompt.length - 1, 'the last prompt token is always evaluated');
    // The last prompt token evaluated alone instead of in the prompt's batch: ~1e-6, as the
    // b4748 fixtures show for llama-server's own cache (Δ≈6e-7).
    const shift = Math.max(...warm.dists.map((d, i) => moved(ref.dists[i]!, d)));
    assert.ok(shift < 1e-3, `warm vs cold ${shift}`);
    const off = await request(model, prompt, 2, { addBos: false, cache: { read: false, write: false } });
    assert.equal(off.state?.reused, 0);
    assert.equal(
      (await request(model, prompt, 2, { addBos: false, cache: CACHE })).state?.reused,
      0,
      'cache_prompt false left nothing',
    );
    assert.equal(await model.flushCache(), prompt.length + 1);
    assert.equal((await request(model, prompt, 1, { addBos: false, cache: CACHE })).state?.reused, 0, 'flushed');
    const longer = await request(model, [...prompt, ...ref.tokens.slice(0, 3)], 1, { addBos: false, cache: CACHE });
    assert.equal(longer.state?.reused, prompt.length, 'a longer prompt reuses the cached prompt');
  } finally {
    await model.close();
  }
});

test('decode-state:3: prompt logits and the first step clean bit for bit, every later step and a warm prefill moved', async () => {
  const model = await createLlamaModel({ seed: 1, threads: 1, fault: 'decode-state:3' });
  try {
    const ref = await request(clean, prompt, 16, { addBos: false, promptLogprobsFrom: 1 });
    const got = await request(model, prompt, 16, { addBos: false, promptLogprobsFrom: 1 }, ref.tokens);
    got.echo.forEach((d, i) => assert.deepEqual(bits(d), bits(ref.echo[i]!), `prompt position ${i}`));
    assert.deepEqual(bits(got.dists[0]!), bits(ref.dists[0]!), 'the first generated token');
    const later = got.dists.slice(1).map((d, i) => moved(ref.dists[i + 1]!, d));
    assert.ok(Math.min(...later) > 0.05, `later steps ${later.map((x) => x.toFixed(3))}`);
    // A warm request runs its prefill on the state that lost the cell.
    await request(model, prompt, 4, { addBos: false, cache: CACHE });
    const warm = await request(model, prompt, 1, { addBos: false, cache: CACHE });
    const fresh = await request(clean, prompt, 1, { addBos: false });
    assert.ok(moved(fresh.dists[0]!, warm.dists[0]!) > 0.1, 'warm first step');
  } finally {
    await model.close();
  }
});

test('cache-hit:3: the same request twice — cold equals a clean engine bit for bit, warm moves; without the cache both are clean', async () => {
  const model = await createLlamaModel({ seed: 1, threads: 1, fault: 'cache-hit:3' });
  try {
    const ref = await request(clean, prompt, 12, { addBos: false });
    const cold = await request(model, prompt, 12, { addBos: false, cache: CACHE }, ref.tokens);
    cold.dists.forEach((d, i) => assert.deepEqual(bits(d), bits(ref.dists[i]!), `cold step ${i}`));
    const warm = await request(model, prompt, 12, { addBos: false, cache: CACHE }, ref.tokens);
    const shifts = warm.dists.map((d, i) => moved(ref.dists[i]!, d));
    assert.ok(Math.min(...shifts) > 0.05, `warm ${shifts.map((x) => x.toFixed(3))}`);
    for (let r = 0; r < 2; r++) {
      const off = await request(model, prompt, 12, { addBos: false }, ref.tokens);
      off.dists.forEach((d, i) => assert.deepEqual(bits(d), bits(ref.dists[i]!), `no cache, run ${r} step ${i}`));
    }
  } finally {
    await model.close();
  }
});

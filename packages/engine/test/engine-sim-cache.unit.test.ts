/**
 * The simulated engine's prefix-cache bookkeeping and its stand-ins for the two state faults:
 * `decodeShift` (the state carried into decode) and `cacheHitShift` (what a cache hit restores).
 * The model is stateless math, so a warm request is exact unless a fault applies.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createSimModel } from '../src/sim/model.js';
import { bits, CACHE, moved, request } from './helpers/cache.js';

const clean = createSimModel({ seed: 3 });
const prompt = clean.tokenize('The cache holds the key and the value of the model');

test('reuse: all but the last token of a repeat, whole blocks, a limit, nothing after write:false, flush', async () => {
  const model = createSimModel({ seed: 3 });
  const first = await request(model, prompt, 8, { cache: CACHE });
  assert.deepEqual(first.state, { cells: prompt.length, reused: 0, held: prompt.length + 7 });
  const warm = await request(model, prompt, 8, { cache: CACHE }, first.tokens);
  assert.equal(warm.state?.reused, prompt.length - 1);
  warm.dists.forEach((d, i) => assert.deepEqual(bits(d), bits(first.dists[i]!), 'exact: the model is stateless'));
  const cont = [...prompt, ...first.tokens.slice(0, 5)];
  assert.equal((await request(model, cont, 1, { cache: CACHE })).state?.reused, prompt.length + 4);
  assert.equal(
    (await request(model, cont, 1, { cache: { ...CACHE, block: 4 } })).state?.reused,
    cont.length - 1 - ((cont.length - 1) % 4),
  );
  assert.equal((await request(model, cont, 1, { cache: { ...CACHE, limit: 3 } })).state?.reused, 3);
  assert.equal(
    (await request(model, cont, 1, { cache: CACHE, promptLogprobsFrom: 5 })).state?.reused,
    4,
    'prompt logprobs from 5: reuse before 4',
  );
  await request(model, cont, 1, { cache: { read: true, write: false } });
  assert.equal((await request(model, cont, 1, { cache: CACHE })).state?.reused, 0, 'write:false emptied the slot');
  assert.equal(model.flushCache?.(), cont.length);
  assert.equal((await request(model, cont, 1, { cache: CACHE })).state?.reused, 0);
});

test('decodeShift: prompt distributions and the first step clean, later steps and a warm prefill moved', async () => {
  const model = createSimModel({ seed: 3, decodeShift: 0.6 });
  const ref = await request(clean, prompt, 12, { promptLogprobsFrom: 1 });
  const got = await request(model, prompt, 12, { promptLogprobsFrom: 1 }, ref.tokens);
  got.echo.forEach((d, i) => assert.deepEqual(bits(d), bits(ref.echo[i]!), `prompt position ${i}`));
  assert.deepEqual(bits(got.dists[0]!), bits(ref.dists[0]!));
  assert.ok(got.dists.slice(1).every((d, i) => moved(ref.dists[i + 1]!, d) > 0.05));
  await request(model, prompt, 4, { cache: CACHE });
  const warm = await request(model, prompt, 1, { cache: CACHE });
  assert.ok(moved(ref.dists[0]!, warm.dists[0]!) > 0.05, 'a warm prefill runs on the corrupted state');
  const cold = await request(model, prompt, 1, { cache: { read: false, write: true } });
  assert.deepEqual(bits(cold.dists[0]!), bits(ref.dists[0]!), 'a cold prefill is clean');
});

test('cacheHitShift: cold equals a clean engine, warm moves everywhere; prompt logprobs that skip the cache are clean', async () => {
  const model = createSimModel({ seed: 3, cacheHitShift: 0.6 });
  const ref = await request(clean, prompt, 10, { promptLogprobsFrom: 1 });
  const cold = await request(model, prompt, 10, { cache: CACHE }, ref.tokens);
  cold.dists.forEach((d, i) => assert.deepEqual(bits(d), bits(ref.dists[i]!)));
  const warm = await request(model, prompt, 10, { cache: CACHE }, ref.tokens);
  assert.ok(warm.dists.every((d, i) => moved(ref.dists[i]!, d) > 0.05));
  const skip = await request(model, prompt, 1, { cache: { read: false, write: true }, promptLogprobsFrom: 1 });
  skip.echo.forEach((d, i) => assert.deepEqual(bits(d), bits(ref.echo[i]!)));
  for (let r = 0; r < 2; r++) {
    const off = await request(model, prompt, 10, {}, ref.tokens);
    off.dists.forEach((d, i) => assert.deepEqual(bits(d), bits(ref.dists[i]!), 'no cache: clean'));
  }
});

test('cacheSlots: several prefixes kept, the least recently used evicted; flush empties them all', async () => {
  const model = createSimModel({ seed: 3, cacheSlots: 2 });
  const [a, b, c] = [
    'Alpha is the first prompt here',
    'Beta is the second prompt here',
    'Gamma is the third prompt here',
  ].map((t) => model.tokenize(t));
  await request(model, a!, 2, { cache: CACHE });
  await request(model, b!, 2, { cache: CACHE });
  assert.equal(
    (await request(model, a!, 2, { cache: CACHE })).state?.reused,
    a!.length - 1,
    'a is still kept beside b',
  );
  await request(model, c!, 2, { cache: CACHE }); // evicts b, the least recently used
  assert.equal((await request(model, b!, 1, { cache: CACHE })).state?.reused, 0, 'b was evicted');
  assert.ok(((await model.flushCache?.()) ?? 0) > 0);
  assert.equal((await request(model, a!, 1, { cache: CACHE })).state?.reused, 0, 'flush emptied every slot');
  assert.throws(() => createSimModel({ cacheSlots: 0 }), /cacheSlots must be an integer ≥ 1/);
});

/**
 * Several models on one simulated engine — a base model and LoRA adapters picked by the request's
 * `model` (SGLang `/generate`: `lora_path`) — and the faults modelled on reported upstream bugs,
 * each confined to one adapter and each caught the way logprobe's path check would: the decode
 * logprobs of a generation against the same tokens scored in one prefill pass.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { EngineServerOptions } from '../src/openai-server.js';
import { createSimModel, type SimAdapterOptions } from '../src/sim/model.js';
import { get, post, startSim } from './helpers/engine-sim.js';

const SEED = 11;
const sim = createSimModel({ seed: SEED });
const P = sim.tokenize('The adapter of the model and the cache of the state');
const N = 12;

/** Base 'm' with adapters a1..a8; `fault` merged into a3's options. */
function adapters(fault: Partial<SimAdapterOptions> = {}): SimAdapterOptions[] {
  return Array.from({ length: 8 }, (_, i) => ({ id: `a${i + 1}`, ...(i === 2 ? fault : {}) }));
}

async function engine(
  t: TestContext,
  fault: Partial<SimAdapterOptions> = {},
  server: Omit<EngineServerOptions, 'model'> = {},
) {
  return startSim(t, { seed: SEED, id: 'm', adapters: adapters(fault) }, { api: 'vllm', ...server });
}

/** vLLM's path check: generate greedily, then score prompt + generated in one prefill pass. */
async function pathCheck(url: string, model: string): Promise<{ ids: number[]; decode: number[]; prefill: number[] }> {
  const gen = await post(url, '/v1/completions', {
    model,
    prompt: P,
    max_tokens: N,
    temperature: 0,
    logprobs: 1,
    return_token_ids: true,
  });
  assert.equal(gen.status, 200, gen.text);
  assert.equal(gen.json.model, model);
  const ids = gen.json.choices[0].token_ids as number[];
  const decode = gen.json.choices[0].logprobs.token_logprobs as number[];
  const scored = await post(url, '/v1/completions', {
    model,
    prompt: [...P, ...ids],
    max_tokens: 1,
    temperature: 0,
    prompt_logprobs: 1,
  });
  assert.equal(scored.status, 200, scored.text);
  const pl = scored.json.choices[0].prompt_logprobs as Array<Record<string, { logprob: number }>>;
  const prefill = ids.map((id, j) => pl[P.length + j]![String(id)]!.logprob);
  return { ids, decode, prefill };
}

const gaps = (r: { decode: number[]; prefill: number[] }): number[] =>
  r.decode.map((d, j) => Math.abs(d - (r.prefill[j] as number)));

test('/v1/models lists the base and each adapter with root = its path and parent = the base (vLLM and SGLang)', async (t) => {
  const vllm = await engine(t);
  const v = (await get(vllm.url, '/v1/models')).json;
  assert.deepEqual(
    v.data.map((d: { id: string }) => d.id),
    ['m', 'a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7', 'a8'],
  );
  assert.equal(v.data[0].parent, null);
  assert.equal(v.data[3].root, '/adapters/a3');
  assert.equal(v.data[3].parent, 'm');
  assert.equal(v.data[3].max_model_len, null);
  assert.equal(v.data[3].owned_by, 'vllm');
  const sglang = await startSim(t, { seed: SEED, id: 'm', adapters: adapters() }, { api: 'sglang' });
  const s = (await get(sglang.url, '/v1/models')).json;
  assert.deepEqual(s.data[1], { ...s.data[1], id: 'a1', root: '/adapters/a1', parent: 'm', max_model_len: null });
});

test('vLLM: an unknown model is its 404 NotFoundError; no model is the base', async (t) => {
  const e = await engine(t);
  const res = await post(e.url, '/v1/completions', { model: 'nope', prompt: 'x', max_tokens: 1 });
  assert.equal(res.status, 404);
  assert.deepEqual(res.json, {
    error: { message: 'The model `nope` does not exist.', type: 'NotFoundError', param: null, code: 404 },
  });
  const chat = await post(e.url, '/v1/chat/completions', { model: 'a9', messages: [{ role: 'user', content: 'x' }] });
  assert.equal(chat.status, 404);
  const none = await post(e.url, '/v1/completions', { prompt: P, max_tokens: 4, temperature: 0 });
  const base = await post(e.url, '/v1/completions', { model: 'm', prompt: P, max_tokens: 4, temperature: 0 });
  assert.equal(none.json.choices[0].text, base.json.choices[0].text);
  // Without adapters the double stays lenient unless told otherwise.
  const plain = await startSim(t, { seed: SEED }, { api: 'vllm' });
  assert.equal((await post(plain.url, '/v1/completions', { model: 'nope', prompt: 'x', max_tokens: 1 })).status, 200);
  const strict = await startSim(t, { seed: SEED }, { api: 'vllm', strictModel: true });
  assert.equal((await post(strict.url, '/v1/completions', { model: 'nope', prompt: 'x', max_tokens: 1 })).status, 404);
});

test('adapters differ from the base and from each other; each is deterministic; without faults the path check agrees', async (t) => {
  const e = await engine(t);
  const runs = new Map<string, { ids: number[]; decode: number[]; prefill: number[] }>();
  for (const m of ['m', 'a1', 'a2']) runs.set(m, await pathCheck(e.url, m));
  const [m, a1, a2] = ['m', 'a1', 'a2'].map((k) => runs.get(k)!);
  assert.notDeepEqual(a1!.ids, m!.ids, 'a1 writes other text than the base');
  assert.notDeepEqual(a2!.ids, a1!.ids, 'a2 writes other text than a1');
  for (const r of runs.values()) assert.ok(Math.max(...gaps(r)) < 1e-9, 'decode and prefill agree without faults');
  assert.deepEqual(await pathCheck(e.url, 'a1'), a1, 'the same adapter, the same numbers');
  // The base model is the plain sim model with the same seed.
  const plain = await startSim(t, { seed: SEED }, { api: 'vllm' });
  assert.deepEqual((await pathCheck(plain.url, 'logprobe-sim')).ids, m!.ids);
});

test("promptWithoutAdapter (vllm#51594): prompt logprobs use the base head, decode the adapter's — only on that adapter", async (t) => {
  const e = await engine(t, { promptWithoutAdapter: true });
  const bad = gaps(await pathCheck(e.url, 'a3'));
  assert.ok(bad.filter((g) => g > 0.1).length >= N * 0.75, `most positions far apart: ${bad.map((g) => g.toFixed(3))}`);
  for (const m of ['m', 'a2', 'a4']) assert.ok(Math.max(...gaps(await pathCheck(e.url, m))) < 1e-9, `${m} clean`);
  // SGLang's path check (/generate with input_ids, logprob_start_len 0) sees it too.
  const sg = await startSim(
    t,
    { seed: SEED, id: 'm', adapters: adapters({ promptWithoutAdapter: true }) },
    { api: 'sglang' },
  );
  const gen = await post(sg.url, '/generate', {
    input_ids: P,
    sampling_params: { max_new_tokens: N, temperature: 0 },
    return_logprob: true,
    lora_path: 'a3',
  });
  assert.equal(gen.status, 200, gen.text);
  const out = gen.json.meta_info.output_token_logprobs as Array<[number, number, null]>;
  const ids = gen.json.output_ids as number[];
  const scored = await post(sg.url, '/generate', {
    input_ids: [...P, ...ids],
    sampling_params: { max_new_tokens: 1, temperature: 0 },
    return_logprob: true,
    logprob_start_len: 0,
    top_logprobs_num: 1,
    lora_path: 'a3',
  });
  const input = scored.json.meta_info.input_token_logprobs as Array<[number | null, number, null]>;
  const sgGaps = ids.map((id, j) => {
    assert.equal(input[P.length + j]![1], id);
    return Math.abs((input[P.length + j]![0] as number) - out[j]![0]);
  });
  assert.ok(sgGaps.filter((g) => g > 0.1).length >= N * 0.75, `SGLang: ${sgGaps.map((g) => g.toFixed(3))}`);
  const unknown = await post(sg.url, '/generate', {
    input_ids: P,
    lora_path: 'zz',
    sampling_params: { max_new_tokens: 1 },
  });
  assert.equal(unknown.status, 400);
});

test('specDecodeShift (vllm PR #38711): decode logprobs move, greedy tokens and prompt logprobs stay exact', async (t) => {
  const e = await engine(t, { specDecodeShift: 1 });
  const clean = await pathCheck(e.url, 'a1');
  const faulty = await pathCheck(e.url, 'a3');
  const ref = await startSim(t, { seed: SEED, id: 'm', adapters: adapters() }, { api: 'vllm' });
  const exact = await pathCheck(ref.url, 'a3');
  assert.deepEqual(faulty.ids, exact.ids, 'the greedy tokens are the exact ones');
  assert.deepEqual(faulty.prefill, exact.prefill, 'prompt logprobs are exact');
  assert.equal(faulty.decode[0], exact.decode[0], 'the first token comes from the prefill: exact');
  const g = gaps(faulty).slice(1);
  assert.ok(g.filter((x) => x > 0.05).length >= (N - 1) / 2, `decode steps moved: ${g.map((x) => x.toFixed(3))}`);
  assert.ok(Math.max(...gaps(clean)) < 1e-9, 'a1 clean');
});

test('zeroDecodeLogprobs (llama.cpp#27972): every decode logprob and top entry 0.0 after the first, tokens right', async (t) => {
  const e = await engine(t, { zeroDecodeLogprobs: true });
  const ref = await startSim(t, { seed: SEED, id: 'm', adapters: adapters() }, { api: 'vllm' });
  const exact = await pathCheck(ref.url, 'a3');
  const gen = await post(e.url, '/v1/completions', {
    model: 'a3',
    prompt: P,
    max_tokens: N,
    temperature: 0,
    logprobs: 3,
    return_token_ids: true,
  });
  assert.deepEqual(gen.json.choices[0].token_ids, exact.ids);
  const lp = gen.json.choices[0].logprobs as { token_logprobs: number[]; top_logprobs: Array<Record<string, number>> };
  assert.equal(lp.token_logprobs[0], exact.decode[0], 'the first token (the prefill) is exact');
  assert.ok((lp.token_logprobs[0] as number) < 0);
  for (let j = 1; j < N; j++) {
    assert.equal(lp.token_logprobs[j], 0);
    for (const v of Object.values(lp.top_logprobs[j]!)) assert.equal(v, 0);
  }
  assert.ok(Math.max(...gaps(await pathCheck(e.url, 'a3')).slice(1)) > 0.1, 'the path check sees it');
  assert.ok(Math.max(...gaps(await pathCheck(e.url, 'a1'))) < 1e-9, 'a1 clean');
});

test('staleBuffer (vllm#42019): the same prompt-logprobs request differs after another request; decode exact', async (t) => {
  const e = await engine(t, { staleBuffer: 0.5 }, { prefixCache: false });
  const score = async (model: string): Promise<number[]> => {
    const r = await post(e.url, '/v1/completions', {
      model,
      prompt: P,
      max_tokens: 1,
      temperature: 0,
      prompt_logprobs: 1,
    });
    const pl = r.json.choices[0].prompt_logprobs as Array<Record<string, { logprob: number }> | null>;
    return P.slice(1).map((id, i) => pl[i + 1]![String(id)]!.logprob);
  };
  const other = async (prompt: string): Promise<void> => {
    await post(e.url, '/v1/completions', { model: 'm', prompt, max_tokens: 2, temperature: 0 });
  };
  await other('first other request');
  const x1 = await score('a3');
  await other('a different request in between');
  const x2 = await score('a3');
  await other('first other request');
  const x3 = await score('a3');
  assert.notDeepEqual(x1, x2, 'what came before changes the prompt logprobs');
  assert.deepEqual(x1, x3, 'the same predecessor, the same residue');
  const moved = x1.map((v, i) => Math.abs(v - (x2[i] as number)));
  assert.ok(moved.filter((d) => d > 0.05).length >= moved.length / 2, `moved: ${moved.map((d) => d.toFixed(3))}`);
  // Unaffected: the decode logprobs of a3, and the prompt logprobs of a clean adapter.
  const ref = await startSim(t, { seed: SEED, id: 'm', adapters: adapters() }, { api: 'vllm', prefixCache: false });
  const gen = async (url: string) =>
    (await post(url, '/v1/completions', { model: 'a3', prompt: P, max_tokens: N, temperature: 0, logprobs: 1 })).json
      .choices[0].logprobs.token_logprobs;
  assert.deepEqual(await gen(e.url), await gen(ref.url));
  await other('first other request');
  const c1 = await score('a1');
  await other('a different request in between');
  assert.deepEqual(await score('a1'), c1, 'a1 clean');
});

test('bad adapter options are RangeErrors naming the option', () => {
  assert.throws(() => createSimModel({ adapters: [{ id: '' }] }), /adapters\[0\]\.id/);
  assert.throws(() => createSimModel({ id: 'm', adapters: [{ id: 'm' }] }), /adapters\[0\]\.id 'm' is already served/);
  assert.throws(() => createSimModel({ adapters: [{ id: 'a' }, { id: 'a' }] }), /adapters\[1\]\.id/);
  assert.throws(
    () => createSimModel({ adapters: [{ id: 'a', specDecodeShift: -1 }] }),
    /adapters\[0\]\.specDecodeShift/,
  );
  assert.throws(() => createSimModel({ adapters: [{ id: 'a', scale: Number.NaN }] }), /adapters\[0\]\.scale/);
  assert.throws(() => createSimModel({ staleBuffer: -0.5 }), /sim option staleBuffer/);
  assert.throws(
    () => createSimModel({ zeroDecodeLogprobs: 1 as unknown as boolean }),
    /sim option zeroDecodeLogprobs must be true or false/,
  );
});

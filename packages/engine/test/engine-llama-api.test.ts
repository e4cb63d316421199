/**
 * The engine profiles on real llama.cpp numerics, over HTTP: a teacher-forced scoring through
 * llama-server-style incremental /completion calls moves at every position under decode-state
 * while cold calls are clean; prompt logprobs (vLLM prompt_logprobs, SGLang input logprobs) stay
 * clean under decode-state; cache-hit is clean cold and wrong warm. Measured shifts are printed.
 */
import assert from 'node:assert/strict';
import { after, before, test, type TestContext } from 'node:test';
import { createLlamaModel, type LlamaEngineModel } from '../src/llama/model.js';
import { startEngineServer, type EngineServerOptions } from '../src/openai-server.js';
import { readFileSync } from 'node:fs';
import { get, post, typedShape } from './helpers/engine-sim.js';

interface Probs {
  id: number;
  logprob: number;
  top_logprobs: Array<{ id: number; logprob: number }>;
}

let clean: LlamaEngineModel;
let decodeState: LlamaEngineModel;
let cacheHit: LlamaEngineModel;
let P: number[];
before(async () => {
  [clean, decodeState, cacheHit] = await Promise.all([
    createLlamaModel({ seed: 1, threads: 1 }),
    createLlamaModel({ seed: 1, threads: 1, fault: 'decode-state:3' }),
    createLlamaModel({ seed: 1, threads: 1, fault: 'cache-hit:3' }),
  ]);
  P = [clean.bosToken, ...clean.tokenize('The cache holds key 3 and value')];
});
after(async () => {
  await Promise.all([clean.close(), decodeState.close(), cacheHit.close()]);
});

async function serve(
  t: TestContext,
  model: LlamaEngineModel,
  options: Omit<EngineServerOptions, 'model'>,
): Promise<string> {
  const h = await startEngineServer({ model, maxContext: model.context.contextSize, ...options });
  t.after(() => h.close());
  await model.flushCache();
  return h.url;
}

/** Largest |Δ| over the clean side's top 5 that the other side also lists (of its list). */
function shift(a: Probs, b: Probs): number {
  const byId = new Map(b.top_logprobs.map((e) => [e.id, e.logprob]));
  const common = a.top_logprobs.slice(0, 5).filter((e) => byId.has(e.id));
  assert.ok(common.length > 0, 'no common token in the top lists');
  return Math.max(...common.map((e) => Math.abs(e.logprob - (byId.get(e.id) as number))));
}

async function complete(
  url: string,
  prompt: number[],
  extra: Record<string, unknown>,
): Promise<{ probs: Probs[]; json: any }> {
  // n_probs beyond the vocabulary: every token listed, so any two calls compare on the same ids.
  const res = await post(url, '/completion', { prompt, n_probs: 1000, temperature: 0, ...extra });
  assert.equal(res.status, 200, res.text);
  return { probs: res.json.completion_probabilities, json: res.json };
}

test('decode-state:3 through llama-server calls: the mirrored request clean at step 1 then moved; warm scoring moved at every position, cold scoring clean', async (t) => {
  const a = await serve(t, clean, { api: 'llamacpp' });
  const b = await serve(t, decodeState, { api: 'llamacpp' });
  const ref = await complete(a, P, { n_predict: 8 });
  const got = await complete(b, P, { n_predict: 8 });
  assert.deepEqual(got.probs[0], ref.probs[0], 'the prefill and the first generated token are clean');
  const decode = got.probs.slice(1).map((p, i) => shift(ref.probs[i + 1]!, p));
  assert.ok(Math.min(...decode) > 0.05, `decode steps ${decode.map((x) => x.toFixed(3))}`);
  const C = ref.probs.map((p) => p.id);
  const warm: number[] = [];
  const cold: number[] = [];
  for (let j = 0; j < C.length; j++) {
    const prompt = [...P, ...C.slice(0, j)];
    const r = (await complete(a, prompt, { n_predict: 1, cache_prompt: true })).probs[0]!;
    warm.push(shift(r, (await complete(b, prompt, { n_predict: 1, cache_prompt: true })).probs[0]!));
  }
  for (let j = 0; j < C.length; j++) {
    const prompt = [...P, ...C.slice(0, j)];
    const r = (await complete(a, prompt, { n_predict: 1, cache_prompt: false })).probs[0]!;
    const c = (await complete(b, prompt, { n_predict: 1, cache_prompt: false })).probs[0]!;
    assert.deepEqual(c, r, `cold position ${j}`);
    cold.push(shift(r, c));
  }
  t.diagnostic(
    `decode-state:3 teacher-forced, warm (cache_prompt true): ${warm.map((x) => x.toFixed(3)).join(' ')}; cold: max ${Math.max(...cold)}`,
  );
  assert.ok(Math.min(...warm) > 0.05, `warm ${warm}`);
});

test('decode-state:3: prompt logprobs clean bit for bit — vLLM prompt_logprobs and SGLang input logprobs', async (t) => {
  const body = { prompt: P, max_tokens: 1, temperature: 0, prompt_logprobs: 5 };
  const va = await post(await serve(t, clean, { api: 'vllm' }), '/v1/completions', body);
  const vb = await post(await serve(t, decodeState, { api: 'vllm' }), '/v1/completions', body);
  assert.deepEqual(vb.json.choices[0].prompt_logprobs, va.json.choices[0].prompt_logprobs);
  const gen = {
    input_ids: P,
    sampling_params: { max_new_tokens: 4, temperature: 0 },
    return_logprob: true,
    logprob_start_len: 0,
    top_logprobs_num: 5,
  };
  const sa = await post(await serve(t, clean, { api: 'sglang' }), '/generate', gen);
  const sb = await post(await serve(t, decodeState, { api: 'sglang' }), '/generate', gen);
  assert.deepEqual(sb.json.meta_info.input_token_logprobs, sa.json.meta_info.input_token_logprobs);
  assert.deepEqual(sb.json.meta_info.input_top_logprobs, sa.json.meta_info.input_top_logprobs);
  assert.deepEqual(
    sb.json.meta_info.output_token_logprobs[0],
    sa.json.meta_info.output_token_logprobs[0],
    'first output token clean',
  );
  assert.notDeepEqual(
    sb.json.meta_info.output_top_logprobs[2],
    sa.json.meta_info.output_top_logprobs[2],
    'later output moved',
  );
});

test('cache-hit:3: the same request twice — cold equals a clean engine, warm moves; --prefix-cache off keeps both clean', async (t) => {
  const a = await serve(t, clean, { api: 'llamacpp', prefixCache: false });
  const ref = await complete(a, P, { n_predict: 6 });
  const b = await serve(t, cacheHit, { api: 'llamacpp' });
  const first = await complete(b, P, { n_predict: 6 });
  const second = await complete(b, P, { n_predict: 6 });
  assert.deepEqual(first.probs, ref.probs, 'cold');
  assert.equal(second.json.timings.prompt_n, 1, 'warm: only the last prompt token evaluated');
  const warm = second.probs.map((p, i) => shift(ref.probs[i]!, p));
  t.diagnostic(`cache-hit:3 warm vs clean: ${warm.map((x) => x.toFixed(3)).join(' ')}`);
  assert.ok(Math.min(...warm) > 0.05);
  const off = await serve(t, cacheHit, { api: 'llamacpp', prefixCache: false });
  for (let r = 0; r < 2; r++)
    assert.deepEqual((await complete(off, P, { n_predict: 6 })).probs, ref.probs, `cache off, run ${r}`);
});

test('the clean engine: warm repeats move logprobs by kernel noise only; prompt_logprobs of a continuation ≈ its decode logprobs', async (t) => {
  const a = await serve(t, clean, { api: 'llamacpp' });
  const ref = await complete(a, P, { n_predict: 8, cache_prompt: false });
  const C = ref.probs.map((p) => p.id);
  let warmMax = 0;
  for (let j = 0; j < C.length; j++) {
    const prompt = [...P, ...C.slice(0, j)];
    const cold = (await complete(a, prompt, { n_predict: 1, cache_prompt: false })).probs[0]!;
    await complete(a, [...P, ...C.slice(0, Math.max(0, j - 1))], { n_predict: 1, cache_prompt: true });
    const warm = (await complete(a, prompt, { n_predict: 1, cache_prompt: true })).probs[0]!;
    warmMax = Math.max(warmMax, shift(cold, warm));
  }
  const v = await serve(t, clean, { api: 'vllm' });
  const scored = await post(v, '/v1/completions', {
    prompt: [...P, ...C],
    max_tokens: 1,
    temperature: 0,
    prompt_logprobs: 0,
  });
  const pl = scored.json.choices[0].prompt_logprobs;
  const prefillMax = Math.max(
    ...C.map((id, j) => Math.abs(pl[P.length + j][String(id)].logprob - ref.probs[j]!.logprob)),
  );
  t.diagnostic(
    `clean llama: warm vs cold max ${warmMax.toExponential(2)}; one-prefill scoring vs decode max ${prefillMax.toExponential(2)}`,
  );
  assert.ok(warmMax < 5e-3, `warm vs cold ${warmMax}`);
  assert.ok(prefillMax < 5e-3, `prefill vs decode ${prefillMax}`);
});

test('llama.cpp behind --api llamacpp: the recorded b4748 shapes with real tokens (BOS, merges, bytes)', async (t) => {
  const fixture = (name: string): unknown =>
    JSON.parse(readFileSync(new URL(`./fixtures/llama-server-b4748/${name}`, import.meta.url), 'utf8'));
  const url = await serve(t, clean, { api: 'llamacpp' });
  const text = 'The cache holds key 3 and value';
  const tok = await post(url, '/tokenize', { content: text, add_special: true, with_pieces: true });
  assert.deepEqual(typedShape(tok.json), typedShape(fixture('tokenize_with_pieces.json')));
  assert.deepEqual(tok.json.tokens[0], { id: clean.bosToken, piece: '<|startoftext|>' });
  const body = await post(url, '/completion', { prompt: text, n_predict: 8, n_probs: 5, temperature: 0 });
  assert.deepEqual(typedShape(body.json), typedShape(fixture('completion_n_probs5.json')));
  assert.equal(body.json.prompt, `<|startoftext|>${text}`);
  assert.equal(body.json.tokens_evaluated, tok.json.tokens.length);
  const models = await get(url, '/v1/models');
  assert.deepEqual(typedShape(models.json), typedShape(fixture('v1_models.json')));
  assert.equal(models.json.data[0].meta.n_vocab, clean.vocabSize);
  assert.ok(models.json.data[0].meta.size > 100_000);
  const chat = await post(url, '/v1/chat/completions', {
    messages: [{ role: 'user', content: text }],
    max_tokens: 4,
    logprobs: true,
    top_logprobs: 5,
    temperature: 0,
  });
  assert.deepEqual(typedShape(chat.json), typedShape(fixture('v1_chat_top_logprobs5.json')));
});

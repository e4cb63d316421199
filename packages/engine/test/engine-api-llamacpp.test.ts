/**
 * `api: 'llamacpp'` on the simulated engine against the recorded responses of llama-server
 * b4748 (test/fixtures/llama-server-b4748/, copied from the shared recording): every endpoint
 * gives the same fields in the same order with the same JSON types, streams have the same
 * events, and the prompt cache shows in `tokens_cached` / `timings.prompt_n` as there.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { get, post, sseData, startSim, typedShape } from './helpers/engine-sim.js';

const fixture = (name: string): string =>
  readFileSync(new URL(`./fixtures/llama-server-b4748/${name}`, import.meta.url), 'utf8');
const json = (name: string): any => JSON.parse(fixture(name));
const events = (name: string): any[] =>
  sseData(fixture(name))
    .filter((d) => d !== '[DONE]')
    .map((d) => JSON.parse(d));
const PROMPT = 'The cache holds key 3 and value';
const SIM = { seed: 2 };

test('GET /v1/models and /props: the recorded fields and types', async (t) => {
  const engine = await startSim(t, SIM, { api: 'llamacpp' });
  const models = await get(engine.url, '/v1/models');
  assert.deepEqual(typedShape(models.json), typedShape(json('v1_models.json')));
  const props = await get(engine.url, '/props');
  assert.deepEqual(typedShape(props.json), typedShape(json('props.json')));
  assert.equal(props.json.build_info, json('props.json').build_info);
  assert.equal(props.json.total_slots, 1);
  assert.equal(models.headers.get('server'), 'llama.cpp');
});

test('/tokenize (ids, and pieces), /detokenize, /apply-template', async (t) => {
  const engine = await startSim(t, SIM, { api: 'llamacpp' });
  const ids = await post(engine.url, '/tokenize', { content: PROMPT, add_special: true });
  assert.deepEqual(typedShape(ids.json), typedShape(json('tokenize.json')));
  const pieces = await post(engine.url, '/tokenize', { content: PROMPT, add_special: true, with_pieces: true });
  assert.deepEqual(typedShape(pieces.json), typedShape(json('tokenize_with_pieces.json')));
  assert.equal(pieces.json.tokens.map((p: { piece: string }) => p.piece).join(''), PROMPT);
  assert.deepEqual((await post(engine.url, '/detokenize', { tokens: ids.json.tokens })).json, { content: PROMPT });
  const tpl = await post(engine.url, '/apply-template', {
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Tell me about layer 3' },
    ],
  });
  assert.deepEqual(typedShape(tpl.json), typedShape(json('apply_template.json')));
  assert.equal(tpl.json.prompt, 'system: Be brief.\nuser: Tell me about layer 3\nassistant:');
});

test('native /completion: the body, the stream (no [DONE]), n_predict 0 still generating one token, the warm prompt cache', async (t) => {
  const engine = await startSim(t, SIM, { api: 'llamacpp' });
  const body = await post(engine.url, '/completion', { prompt: PROMPT, n_predict: 8, n_probs: 5, temperature: 0 });
  assert.deepEqual(typedShape(body.json), typedShape(json('completion_n_probs5.json')));
  assert.equal(body.json.completion_probabilities.length, 8);
  for (const p of body.json.completion_probabilities) assert.equal(p.top_logprobs.length, 5);
  assert.equal(
    body.json.tokens_evaluated,
    body.json.tokens_cached - 7,
    'the slot holds the prompt and all generated tokens but the last',
  );

  const stream = await post(engine.url, '/completion', {
    prompt: PROMPT,
    n_predict: 8,
    n_probs: 5,
    temperature: 0,
    stream: true,
  });
  const got = sseData(stream.text);
  const want = events('completion_n_probs5_stream.sse');
  assert.equal(got.length, want.length, 'eight token events and the final object, no [DONE]');
  got.forEach((d, i) => assert.deepEqual(typedShape(JSON.parse(d)), typedShape(want[i]), `event ${i}`));
  assert.deepEqual(
    JSON.parse(got.at(-1) as string).timings.prompt_n,
    1,
    'a repeat re-evaluates only the last prompt token',
  );

  const ids = (await post(engine.url, '/tokenize', { content: PROMPT, add_special: true })).json.tokens as number[];
  const one = await post(engine.url, '/completion', {
    prompt: ids,
    n_predict: 1,
    n_probs: 5,
    cache_prompt: true,
    temperature: 0,
  });
  assert.deepEqual(typedShape(one.json), typedShape(json('completion_token_ids_n_predict1.json')));
  assert.equal(one.json.tokens_cached, ids.length);
  assert.equal(one.json.timings.prompt_n, 1);
  assert.equal(one.json.completion_probabilities[0].logprob, body.json.completion_probabilities[0].logprob);
  const zero = await post(engine.url, '/completion', {
    prompt: ids,
    n_predict: 0,
    n_probs: 5,
    cache_prompt: true,
    temperature: 0,
  });
  assert.deepEqual(typedShape(zero.json), typedShape(json('completion_token_ids_n_predict0.json')));
  assert.equal(zero.json.tokens_predicted, 1);
  assert.equal(zero.json.generation_settings.n_predict, 0);
  const cold = await post(engine.url, '/completion', {
    prompt: ids,
    n_predict: 1,
    n_probs: 5,
    cache_prompt: false,
    temperature: 0,
  });
  assert.equal(cold.json.timings.prompt_n, ids.length, 'cache_prompt false: the whole prompt');
  const after = await post(engine.url, '/completion', { prompt: ids, n_predict: 1, n_probs: 5, temperature: 0 });
  assert.equal(after.json.timings.prompt_n, ids.length, 'and the slot is empty afterwards');
});

test('/v1/completions and /v1/chat/completions: chat-shaped logprobs with ids, timings, the streams as recorded', async (t) => {
  const engine = await startSim(t, SIM, { api: 'llamacpp' });
  const comp = await post(engine.url, '/v1/completions', {
    model: 'm',
    prompt: PROMPT,
    max_tokens: 8,
    logprobs: 5,
    temperature: 0,
  });
  assert.deepEqual(typedShape(comp.json), typedShape(json('v1_completions_logprobs5.json')));
  assert.match(comp.json.id, /^chatcmpl-/);
  const compStream = sseData(
    (
      await post(engine.url, '/v1/completions', {
        model: 'm',
        prompt: PROMPT,
        max_tokens: 8,
        logprobs: 5,
        temperature: 0,
        stream: true,
      })
    ).text,
  );
  const wantComp = sseData(fixture('v1_completions_logprobs5_stream.sse'));
  assert.equal(compStream.length, wantComp.length);
  assert.equal(compStream.at(-1), '[DONE]');
  compStream
    .slice(0, -1)
    .forEach((d, i) =>
      assert.deepEqual(
        typedShape(JSON.parse(d)),
        typedShape(JSON.parse(wantComp[i] as string)),
        `completions event ${i}`,
      ),
    );
  const messages = [{ role: 'user', content: PROMPT }];
  const chat = await post(engine.url, '/v1/chat/completions', {
    model: 'm',
    messages,
    max_tokens: 8,
    logprobs: true,
    top_logprobs: 5,
    temperature: 0,
  });
  assert.deepEqual(typedShape(chat.json), typedShape(json('v1_chat_top_logprobs5.json')));
  const chatStream = sseData(
    (
      await post(engine.url, '/v1/chat/completions', {
        model: 'm',
        messages,
        max_tokens: 8,
        logprobs: true,
        top_logprobs: 5,
        temperature: 0,
        stream: true,
      })
    ).text,
  );
  const wantChat = sseData(fixture('v1_chat_top_logprobs5_stream.sse'));
  assert.equal(chatStream.length, wantChat.length, 'no role chunk');
  chatStream
    .slice(0, -1)
    .forEach((d, i) =>
      assert.deepEqual(typedShape(JSON.parse(d)), typedShape(JSON.parse(wantChat[i] as string)), `chat event ${i}`),
    );
  const post_ = await post(engine.url, '/v1/completions', {
    model: 'm',
    prompt: PROMPT,
    max_tokens: 8,
    logprobs: 5,
    temperature: 0,
    post_sampling_probs: true,
  });
  assert.deepEqual(typedShape(post_.json), typedShape(json('v1_completions_post_sampling_probs.json')));
  for (const item of post_.json.choices[0].logprobs.content)
    assert.equal(item.prob, 1, 'greedy: the pick has probability 1');
});

test('echo is refused as b4748 does; slot erase needs --slot-save-path', async (t) => {
  const engine = await startSim(t, SIM, { api: 'llamacpp' });
  const echo = await post(engine.url, '/v1/completions', { prompt: PROMPT, echo: true, logprobs: 5, max_tokens: 1 });
  assert.equal(echo.status, 500);
  assert.equal(echo.text, fixture('v1_completions_echo_logprobs.json').trim());
  assert.equal(
    (await post(engine.url, '/v1/completions', { prompt: PROMPT, echo: false })).status,
    500,
    'any echo key, as b4748',
  );
  const erase = await post(engine.url, '/slots/0?action=erase', '');
  assert.equal(erase.status, 501);
  assert.deepEqual(erase.json, {
    error: {
      code: 501,
      message: 'This server does not support slots action. Start it with `--slot-save-path`',
      type: 'not_supported_error',
    },
  });

  const slots = await startSim(t, SIM, { api: 'llamacpp', slotSavePath: '/tmp' });
  await post(slots.url, '/completion', { prompt: PROMPT, n_predict: 3, temperature: 0 });
  const erased = await post(slots.url, '/slots/0?action=erase', '');
  assert.equal(erased.status, 200);
  assert.deepEqual(Object.keys(erased.json), ['id_slot', 'n_erased']);
  assert.ok(erased.json.n_erased > 0);
  const cold = await post(slots.url, '/completion', { prompt: PROMPT, n_predict: 1, temperature: 0 });
  assert.equal(cold.json.timings.prompt_n, cold.json.tokens_evaluated, 'erased: the next request is cold');
});

/**
 * The official `openai` npm client (v6) against the simulated engine: chat and completions,
 * streamed and not, with logprobs — what any OpenAI-compatible client expects works.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { startSim } from './helpers/engine-sim.js';

async function client(t: import('node:test').TestContext): Promise<OpenAI> {
  const engine = await startSim(t, { seed: 5 });
  return new OpenAI({ baseURL: `${engine.url}/v1`, apiKey: 'sk-sim', maxRetries: 0 });
}

test('openai client: chat, non-streamed, with top logprobs', async (t) => {
  const openai = await client(t);
  const res = await openai.chat.completions.create({
    model: 'logprobe-sim',
    messages: [{ role: 'user', content: 'Hello' }],
    max_tokens: 8,
    temperature: 0,
    logprobs: true,
    top_logprobs: 3,
  });
  const choice = res.choices[0];
  assert.ok(choice);
  assert.equal(choice.finish_reason, 'length');
  assert.equal(choice.logprobs?.content?.length, 8);
  assert.equal(choice.logprobs?.content?.[0]?.top_logprobs.length, 3);
  assert.equal(choice.message.content, choice.logprobs?.content?.map((c) => c.token).join(''));
  assert.equal(res.usage?.completion_tokens, 8);
});

test('openai client: chat, streamed, with usage', async (t) => {
  const openai = await client(t);
  const stream = await openai.chat.completions.create({
    model: 'logprobe-sim',
    messages: [{ role: 'user', content: 'Hello' }],
    max_tokens: 6,
    temperature: 0,
    logprobs: true,
    top_logprobs: 2,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let tokens = 0;
  let usage = 0;
  let finish: string | null = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (c) {
      text += c.delta.content ?? '';
      tokens += c.logprobs?.content?.length ?? 0;
      finish = c.finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage.completion_tokens;
  }
  assert.equal(tokens, 6);
  assert.equal(usage, 6);
  assert.equal(finish, 'length');
  assert.ok(text.length > 0);
  // The client's helper assembles the same stream into a completion.
  const runner = openai.chat.completions.stream({
    model: 'logprobe-sim',
    messages: [{ role: 'user', content: 'Hello' }],
    max_tokens: 6,
    temperature: 0,
    logprobs: true,
  });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0]?.message.content, text);
  assert.equal(final.choices[0]?.logprobs?.content?.length, 6);
});

test('openai client: completions, non-streamed and streamed, with logprobs', async (t) => {
  const openai = await client(t);
  const res = await openai.completions.create({
    model: 'logprobe-sim',
    prompt: 'The cache',
    max_tokens: 5,
    temperature: 0,
    logprobs: 3,
  });
  const choice = res.choices[0];
  assert.equal(choice?.logprobs?.tokens?.length, 5);
  assert.equal(choice?.logprobs?.top_logprobs?.[0] && Object.keys(choice.logprobs.top_logprobs[0]).length, 3);
  const stream = await openai.completions.create({
    model: 'logprobe-sim',
    prompt: 'The cache',
    max_tokens: 5,
    temperature: 0,
    logprobs: 3,
    stream: true,
  });
  let text = '';
  const lps: number[] = [];
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    lps.push(...(chunk.choices[0]?.logprobs?.token_logprobs ?? []));
  }
  assert.equal(text, choice?.text);
  assert.deepEqual(lps, choice?.logprobs?.token_logprobs);
});

test('openai client: errors surface as APIError with the status and message', async (t) => {
  const openai = await client(t);
  await assert.rejects(
    openai.completions.create({ model: 'logprobe-sim', prompt: 'x', n: 3 }),
    (err: unknown) => err instanceof OpenAI.BadRequestError && err.status === 400 && /n = 1/.test(err.message),
  );
  const models = await openai.models.list();
  assert.equal(models.data[0]?.id, 'logprobe-sim');
});

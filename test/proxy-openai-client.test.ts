import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startLogprobe } from './helpers/logprobe.js';
import { startSim } from './helpers/sim.js';

/** Fields that differ per response by design (ids, timestamps). */
function stable<T>(v: T): T {
  return JSON.parse(JSON.stringify(v, (k, val: unknown) => (k === 'id' || k === 'created' ? 'X' : val))) as T;
}

test('the official openai client gets the same objects through the proxy as directly, streaming and not', async (t) => {
  const engine = await startSim();
  t.after(() => engine.close());
  const lp = await startLogprobe({ candidate: { url: engine.url }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());
  const direct = new OpenAI({ baseURL: `${engine.url}/v1`, apiKey: 'sk-test', maxRetries: 0 });
  const proxied = new OpenAI({ baseURL: `${lp.proxyUrl}/v1`, apiKey: 'sk-test', maxRetries: 0 });

  const chat = {
    model: 'sim',
    messages: [{ role: 'user' as const, content: 'Say something about caches.' }],
    max_tokens: 20,
    temperature: 0,
    logprobs: true,
    top_logprobs: 3,
  };
  assert.deepEqual(
    stable(await proxied.chat.completions.create(chat)),
    stable(await direct.chat.completions.create(chat)),
  );

  const comp = { model: 'sim', prompt: 'The capital of France is', max_tokens: 20, temperature: 0, logprobs: 5 };
  const c1 = await proxied.completions.create(comp);
  assert.deepEqual(stable(c1), stable(await direct.completions.create(comp)));
  assert.equal(c1.choices[0]!.logprobs!.tokens!.length, 20);

  const collect = async (client: OpenAI) => {
    const chunks: unknown[] = [];
    const stream = await client.chat.completions.create({
      ...chat,
      stream: true,
      stream_options: { include_usage: true },
    });
    for await (const chunk of stream) chunks.push(stable(chunk));
    return chunks;
  };
  const viaProxy = await collect(proxied);
  assert.deepEqual(viaProxy, await collect(direct));
  assert.ok(viaProxy.length > 10, 'one chunk per token');

  const collectComp = async (client: OpenAI) => {
    const chunks: unknown[] = [];
    for await (const chunk of await client.completions.create({ ...comp, stream: true })) chunks.push(stable(chunk));
    return chunks;
  };
  assert.deepEqual(await collectComp(proxied), await collectComp(direct));

  const models = await proxied.models.list();
  assert.deepEqual(
    models.data.map((m) => m.id),
    (await direct.models.list()).data.map((m) => m.id),
  );
});

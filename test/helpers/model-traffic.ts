import assert from 'node:assert/strict';
import { request } from 'undici';

/** `n` completions, round-robin over `models`, `parallel` at a time; distinct prompts. */
export async function modelTraffic(
  proxyUrl: string,
  models: readonly string[],
  n: number,
  parallel = 8,
): Promise<void> {
  let next = 0;
  const one = async (): Promise<void> => {
    for (let i = next++; i < n; i = next++) {
      const r = await request(`${proxyUrl}/v1/completions`, {
        method: 'POST',
        body: JSON.stringify({
          model: models[i % models.length],
          prompt: `Request ${i}: tell me about the weather and the model's layers`,
          max_tokens: 12,
        }),
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(r.statusCode, 200);
      await r.body.dump();
    }
  };
  await Promise.all(Array.from({ length: parallel }, one));
}

/**
 * vLLM's `--logprobs-mode` on the vLLM double (vllm/config/model.py `LogprobsMode`;
 * vllm/v1/sample/sampler.py `Sampler.forward`, ops/topk_topp_sampler.py `forward_native`): the
 * numbers sample logprobs report, and the one place the server says which: `GET /server_info?
 * config_format=json` in dev mode.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runEngineCli } from '../src/cli.js';
import { get, post, startSim } from './helpers/engine-sim.js';

interface Item {
  token: string;
  logprob: number;
  top_logprobs: Array<{ token: string; logprob: number }>;
}

async function chatItems(url: string, extra: Record<string, unknown>): Promise<Item[]> {
  const r = await post(url, '/v1/chat/completions', {
    model: 'm',
    messages: [{ role: 'user', content: 'The quick brown fox' }],
    max_tokens: 4,
    logprobs: true,
    top_logprobs: 5,
    ...extra,
  });
  assert.equal(r.status, 200, r.text);
  return r.json.choices[0].logprobs.content as Item[];
}

const mass = (xs: number[]): number => xs.reduce((s, x) => s + Math.exp(x), 0);

test('raw_logits: unnormalised values, the same differences as the logprobs; processed_logits of a greedy request too', async (t) => {
  const raw = await startSim(t, { seed: 7 }, { api: 'vllm' });
  const logits = await startSim(t, { seed: 7 }, { api: 'vllm', logprobsMode: 'raw_logits' });
  const processedGreedy = await startSim(t, { seed: 7 }, { api: 'vllm', logprobsMode: 'processed_logits' });
  const a = await chatItems(raw.url, { temperature: 0 });
  const b = await chatItems(logits.url, { temperature: 0 });
  const c = await chatItems(processedGreedy.url, { temperature: 0 });
  assert.deepEqual(
    b.map((i) => i.token),
    a.map((i) => i.token),
  );
  for (let k = 0; k < a.length; k++) {
    const ra = a[k] as Item;
    const rb = b[k] as Item;
    assert.ok(mass(rb.top_logprobs.map((e) => e.logprob)) > 1.5, 'logits are not a distribution');
    const offset = rb.logprob - ra.logprob;
    assert.ok(offset > 1);
    for (let e = 0; e < 5; e++)
      assert.ok(
        Math.abs((rb.top_logprobs[e]?.logprob as number) - (ra.top_logprobs[e]?.logprob as number) - offset) < 1e-9,
      );
    assert.deepEqual(c[k], rb);
  }
});

test('processed_logprobs: after temperature and top-k, renormalised; the masked tokens at -9999.0', async (t) => {
  const raw = await startSim(t, { seed: 7 }, { api: 'vllm' });
  const proc = await startSim(t, { seed: 7 }, { api: 'vllm', logprobsMode: 'processed_logprobs' });
  const extra = { temperature: 0.5, top_k: 3, seed: 11 };
  const a = await chatItems(raw.url, extra);
  const b = await chatItems(proc.url, extra);
  assert.deepEqual(
    b.map((i) => i.token),
    a.map((i) => i.token),
    'the mode changes the numbers, not the tokens',
  );
  for (let k = 0; k < a.length; k++) {
    const ra = a[k] as Item;
    const pb = b[k] as Item;
    const kept = pb.top_logprobs.slice(0, 3).map((e) => e.logprob);
    assert.ok(Math.abs(mass(kept) - 1) < 1e-9, `top 3 carry all the mass: ${mass(kept)}`);
    assert.deepEqual(
      pb.top_logprobs.slice(3).map((e) => e.logprob),
      [-9999, -9999],
    );
    // processed = (raw / T) - logsumexp over the kept three.
    const scaled = ra.top_logprobs.slice(0, 3).map((e) => e.logprob / 0.5);
    const max = Math.max(...scaled);
    const lse = max + Math.log(scaled.reduce((s, x) => s + Math.exp(x - max), 0));
    assert.ok(Math.abs((pb.top_logprobs[0]?.logprob as number) - ((scaled[0] as number) - lse)) < 1e-9);
    assert.ok(pb.logprob > -9999, 'the sampled token is among the kept');
  }
  // The completions route reports the same quantity.
  const comp = await post(proc.url, '/v1/completions', {
    model: 'm',
    prompt: 'The quick brown fox',
    max_tokens: 2,
    logprobs: 5,
    ...extra,
  });
  const tops = comp.json.choices[0].logprobs.top_logprobs as Array<Record<string, number>>;
  assert.ok(tops.every((d) => Object.values(d).includes(-9999)));
});

test('a client learns the mode from GET /server_info?config_format=json, in dev mode only', async (t) => {
  const dev = await startSim(t, {}, { api: 'vllm', devMode: true, logprobsMode: 'processed_logprobs' });
  const json = await get(dev.url, '/server_info?config_format=json');
  assert.equal(json.status, 200);
  assert.equal(json.json.vllm_config.model_config.logprobs_mode, 'processed_logprobs');
  const text = await get(dev.url, '/server_info');
  assert.equal(typeof text.json.vllm_config, 'string');
  assert.doesNotMatch(text.json.vllm_config as string, /logprobs_mode/, 'str(vllm_config) does not name it');
  assert.equal((await get(dev.url, '/server_info?config_format=yaml')).status, 422);
  const plain = await startSim(t, {}, { api: 'vllm', logprobsMode: 'raw_logits' });
  const hidden = await get(plain.url, '/server_info?config_format=json');
  assert.equal(hidden.status, 404);
  assert.equal(hidden.text, '{"detail":"Not Found"}');
});

test('--logprobs-mode: vllm only, one of the four', async () => {
  const err: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((s: string) => (err.push(String(s)), true)) as typeof process.stderr.write;
  try {
    assert.equal(await runEngineCli(['--sim', '--api', 'sglang', '--logprobs-mode', 'raw_logits']), 2);
    assert.equal(await runEngineCli(['--sim', '--api', 'vllm', '--logprobs-mode', 'logits']), 2);
  } finally {
    process.stderr.write = write;
  }
  assert.match(err.join(''), /--logprobs-mode applies to --api vllm only/);
  assert.match(
    err.join(''),
    /--logprobs-mode: expected one of raw_logprobs, raw_logits, processed_logprobs, processed_logits/,
  );
});

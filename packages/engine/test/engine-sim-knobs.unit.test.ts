/**
 * The simulated model's knobs, measured the way logprobe measures engines: the baseline's greedy
 * path forced through the knobbed model, position by position.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { EngineModel, NextTokenDistribution } from '../src/model.js';
import { createSimModel } from '../src/sim/model.js';
import { post, startSim } from './helpers/engine-sim.js';

const PROMPTS = [
  'The quick brown fox',
  'Once upon a time, in a small village',
  'What is artificial intelligence?',
  'def f(x):\n  return',
];
const STEPS = 24;

async function greedyIds(model: EngineModel, prompt: string, steps: number): Promise<number[]> {
  const seq = await model.start(model.tokenize(prompt), { requestSeed: 0 });
  const ids: number[] = [];
  for (let i = 0; i < steps; i++) {
    const id = (await seq.next()).ids[0] as number;
    if (id === model.eosToken) break;
    ids.push(id);
    await seq.push(id);
  }
  return ids;
}

async function forced(
  model: EngineModel,
  prompt: string,
  ids: readonly number[],
  requestSeed: number,
): Promise<NextTokenDistribution[]> {
  const seq = await model.start(model.tokenize(prompt), { requestSeed });
  const out: NextTokenDistribution[] = [];
  for (const id of ids) {
    out.push(await seq.next());
    await seq.push(id);
  }
  return out;
}

/** Per position: |Δ| of the chosen token and the largest |Δ| over the baseline's top 5. */
async function shifts(
  base: EngineModel,
  other: EngineModel,
  requestSeed = 1,
): Promise<{ chosen: number[]; top5: number[] }> {
  const chosen: number[] = [];
  const top5: number[] = [];
  for (const p of PROMPTS) {
    const ids = await greedyIds(base, p, STEPS);
    const a = await forced(base, p, ids, 0);
    const b = await forced(other, p, ids, requestSeed);
    ids.forEach((id, i) => {
      const da = a[i] as NextTokenDistribution;
      const db = b[i] as NextTokenDistribution;
      chosen.push(Math.abs(da.logprobOf(id) - db.logprobOf(id)));
      let m = 0;
      for (let k = 0; k < 5; k++) {
        const t = da.ids[k] as number;
        m = Math.max(m, Math.abs(da.logprobOf(t) - db.logprobOf(t)));
      }
      top5.push(m);
    });
  }
  return { chosen, top5 };
}

const rms = (xs: number[]): number => Math.sqrt(xs.reduce((s, x) => s + x * x, 0) / xs.length);
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

test('noise σ moves every logprob by about σ, scales with σ, and differs per request', async () => {
  const base = createSimModel({ seed: 4 });
  const small = await shifts(base, createSimModel({ seed: 4, noise: 0.001 }));
  const large = await shifts(base, createSimModel({ seed: 4, noise: 0.1 }));
  assert.ok(
    small.chosen.every((d) => d > 0),
    'a noisy position equal to the baseline',
  );
  assert.ok(rms(small.chosen) > 0.0003 && rms(small.chosen) < 0.003, `σ=0.001: rms ${rms(small.chosen)}`);
  assert.ok(rms(large.chosen) > 0.03 && rms(large.chosen) < 0.3, `σ=0.1: rms ${rms(large.chosen)}`);
  const ratio = rms(large.chosen) / rms(small.chosen);
  assert.ok(ratio > 50 && ratio < 200, `rms ratio ${ratio} for a 100× σ`);
  // Run to run: two requests on the same noisy model differ; with σ = 0 they are equal.
  const noisy = createSimModel({ seed: 4, noise: 0.01 });
  const ids = await greedyIds(base, PROMPTS[0] as string, 8);
  const r1 = await forced(noisy, PROMPTS[0] as string, ids, 1);
  const r2 = await forced(noisy, PROMPTS[0] as string, ids, 2);
  assert.notEqual(r1[0]?.logprobs[0], r2[0]?.logprobs[0]);
  const r3 = await forced(noisy, PROMPTS[0] as string, ids, 1);
  assert.equal(r3[5]?.logprobs[2], r1[5]?.logprobs[2], 'the same request seed gives the same noise');
});

test('stateShift moves every decode step by a few tenths of a nat', async () => {
  const base = createSimModel({ seed: 4 });
  const { chosen, top5 } = await shifts(base, createSimModel({ seed: 4, stateShift: 0.5 }));
  assert.ok(
    top5.every((m) => m > 0.1),
    `a step below the 0.1 noise floor: ${Math.min(...top5)}`,
  );
  // A confident chosen token barely moves (its logprob is near 0 either way); its rivals do.
  assert.ok(median(chosen) > 0.03 && median(chosen) < 0.5, `median chosen-token shift ${median(chosen)}`);
  assert.ok(median(top5) > 0.2 && median(top5) < 1.2, `median top-5 shift ${median(top5)}`);
  // The perturbation belongs to the prompt: another prompt is shifted differently.
  const other = createSimModel({ seed: 4, stateShift: 0.5 });
  const [a, b] = await Promise.all(
    ['prompt one', 'prompt two'].map(
      async (p) => (await forced(other, p, [300, 301, 302], 0))[0] as NextTokenDistribution,
    ),
  );
  const [ba, bb] = await Promise.all(
    ['prompt one', 'prompt two'].map(
      async (p) => (await forced(base, p, [300, 301, 302], 0))[0] as NextTokenDistribution,
    ),
  );
  assert.notEqual(
    (a as NextTokenDistribution).logprobOf(300) - (ba as NextTokenDistribution).logprobOf(300),
    (b as NextTokenDistribution).logprobOf(300) - (bb as NextTokenDistribution).logprobOf(300),
  );
});

test('localShift moves only some positions, and those by a lot', async () => {
  const base = createSimModel({ seed: 4 });
  const { top5 } = await shifts(base, createSimModel({ seed: 4, localShift: 2 }));
  const moved = top5.filter((m) => m > 0);
  const share = moved.length / top5.length;
  assert.ok(share > 0.02 && share < 0.3, `${moved.length} of ${top5.length} positions moved`);
  assert.ok(
    moved.every((m) => m > 0.3),
    `a moved position below 0.3: ${Math.min(...moved)}`,
  );
});

test('tokenizerSplit: the same greedy text in single-byte tokens', async () => {
  const base = createSimModel({ seed: 9 });
  const split = createSimModel({ seed: 9, tokenizerSplit: true });
  for (const p of PROMPTS) {
    const ids = await greedyIds(base, p, 20);
    const text = base.detokenize(ids);
    const bytes = Buffer.byteLength(text);
    const splitIds = await greedyIds(split, p, bytes);
    assert.equal(split.detokenize(splitIds), text);
    assert.ok(
      splitIds.every((id) => split.tokenBytes(id).length === 1),
      'a multi-byte token from the split model',
    );
    assert.ok(
      ids.some((id) => base.tokenBytes(id).length > 1),
      'the base model used no multi-byte token',
    );
    assert.ok(split.tokenize(p).length > base.tokenize(p).length);
  }
});

test('knobs through the server: stateShift moves the logprobs of the same greedy request', async (t) => {
  const clean = await startSim(t, { seed: 11 });
  const buggy = await startSim(t, { seed: 11, stateShift: 0.6 });
  const body = { prompt: 'The state of the cache', max_tokens: 1, temperature: 0, logprobs: 5 };
  const a = await post(clean.url, '/v1/completions', body);
  const b = await post(buggy.url, '/v1/completions', body);
  const ta = a.json.choices[0].logprobs.top_logprobs[0] as Record<string, number>;
  const tb = b.json.choices[0].logprobs.top_logprobs[0] as Record<string, number>;
  const common = Object.keys(ta).filter((k) => k in tb);
  assert.ok(common.length > 0);
  assert.ok(Math.max(...common.map((k) => Math.abs((ta[k] as number) - (tb[k] as number)))) > 0.1);
});

/**
 * Measures how far each injected fault moves the llama.cpp engine's logprobs against a clean
 * engine (the noise/bug table of issue #5): greedy decoding on the clean engine, the same tokens
 * forced through the faulty one. A measurement script, not a test — numbers depend on the CPU.
 *
 *   node --import tsx bench/llama-faults.ts [--seed 1] [--steps 48] [--faults 'a;b;…']
 */
import { parseArgs } from 'node:util';
import { createLlamaModel } from '@logprobe/engine/llama';
import { forced, greedy, PROMPTS, shiftOf, type Shift, type Trace } from '../packages/engine/test/helpers/llama.js';

const DEFAULT_FAULTS = [
  'none',
  'threads:2',
  'batch:8',
  'batch:1',
  'flash-attention',
  'weights:f16',
  'kv:q8_0',
  'weight-noise:0.01',
  'kv:q4_0',
  'drop-prompt-token:3',
  'zero-layer:1',
];

const { values } = parseArgs({
  options: {
    seed: { type: 'string', default: '1' },
    steps: { type: 'string', default: '48' },
    faults: { type: 'string' },
  },
});
const seed = Number(values.seed);
const steps = Number(values.steps);
const faults = values.faults ? values.faults.split(';') : DEFAULT_FAULTS;
const fmt = (x: number): string => (x === 0 ? '0' : x < 0.01 ? x.toExponential(1) : x.toFixed(3));

const clean = await createLlamaModel({ seed });
const baseline: Trace[] = [];
const gaps: number[] = [];
const started = performance.now();
for (const p of PROMPTS) {
  const tr = await greedy(clean, p, steps);
  baseline.push(tr);
  for (const d of tr.dists) gaps.push((d.logprobs[0] ?? 0) - (d.logprobs[1] ?? 0));
  console.log(`${JSON.stringify(p.slice(0, 40))}… → ${JSON.stringify(clean.detokenize(tr.tokens))}`);
}
const tps = (PROMPTS.length * steps) / ((performance.now() - started) / 1000);
gaps.sort((a, b) => a - b);
const q = (f: number): string => fmt(gaps[Math.min(gaps.length - 1, Math.floor(f * gaps.length))] ?? NaN);
console.log(`decode ≈ ${tps.toFixed(0)} tokens/s (threads 1, including prefill)`);
console.log(`top-1/top-2 gap (nats): min ${q(0)} p10 ${q(0.1)} median ${q(0.5)} p90 ${q(0.9)} max ${q(1)}`);

console.log(`\n| setup (vs clean: f32, threads 1, batch 512, no flash attention, f16 KV) | chosen | top-5 | flips |`);
console.log('| --- | --- | --- | --- |');
for (const fault of faults) {
  const model = await createLlamaModel({
    seed,
    threads: fault === 'threads:2' ? 2 : 1,
    fault: fault === 'none' || fault === 'threads:2' ? null : fault,
  });
  const acc: Shift = { chosen: 0, top5: 0, flips: 0, positions: 0 };
  for (const [i, p] of PROMPTS.entries()) {
    const base = baseline[i];
    if (base) shiftOf(base, await forced(model, p, base.tokens), acc);
  }
  await model.close();
  console.log(
    `| ${fault === 'none' ? 'identical rerun' : fault} | ${fmt(acc.chosen)} | ${fmt(acc.top5)} | ${acc.flips}/${acc.positions} |`,
  );
}
await clean.close();

/**
 * Drives llama.cpp engine models the way the measurements do: greedy decoding on a
 * baseline, the same tokens forced through a candidate, and the largest logprob differences.
 * Shared by the engine-llama tests and `bench/llama-faults.ts`.
 */
import type { EngineModel, NextTokenDistribution } from '../../src/model.js';

/** Four prompts; the last is long (128 tokens) so batch-size splits of the prefill show up. */
export const PROMPTS: readonly string[] = [
  'The quick brown fox jumps over the lazy dog.',
  'Once upon a time, in a small village by the sea,',
  'def fibonacci(n):\n    if n < 2:\n',
  'It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light',
];

/** A greedy run: the chosen tokens and the distribution each was chosen from. */
export interface Trace {
  readonly tokens: number[];
  readonly dists: NextTokenDistribution[];
}

/** Greedy decoding for `steps` tokens (EOS is pushed like any token, so runs have equal length). */
export async function greedy(model: EngineModel, prompt: string, steps: number): Promise<Trace> {
  const seq = await model.start(model.tokenize(prompt), { requestSeed: 0 });
  const trace: Trace = { tokens: [], dists: [] };
  try {
    for (let s = 0; s < steps; s++) {
      const d = await seq.next();
      const t = d.ids[0];
      if (t === undefined) throw new Error('empty distribution');
      trace.tokens.push(t);
      trace.dists.push(d);
      await seq.push(t);
    }
  } finally {
    await seq.dispose();
  }
  return trace;
}

/** The distributions of `model` along a given token path (the baseline forced through it). */
export async function forced(
  model: EngineModel,
  prompt: string,
  tokens: readonly number[],
): Promise<NextTokenDistribution[]> {
  const seq = await model.start(model.tokenize(prompt), { requestSeed: 0 });
  const out: NextTokenDistribution[] = [];
  try {
    for (const t of tokens) {
      out.push(await seq.next());
      await seq.push(t);
    }
  } finally {
    await seq.dispose();
  }
  return out;
}

/** Largest |Δ logprob| of the chosen token, over the baseline's top-5, and top-token flips. */
export interface Shift {
  chosen: number;
  top5: number;
  flips: number;
  positions: number;
}

/** Compares a candidate's forced distributions with the baseline trace. */
export function shiftOf(base: Trace, cand: readonly NextTokenDistribution[], into?: Shift): Shift {
  const acc = into ?? { chosen: 0, top5: 0, flips: 0, positions: 0 };
  cand.forEach((c, s) => {
    const b = base.dists[s];
    const t = base.tokens[s];
    if (b === undefined || t === undefined) return;
    acc.positions++;
    acc.chosen = Math.max(acc.chosen, Math.abs(c.logprobOf(t) - b.logprobOf(t)));
    for (let k = 0; k < 5; k++) {
      const id = b.ids[k];
      if (id !== undefined) acc.top5 = Math.max(acc.top5, Math.abs(c.logprobOf(id) - b.logprobOf(id)));
    }
    if (c.ids[0] !== t) acc.flips++;
  });
  return acc;
}

/** Every listed id and logprob of two distributions, for bitwise comparisons. */
export function flatten(d: NextTokenDistribution): { ids: number[]; logprobs: number[] } {
  return { ids: Array.from(d.ids), logprobs: Array.from(d.logprobs) };
}

/**
 * Helpers for the prefix-cache and decode-state tests: one request on a model with explicit
 * start options (greedy, or forced along given tokens), and the largest move of a distribution.
 */
import type { CacheState, EngineModel, NextTokenDistribution, StartOptions } from '../../src/model.js';

/** One request's distributions, tokens and cache bookkeeping. */
export interface Run {
  readonly echo: NextTokenDistribution[];
  readonly dists: NextTokenDistribution[];
  readonly tokens: number[];
  readonly state: CacheState | undefined;
}

/** Reads and keeps the prefix cache (what a warm-capable engine does). */
export const CACHE = { read: true, write: true } as const;

/**
 * Runs `steps` decode steps on `prompt` (greedy, or along `force`); with `promptLogprobsFrom`
 * the prompt distributions are read first. The last token is not pushed, as generate() does.
 */
export async function request(
  model: EngineModel,
  prompt: readonly number[],
  steps: number,
  o: Partial<StartOptions> = {},
  force?: readonly number[],
): Promise<Run> {
  const seq = await model.start(prompt, { requestSeed: 0, ...o });
  try {
    const echo = o.promptLogprobsFrom !== undefined ? ((await seq.promptDistributions?.()) ?? []) : [];
    const dists: NextTokenDistribution[] = [];
    const tokens: number[] = [];
    for (let i = 0; i < steps; i++) {
      const d = await seq.next();
      dists.push(d);
      const t = force?.[i] ?? (d.ids[0] as number);
      tokens.push(t);
      if (i < steps - 1) await seq.push(t);
    }
    return { echo, dists, tokens, state: seq.cacheState?.() };
  } finally {
    await seq.dispose();
  }
}

/** Largest |Δ logprob| over `a`'s five most likely tokens. */
export function moved(a: NextTokenDistribution, b: NextTokenDistribution): number {
  let m = 0;
  for (let k = 0; k < 5 && k < a.ids.length; k++) {
    const id = a.ids[k] as number;
    m = Math.max(m, Math.abs(a.logprobOf(id) - b.logprobOf(id)));
  }
  return m;
}

/** Every listed id and logprob, for bitwise comparisons. */
export function bits(d: NextTokenDistribution): { ids: number[]; logprobs: number[] } {
  return { ids: Array.from(d.ids), logprobs: Array.from(d.logprobs) };
}

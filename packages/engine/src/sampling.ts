/**
 * Token choice: argmax at temperature 0, otherwise a seeded draw from the temperature-scaled
 * distribution restricted by top_k and top_p (temperature first, then the filters, as vLLM does).
 * Logprobs reported to the client stay the raw model values (vLLM's default `raw_logprobs`).
 */
import type { NextTokenDistribution } from './model.js';

/** A uniform random source in [0, 1). */
export type Rng = () => number;

/** The sampling fields of a request. */
export interface ChoiceParams {
  readonly temperature: number;
  readonly topP: number;
  /** 0 = off. */
  readonly topK: number;
}

/** Picks the next token id from `dist`. */
export function chooseToken(dist: NextTokenDistribution, params: ChoiceParams, rng: Rng, vocabSize: number): number {
  const first = dist.ids[0];
  if (first === undefined) throw new Error('the model returned an empty distribution');
  if (params.temperature === 0 || params.topK === 1) return first;

  let ids: ArrayLike<number>;
  let lps: ArrayLike<number>;
  let sorted = true;
  if (params.topK > 0 && params.topK <= dist.ids.length) {
    ids = Array.prototype.slice.call(dist.ids, 0, params.topK) as number[];
    lps = Array.prototype.slice.call(dist.logprobs, 0, params.topK) as number[];
  } else if (dist.ids.length >= vocabSize) {
    ids = dist.ids;
    lps = dist.logprobs;
  } else {
    // The distribution lists a prefix: walk the whole vocabulary.
    const all = new Array<number>(vocabSize);
    for (let i = 0; i < vocabSize; i++) all[i] = i;
    const lpOf = new Float64Array(vocabSize);
    for (let i = 0; i < vocabSize; i++) lpOf[i] = dist.logprobOf(i);
    sorted = params.topK > 0 || params.topP < 1;
    if (sorted) all.sort((a, b) => (lpOf[b] as number) - (lpOf[a] as number) || a - b);
    ids = params.topK > 0 ? all.slice(0, params.topK) : all;
    lps = Array.from(ids, (id) => lpOf[id] as number);
  }

  let max = -Infinity;
  for (let i = 0; i < lps.length; i++) max = Math.max(max, lps[i] as number);
  const weights = new Float64Array(lps.length);
  let total = 0;
  for (let i = 0; i < lps.length; i++) {
    const w = Math.exp(((lps[i] as number) - max) / params.temperature);
    weights[i] = w;
    total += w;
  }
  let n = weights.length;
  if (params.topP < 1 && sorted) {
    // The smallest most-likely prefix whose mass reaches top_p (at least one token).
    let cum = 0;
    for (let i = 0; i < weights.length; i++) {
      cum += weights[i] as number;
      if (cum >= params.topP * total) {
        n = i + 1;
        total = cum;
        break;
      }
    }
  }
  let r = rng() * total;
  for (let i = 0; i < n; i++) {
    r -= weights[i] as number;
    if (r < 0) return ids[i] as number;
  }
  // Rounding left r ≥ 0 after the last weight: the last candidate with any weight.
  for (let i = n - 1; i >= 0; i--) if ((weights[i] as number) > 0) return ids[i] as number;
  return first;
}

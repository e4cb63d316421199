import type { NextTokenDistribution } from '../model.js';

/** How many of the most likely tokens a distribution lists (the OpenAI maximum of top_logprobs). */
export const TOP_LISTED = 20;

// Top-k selection by histogram: logits are binned by their distance below the max, the bin that
// completes the top k found from the counts, and only the few tokens above it sorted. A heap or
// an insertion list over the whole vocabulary measured 2–3× slower than the rest of a step.
const BIN_WIDTH = 0.25;
const BINS = 64;
const counts = new Int32Array(BINS);
let scratchBins = new Uint8Array(0);
let scratchIds = new Int32Array(0);

/**
 * A next-token distribution over a full vector of logits: log-softmax computed once, the
 * `TOP_LISTED` most likely ids found without sorting the vocabulary. Owns its logits array;
 * nothing is shared between steps, so a distribution held by the server stays valid after the
 * sequence moves on. Among exactly equal logits the lower id is listed first.
 */
export class LogitDistribution implements NextTokenDistribution {
  readonly ids: Int32Array;
  readonly logprobs: Float64Array;
  private readonly logits: Float64Array;
  private readonly lse: number;

  constructor(logits: Float64Array) {
    this.logits = logits;
    const n = logits.length;
    let max = -Infinity;
    for (let t = 0; t < n; t++) {
      const l = logits[t] as number;
      if (l > max) max = l;
    }
    if (scratchBins.length < n) {
      scratchBins = new Uint8Array(n);
      scratchIds = new Int32Array(n);
    }
    // Locals, not the module bindings, in the hot loops (V8 reloads a mutable module binding).
    const bins = scratchBins;
    const cand = scratchIds;
    let sum = 0;
    let finite = 0;
    for (let t = 0; t < n; t++) {
      const l = logits[t] as number;
      if (l === -Infinity) continue;
      finite++;
      // Terms below e^-40 cannot change a sum that is ≥ 1 in float64: skip their exp.
      if (l - max > -40) sum += Math.exp(l - max);
    }
    this.lse = max + Math.log(sum);

    const k = Math.min(TOP_LISTED, finite);
    // Confident steps spread the top k over more than BINS × width nats: widen and bin again.
    let cut = BINS - 1;
    for (let width = BIN_WIDTH; cut === BINS - 1 && width < 1e6; width *= 8) {
      counts.fill(0);
      for (let t = 0; t < n; t++) {
        const l = logits[t] as number;
        if (l === -Infinity) {
          bins[t] = 255;
          continue;
        }
        const d = (max - l) / width;
        const b = d < BINS - 1 ? d | 0 : BINS - 1;
        bins[t] = b;
        counts[b] = (counts[b] as number) + 1;
      }
      cut = 0;
      for (let seen = counts[0] as number; seen < k; seen += counts[cut] as number) cut++;
    }
    let m = 0;
    for (let t = 0; t < n; t++) if ((bins[t] as number) <= cut) cand[m++] = t;
    // Insertion sort of the few candidates, most likely first, lower id first on ties (the scan
    // is in id order and the comparison strict, so equal logits keep their order).
    for (let i = 1; i < m; i++) {
      const id = cand[i] as number;
      const l = logits[id] as number;
      let j = i - 1;
      while (j >= 0 && (logits[cand[j] as number] as number) < l) {
        cand[j + 1] = cand[j] as number;
        j--;
      }
      cand[j + 1] = id;
    }
    this.ids = cand.slice(0, k);
    const lps = new Float64Array(k);
    for (let i = 0; i < k; i++) lps[i] = (logits[this.ids[i] as number] as number) - this.lse;
    this.logprobs = lps;
  }

  logprobOf(id: number): number {
    const l = this.logits[id];
    return l === undefined ? -Infinity : l - this.lse;
  }
}

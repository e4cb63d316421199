// Hand-made token steps for the core's tests.
import type { TokenStep } from '../../src/core/index.js';

/** A forced step: token id `i` (` t<i>`), its logprob `lp`, two alternatives (` x` moved by `alt`). */
export function forced(i: number, lp: number, alt = 0): TokenStep {
  return {
    token: ` t${i}`,
    id: i,
    logprob: lp,
    top: [
      [` t${i}`, lp],
      [' x', -2 + alt],
      [' y', -3],
    ],
    topIds: [i, 1000, 1001],
  };
}

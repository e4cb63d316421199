import { mulberry32 } from './random.js';

/** A seeded uniform RNG for sampling (mulberry32 over a mixed seed): same seed, same draws. */
export function mulberry32Rng(seed: number): () => number {
  return mulberry32(Math.imul((seed ^ (seed >>> 16)) | 0, 0x45d9f3b));
}

/** A seeded uniform RNG for sampling (mulberry32 over a mixed seed): same seed, same draws. */
export function mulberry32Rng(seed: number): () => number {
  let a = Math.imul((seed ^ (seed >>> 16)) | 0, 0x45d9f3b) >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

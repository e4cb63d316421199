/**
 * Seeded pseudo-random numbers for the generated model. Everything here is integer arithmetic
 * plus `Math.log`/`Math.sqrt` (no trigonometry), so the same seed gives bit-identical weights on
 * every machine running the same Node.js major.
 */
import { mulberry32 } from '../random.js';

/** 32-bit FNV-1a of a string: names a random stream per tensor. */
export function hashString(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** A seeded stream of uniforms and standard normals (mulberry32 + Marsaglia's polar method). */
export class Rng {
  private readonly next: () => number;
  private spare: number | null = null;

  /** `seed` and `stream` are mixed so that each tensor gets an independent stream. */
  constructor(seed: number, stream = '') {
    this.next = mulberry32(Math.imul(seed >>> 0, 0x9e3779b1) ^ hashString(stream));
  }

  /** Uniform on [0, 1) with 32 random bits. */
  uniform(): number {
    return this.next();
  }

  /** Standard normal N(0, 1). The polar method avoids `Math.cos`, whose last bit is not specified. */
  normal(): number {
    if (this.spare !== null) {
      const z = this.spare;
      this.spare = null;
      return z;
    }
    for (;;) {
      const u = 2 * this.uniform() - 1;
      const v = 2 * this.uniform() - 1;
      const s = u * u + v * v;
      if (s > 0 && s < 1) {
        const f = Math.sqrt((-2 * Math.log(s)) / s);
        this.spare = v * f;
        return u * f;
      }
    }
  }
}

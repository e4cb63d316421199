/**
 * Integer hashing and fixed random tables for the simulated model. Everything here is a pure
 * function of its inputs, so a seed and a token context always give the same numbers, bit for bit,
 * on every run and in every process.
 */

/** A 32-bit finaliser (lowbias32): good avalanche for a few integer ops per call. */
export function mix32(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x7feb352d);
  x = Math.imul(x ^ (x >>> 15), 0x846ca68b);
  return (x ^ (x >>> 16)) >>> 0;
}

/** Folds one more integer into a running hash (order-sensitive). */
export function combine(h: number, v: number): number {
  return mix32((h ^ Math.imul((v + 0x9e3779b9) | 0, 0x85ebca6b)) >>> 0);
}

/** A uniform number in [0, 1) derived from a hash. */
export function unit(h: number): number {
  return mix32(h) / 4294967296;
}

/** FNV-1a over UTF-16 code units, finalised: hashes option strings such as a model id. */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return mix32(h >>> 0);
}

import { mulberry32 } from '../random.js';

export { mulberry32 };

/** Size of the random tables; a power of two so an index is one mask. */
export const TABLE_BITS = 16;
export const TABLE_MASK = (1 << TABLE_BITS) - 1;

function fillTable(seed: number, draw: (u: () => number) => number): Float64Array {
  const rng = mulberry32(seed);
  const table = new Float64Array(1 << TABLE_BITS);
  for (let i = 0; i < table.length; i++) table[i] = draw(rng);
  return table;
}

/** Uniform in the open interval (0, 1), so logs never see 0. */
function open01(rng: () => number): number {
  return (Math.floor(rng() * 4294967295) + 0.5) / 4294967296;
}

/**
 * Standard Gumbel samples. Per-step logits are a scale times Gumbel draws, which makes the
 * top-1/top-2 gap exactly exponential in distribution (times the scale): near-ties and confident
 * steps in the proportions a real model shows. A table lookup replaces two logs per token, which
 * keeps a step over a few hundred tokens to a few microseconds.
 */
export const GUMBEL: Float64Array = fillTable(0x5eed0001, (rng) => -Math.log(-Math.log(open01(rng))));

/** Standard normal samples (Box–Muller), for run-to-run noise. */
export const GAUSS: Float64Array = fillTable(0x5eed0002, (rng) => {
  const u = open01(rng);
  const v = rng();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
});

/** The table index for token `t` under step hash `h`. */
export function tableIndex(h: number, t: number): number {
  return mix32((h ^ Math.imul(t + 1, 0x9e3779b1)) >>> 0) & TABLE_MASK;
}

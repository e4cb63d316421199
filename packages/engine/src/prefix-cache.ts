/**
 * The arithmetic of the one-slot prefix cache, shared by both engines: how much of a new
 * request's tokens a slot holding the previous request's tokens can serve.
 */
import type { CacheUse } from './model.js';

/** Length of the common prefix of two token sequences. */
export function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/**
 * Leading tokens of `cells` to take from a slot holding `cached`: the common prefix, but never
 * the last token (llama-server: "we have to evaluate at least 1 token to generate logits";
 * vLLM: `max_cache_hit_length = request.num_tokens - 1`; SGLang likewise), never from
 * `logitsFrom` on (those positions' logits are asked for), at most `use.limit`, and in whole
 * blocks of `use.block` (vLLM caches full KV blocks only).
 */
export function reusable(
  cached: readonly number[],
  cells: readonly number[],
  use: CacheUse | undefined,
  logitsFrom = Infinity,
): number {
  if (!use?.read) return 0;
  let n = Math.min(commonPrefix(cached, cells), cells.length - 1, logitsFrom, use.limit ?? Infinity);
  const block = use.block ?? 1;
  if (block > 1) n -= n % block;
  return Math.max(0, n);
}

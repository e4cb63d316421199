/**
 * The bounded values of metric labels, and the names config and metrics share: a leaf module
 * (it imports nothing), so the catalogue, the registry and the config schema read them without
 * importing the parts that use them (test/import-layers.unit.test.ts holds that).
 */

/**
 * Bounded values for the `route` label: the OpenAI-compatible paths users send, anything else
 * is `other` (a path in a label would make the series count unbounded).
 */
export const KNOWN_ROUTES = [
  '/v1/completions',
  '/v1/chat/completions',
  '/v1/models',
  '/v1/embeddings',
  '/v1/responses',
  '/generate',
  '/health',
] as const;

const known = new Set<string>(KNOWN_ROUTES);

/** The `route` label of a request URL (query string ignored). */
export function routeLabel(url: string): string {
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  return known.has(path) ? path : 'other';
}

/** Why a request was refused at once instead of waiting: `logprobe_proxy_overflow_total{reason}`. */
export type OverflowReason = 'connections' | 'pending';

export const OVERFLOW_REASONS: readonly OverflowReason[] = ['connections', 'pending'];

/** Reasons of `logprobe_capture_errors_total`: the disk's codes, `write` for anything else, `overflow` when the disk cannot keep up. */
export type CaptureErrorReason = 'ENOSPC' | 'EACCES' | 'EROFS' | 'write' | 'overflow';

/** Every reason, for zero-initialised series. */
export const CAPTURE_ERROR_REASONS: readonly CaptureErrorReason[] = ['ENOSPC', 'EACCES', 'EROFS', 'write', 'overflow'];

/**
 * Every field whose count a backend may cap: the copies' two, and the scoring calls' (vLLM's
 * `prompt_logprobs`, SGLang's `top_logprobs_num`, llama-server's `n_probs`).
 */
export const CAPPED_FIELDS = ['top_logprobs', 'logprobs', 'prompt_logprobs', 'top_logprobs_num', 'n_probs'] as const;
export type CappedField = (typeof CAPPED_FIELDS)[number];

/** The engines logprobe knows how to score on (`candidate.engine` / `baseline.engine`, besides `auto`). */
export const ENGINE_NAMES = ['vllm', 'sglang', 'llamacpp', 'openai'] as const;
export type EngineName = (typeof ENGINE_NAMES)[number];

/** What `candidate.engine` / `baseline.engine` may say. */
export type EngineSetting = 'auto' | EngineName;
export const ENGINE_SETTINGS = ['auto', ...ENGINE_NAMES] as const;

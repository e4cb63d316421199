/**
 * The mirrored copy of a client request: greedy decoding with logprobs forced, everything that
 * changes the argmax neutralised. Pure; the client's own bytes are never touched (this works on
 * a parsed copy).
 */

/** What the rewrite needs from the documented `mirror` section. */
export interface RewriteOptions {
  topLogprobs: number;
  maxTokens: number;
  seed: number;
  extraParams: Readonly<Record<string, unknown>>;
}

/** Which OpenAI request shape a route takes. */
export type RequestKind = 'chat' | 'completions';

/** The request kind of a mirrored route, or null when the route is neither. */
export function requestKind(path: string): RequestKind | null {
  if (path.endsWith('/chat/completions')) return 'chat';
  if (path.endsWith('/completions')) return 'completions';
  return null;
}

/**
 * The kind of a finished exchange to mirror, or null when it is skipped: a route the mirror
 * cannot rewrite, or a request the candidate refused (not a valid request to mirror).
 */
export function mirrorKind(ex: { path: string; status: number; aborted: boolean }): RequestKind | null {
  if (ex.status >= 400 && !ex.aborted) return null;
  return requestKind(ex.path);
}

/** Why {@link mirrorKind} skips an exchange (for the debug log), or null when it does not. */
export function skipReason(ex: { path: string; status: number; aborted: boolean }): string | null {
  if (ex.status >= 400 && !ex.aborted) return `the candidate answered ${ex.status}: not a valid request to mirror`;
  return requestKind(ex.path) === null ? 'not a completions or chat completions route' : null;
}

/** The client's length limit, whole and at most `max`; `max` when it is absent or not a count ≥ 1 (0.5 would floor to 0). */
function cap(value: unknown, max: number): number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 1 ? Math.min(Math.floor(value), max) : max;
}

/**
 * Rewrites a parsed request body for the mirror:
 * `temperature: 0, top_p: 1, n: 1, stream: false`, no `stream_options` (vLLM rejects it on a
 * non-streaming request), `max_tokens` capped, logprobs forced, `presence_penalty: 0`,
 * `frequency_penalty: 0`, `repetition_penalty: 1` set explicitly (engines fill unset fields from
 * the model's generation config, which may differ between the two builds), `logit_bias`,
 * `best_of` and `echo` removed, a fixed `seed`; then `extraParams` merged last.
 */
export function rewriteForMirror(
  kind: RequestKind,
  body: Readonly<Record<string, unknown>>,
  options: RewriteOptions,
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body };
  out.temperature = 0;
  out.top_p = 1;
  out.n = 1;
  out.stream = false;
  delete out.stream_options;
  delete out.logit_bias;
  delete out.best_of;
  delete out.echo;
  out.presence_penalty = 0;
  out.frequency_penalty = 0;
  out.repetition_penalty = 1;
  out.seed = options.seed;
  const k = Math.max(1, Math.floor(options.topLogprobs));
  if (kind === 'chat') {
    out.logprobs = true;
    out.top_logprobs = k;
    if (out.max_completion_tokens !== undefined) {
      out.max_completion_tokens = cap(out.max_completion_tokens, options.maxTokens);
      delete out.max_tokens;
    } else {
      out.max_tokens = cap(out.max_tokens, options.maxTokens);
    }
  } else {
    out.logprobs = k;
    out.max_tokens = cap(out.max_tokens, options.maxTokens);
  }
  return Object.assign(out, options.extraParams);
}

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

/** Which request shape a route takes: OpenAI's chat, completions and Responses, SGLang's native `/generate`. */
export type RequestKind = 'chat' | 'completions' | 'responses' | 'generate';

/** The request kind of a mirrored route, or null when the route is none of them. */
export function requestKind(path: string): RequestKind | null {
  if (path.endsWith('/chat/completions')) return 'chat';
  if (path.endsWith('/completions')) return 'completions';
  if (path.endsWith('/responses')) return 'responses';
  if (path === '/generate' || path.endsWith('/generate')) return 'generate';
  return null;
}

/**
 * Why a parsed request cannot be mirrored as it is, or null: a Responses request that continues a
 * stored conversation (`previous_response_id`, `conversation`) depends on state the candidate
 * stored for the client and the baseline never saw; a copy would compare two different prompts.
 */
export function stateSkip(kind: RequestKind, body: Readonly<Record<string, unknown>>): string | null {
  if (kind !== 'responses') return null;
  if (body.previous_response_id !== undefined && body.previous_response_id !== null)
    return 'a Responses request that continues a stored response (previous_response_id): the baseline has no such state';
  if (body.conversation !== undefined && body.conversation !== null)
    return 'a Responses request in a stored conversation (conversation): the baseline has no such state';
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
  return requestKind(ex.path) === null ? 'not a completions, chat completions, Responses or /generate route' : null;
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
  if (kind === 'responses') return Object.assign(rewriteResponses(body, options), options.extraParams);
  if (kind === 'generate') return Object.assign(rewriteGenerate(body, options), options.extraParams);
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

/** The logprobs the Responses API returns only when asked for by name. */
export const RESPONSES_LOGPROBS = 'message.output_text.logprobs';

/**
 * A Responses request made greedy with logprobs: `temperature: 0`, `top_p: 1`, `top_logprobs`,
 * the `include` entry that returns them, `max_output_tokens` capped, `stream: false`, and
 * `store: false` so the mirror never writes conversation state on the server (nor `background`).
 */
function rewriteResponses(body: Readonly<Record<string, unknown>>, options: RewriteOptions): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body };
  out.temperature = 0;
  out.top_p = 1;
  out.stream = false;
  out.store = false;
  delete out.stream_options;
  delete out.background;
  delete out.previous_response_id;
  out.top_logprobs = Math.max(1, Math.floor(options.topLogprobs));
  const include = Array.isArray(body.include) ? body.include.filter((x) => typeof x === 'string') : [];
  out.include = include.includes(RESPONSES_LOGPROBS) ? include : [...include, RESPONSES_LOGPROBS];
  out.max_output_tokens = cap(out.max_output_tokens, options.maxTokens);
  return out;
}

/**
 * An SGLang native `/generate` request made greedy with logprobs: `sampling_params` with
 * `temperature: 0`, `top_p: 1`, `top_k: -1`, penalties neutral, `max_new_tokens` capped, one
 * sample; `return_logprob` with `top_logprobs_num` and the tokens' text; `stream: false`.
 */
function rewriteGenerate(body: Readonly<Record<string, unknown>>, options: RewriteOptions): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body };
  const sp = body.sampling_params !== null && typeof body.sampling_params === 'object' ? body.sampling_params : {};
  const params: Record<string, unknown> = { ...(sp as Record<string, unknown>) };
  params.temperature = 0;
  params.top_p = 1;
  params.top_k = -1;
  params.min_p = 0;
  params.n = 1;
  params.presence_penalty = 0;
  params.frequency_penalty = 0;
  params.repetition_penalty = 1;
  params.max_new_tokens = cap(params.max_new_tokens, options.maxTokens);
  out.sampling_params = params;
  out.return_logprob = true;
  out.top_logprobs_num = Math.max(1, Math.floor(options.topLogprobs));
  out.return_text_in_logprobs = true;
  out.stream = false;
  return out;
}

/**
 * What the engine profiles score for a mirrored copy: chat and completions as they are; a
 * Responses request as the chat messages it stands for (`instructions` as the system message,
 * then its input items); a `/generate` request as a completions prompt (`text`, or `input_ids`).
 */
export function scoringSource(
  kind: RequestKind,
  body: Readonly<Record<string, unknown>>,
): { kind: 'chat' | 'completions'; body: Readonly<Record<string, unknown>> } {
  if (kind === 'chat' || kind === 'completions') return { kind, body };
  if (kind === 'generate') {
    const prompt = body.input_ids ?? body.text;
    return { kind: 'completions', body: { ...(typeof body.model === 'string' ? { model: body.model } : {}), prompt } };
  }
  return {
    kind: 'chat',
    body: { ...(typeof body.model === 'string' ? { model: body.model } : {}), messages: responsesMessages(body) },
  };
}

/** A Responses request's `instructions` and `input` as chat messages. */
export function responsesMessages(body: Readonly<Record<string, unknown>>): Array<{ role: string; content: string }> {
  const out: Array<{ role: string; content: string }> = [];
  if (typeof body.instructions === 'string' && body.instructions !== '')
    out.push({ role: 'system', content: body.instructions });
  const input = body.input;
  if (typeof input === 'string') out.push({ role: 'user', content: input });
  else if (Array.isArray(input))
    for (const item of input) {
      if (item === null || typeof item !== 'object') continue;
      const it = item as { type?: unknown; role?: unknown; content?: unknown };
      if (it.type !== undefined && it.type !== 'message') continue;
      if (typeof it.role !== 'string') continue;
      out.push({ role: it.role === 'developer' ? 'system' : it.role, content: textOf(it.content) });
    }
  return out;
}

/** A message's content as text: a string, or the text of its `input_text` / `output_text` / `text` parts. */
function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((p) =>
      p !== null && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string'
        ? (p as { text: string }).text
        : '',
    )
    .join('');
}

/**
 * A Responses copy as a chat completions copy (for an engine that returns no logprobs on the
 * Responses route): its messages, `max_tokens` from `max_output_tokens`, then made greedy as chat is.
 */
export function responsesAsChat(
  body: Readonly<Record<string, unknown>>,
  options: RewriteOptions,
): Record<string, unknown> {
  const chat: Record<string, unknown> = {
    ...(typeof body.model === 'string' ? { model: body.model } : {}),
    messages: responsesMessages(body),
    max_tokens: body.max_output_tokens,
  };
  return rewriteForMirror('chat', chat, options);
}

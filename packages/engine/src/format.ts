/**
 * The OpenAI wire shapes, written as JSON text with the fields in the order of the recorded
 * OpenAI bodies (test/fixtures). Written by hand rather than with JSON.stringify of objects
 * because a completions `top_logprobs` dict must list the chosen token first, and JavaScript
 * objects put integer-like keys ("1", "42") first whatever the insertion order.
 */
import type { FinishReason, TokenStep, TopEntry } from './generate.js';
import type { EngineModel } from './model.js';

/** Identity fields shared by every chunk of one response. */
export interface ResponseMeta {
  readonly id: string;
  readonly created: number;
  readonly model: string;
  readonly fingerprint: string;
}

/** Token counts. */
export interface Usage {
  readonly promptTokens: number;
  readonly completionTokens: number;
  /** `prompt_tokens_details` as JSON (SGLang's cache report), or absent: no such field. */
  readonly details?: string | undefined;
}

function detailsJson(u: Usage): string {
  return u.details === undefined ? '' : `,"prompt_tokens_details":${u.details}`;
}

/** A logprob as JSON: -Infinity becomes OpenAI's -9999.0 sentinel, NaN (or none) null. */
export function lpJson(x: number | null): string {
  if (x === null || Number.isNaN(x)) return 'null';
  if (x === -Infinity || x < -9999) return '-9999.0';
  return String(x);
}

/** How tokens are named in logprobs: their text (JSON string literal) and bytes (JSON array or null). */
export interface TokenRender {
  text(id: number): string;
  bytesOf(id: number): string;
}

/**
 * vLLM's `return_tokens_as_token_ids`: every token is `"token_id:N"` (so tokens that are not
 * JSON-encodable can be identified), its bytes those of that string.
 */
export const TOKEN_ID_RENDER: TokenRender = {
  text: (id) => `"token_id:${id}"`,
  bytesOf: (id) => `[${Array.from(Buffer.from(`token_id:${id}`)).join(',')}]`,
};

/** Token text and bytes as JSON, cached per id (the same tokens recur on every response). */
export class TokenJson implements TokenRender {
  private readonly texts = new Map<number, string>();
  private readonly bytes = new Map<number, string>();
  constructor(private readonly model: EngineModel) {}

  /** The token's text, as a JSON string literal. */
  text(id: number): string {
    let s = this.texts.get(id);
    if (s === undefined) {
      s = JSON.stringify(this.model.tokenText(id));
      this.texts.set(id, s);
    }
    return s;
  }

  /** The token's raw bytes as a JSON array; null for the end-of-sequence token (as OpenAI's `<|end|>`). */
  bytesOf(id: number): string {
    let s = this.bytes.get(id);
    if (s === undefined) {
      s = id === this.model.eosToken ? 'null' : `[${Array.prototype.join.call(this.model.tokenBytes(id), ',')}]`;
      this.bytes.set(id, s);
    }
    return s;
  }
}

// ---------------------------------------------------------------------------------------------
// /v1/completions

/** A row of completions logprobs: a generated token, or an echoed prompt token (logprob null for the first). */
export interface CompletionRow {
  readonly id: number;
  readonly logprob: number | null;
  readonly top: readonly TopEntry[] | null;
  /** text_offset, counted from the start of the prompt text as OpenAI does. */
  readonly offset: number;
}

function topDict(t: TokenRender, chosen: number, logprob: number | null, top: readonly TopEntry[]): string {
  // The chosen token first, then the top entries; a key seen before (same id, or two ids with
  // the same text) is not repeated, as in a Python dict.
  const keys = new Set<string>();
  const parts: string[] = [];
  const add = (key: string, lp: number | null): void => {
    if (keys.has(key)) return;
    keys.add(key);
    parts.push(`${key}:${lpJson(lp)}`);
  };
  add(t.text(chosen), logprob);
  for (const e of top) add(t.text(e.id), e.logprob);
  return `{${parts.join(',')}}`;
}

/** The completions `logprobs` object for some rows. */
export function completionLogprobs(t: TokenRender, rows: readonly CompletionRow[]): string {
  const tokens = rows.map((r) => t.text(r.id)).join(',');
  const lps = rows.map((r) => lpJson(r.logprob)).join(',');
  const tops = rows.map((r) => (r.top === null ? 'null' : topDict(t, r.id, r.logprob, r.top))).join(',');
  const offsets = rows.map((r) => String(r.offset)).join(',');
  return `{"tokens":[${tokens}],"token_logprobs":[${lps}],"top_logprobs":[${tops}],"text_offset":[${offsets}]}`;
}

/** Completions rows for generated steps; `base` is the length of the text before them. */
export function completionRows(steps: readonly TokenStep[], base: number): CompletionRow[] {
  return steps.map((s) => ({ id: s.id, logprob: s.logprob, top: s.top ?? [], offset: base + s.offset }));
}

function usageJson(u: Usage): string {
  return `{"prompt_tokens":${u.promptTokens},"completion_tokens":${u.completionTokens},"total_tokens":${u.promptTokens + u.completionTokens}${detailsJson(u)}}`;
}

function finishJson(f: FinishReason | null): string {
  return f === null ? 'null' : `"${f}"`;
}

/** A non-streamed completions body. `logprobs` is JSON (from `completionLogprobs`) or null. */
export function completionBody(
  m: ResponseMeta,
  text: string,
  logprobs: string | null,
  finish: FinishReason,
  usage: Usage,
): string {
  return (
    `{"id":${JSON.stringify(m.id)},"object":"text_completion","created":${m.created},"model":${JSON.stringify(m.model)},` +
    `"choices":[{"text":${JSON.stringify(text)},"index":0,"logprobs":${logprobs ?? 'null'},"finish_reason":${finishJson(finish)}}],` +
    `"usage":${usageJson(usage)}}`
  );
}

/** A streamed completions chunk (the field order of the recorded OpenAI stream: `model` last). */
export function completionChunk(
  m: ResponseMeta,
  text: string,
  logprobs: string | null,
  finish: FinishReason | null,
): string {
  return (
    `{"id":${JSON.stringify(m.id)},"object":"text_completion","created":${m.created},` +
    `"choices":[{"text":${JSON.stringify(text)},"index":0,"logprobs":${logprobs ?? 'null'},"finish_reason":${finishJson(finish)}}],` +
    `"model":${JSON.stringify(m.model)}}`
  );
}

/** The completions logprobs of the trailing chunk: empty arrays. */
export const EMPTY_COMPLETION_LOGPROBS = '{"tokens":[],"token_logprobs":[],"top_logprobs":[],"text_offset":[]}';

/** The streamed completions usage chunk (`include_usage`). */
export function completionUsageChunk(m: ResponseMeta, usage: Usage): string {
  return `{"id":${JSON.stringify(m.id)},"object":"text_completion","created":${m.created},"choices":[],"model":${JSON.stringify(m.model)},"usage":${usageJson(usage)}}`;
}

// ---------------------------------------------------------------------------------------------
// /v1/chat/completions

/** One chat `logprobs.content` item with up to `n` top entries. */
export function chatLogprobItem(t: TokenRender, s: TokenStep, n: number): string {
  const top = (s.top ?? [])
    .slice(0, n)
    .map((e) => `{"token":${t.text(e.id)},"logprob":${lpJson(e.logprob)},"bytes":${t.bytesOf(e.id)}}`);
  return `{"token":${t.text(s.id)},"logprob":${lpJson(s.logprob)},"bytes":${t.bytesOf(s.id)},"top_logprobs":[${top.join(',')}]}`;
}

/** The chat `logprobs` object for some items (JSON from `chatLogprobItem`); vLLM's has no `refusal`. */
export function chatLogprobs(items: readonly string[], refusal = true): string {
  return refusal ? `{"content":[${items.join(',')}],"refusal":null}` : `{"content":[${items.join(',')}]}`;
}

/** A non-streamed chat body, in the field order of OpenAI's documented example. */
export function chatBody(
  m: ResponseMeta,
  content: string,
  logprobs: string | null,
  finish: FinishReason,
  usage: Usage,
): string {
  return (
    `{"id":${JSON.stringify(m.id)},"object":"chat.completion","created":${m.created},"model":${JSON.stringify(m.model)},` +
    `"choices":[{"index":0,"message":{"role":"assistant","content":${JSON.stringify(content)}},"logprobs":${logprobs ?? 'null'},"finish_reason":${finishJson(finish)}}],` +
    `"usage":{"prompt_tokens":${usage.promptTokens},"completion_tokens":${usage.completionTokens},"total_tokens":${usage.promptTokens + usage.completionTokens}${detailsJson(usage)},` +
    `"completion_tokens_details":{"reasoning_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},` +
    `"system_fingerprint":${JSON.stringify(m.fingerprint)}}`
  );
}

function chatChunkHead(m: ResponseMeta): string {
  return `{"id":${JSON.stringify(m.id)},"object":"chat.completion.chunk","created":${m.created},"model":${JSON.stringify(m.model)},"system_fingerprint":${JSON.stringify(m.fingerprint)}`;
}

/** The first chat chunk: the assistant role, empty content. */
export function chatFirstChunk(m: ResponseMeta, withLogprobs: boolean, refusal = true): string {
  const lp = withLogprobs ? chatLogprobs([], refusal) : 'null';
  return `${chatChunkHead(m)},"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":${lp},"finish_reason":null}]}`;
}

/** A chat chunk carrying one token's text (and its logprobs JSON, or null). */
export function chatTokenChunk(m: ResponseMeta, text: string, logprobs: string | null): string {
  return `${chatChunkHead(m)},"choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"logprobs":${logprobs ?? 'null'},"finish_reason":null}]}`;
}

/** The chat chunk that ends the choice: empty delta, finish_reason. */
export function chatFinishChunk(m: ResponseMeta, finish: FinishReason): string {
  return `${chatChunkHead(m)},"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":${finishJson(finish)}}]}`;
}

/** The streamed chat usage chunk (`include_usage`): no choices. */
export function chatUsageChunk(m: ResponseMeta, usage: Usage): string {
  return (
    `${chatChunkHead(m)},"choices":[],"usage":{"prompt_tokens":${usage.promptTokens},"completion_tokens":${usage.completionTokens},` +
    `"total_tokens":${usage.promptTokens + usage.completionTokens}${detailsJson(usage)},"completion_tokens_details":{"reasoning_tokens":0}}}`
  );
}

/**
 * Parsing and validation of `/v1/completions` and `/v1/chat/completions` request bodies into the
 * few fields the engine acts on. Unknown fields are ignored, as OpenAI-compatible servers do;
 * known fields of the wrong type or range are a 400 naming the field.
 */
import { badRequest } from './errors.js';

/** The most top entries a request may ask for per position (OpenAI's `top_logprobs` maximum). */
export const MAX_TOP_LOGPROBS = 20;
/** Completions default (OpenAI's documented default). */
export const DEFAULT_COMPLETION_MAX_TOKENS = 16;
/** Chat has no documented default; this keeps a client that sets none from running for long. */
export const DEFAULT_CHAT_MAX_TOKENS = 256;

/** How to choose tokens and when to stop. */
export interface SamplingParams {
  readonly maxTokens: number;
  /** 0 = greedy (argmax). */
  readonly temperature: number;
  readonly topP: number;
  /** 0 = off. */
  readonly topK: number;
  /** Seed of the sampling RNG, or null for one derived from the request. */
  readonly seed: number | null;
  /** Stop strings, non-empty. */
  readonly stop: readonly string[];
  readonly stream: boolean;
  readonly includeUsage: boolean;
}

/** A completions prompt: text, or token ids. */
export type PromptInput = { readonly text: string } | { readonly ids: readonly number[] };

/** A validated `/v1/completions` request. */
export interface CompletionRequest extends SamplingParams {
  readonly prompt: PromptInput;
  readonly echo: boolean;
  /** Top entries per position (0..20), or null when logprobs were not asked for. */
  readonly logprobs: number | null;
}

/** One chat message with its content flattened to text. */
export interface ChatMessage {
  readonly role: string;
  readonly content: string;
}

/** A validated `/v1/chat/completions` request. */
export interface ChatRequest extends SamplingParams {
  readonly messages: readonly ChatMessage[];
  readonly logprobs: boolean;
  readonly topLogprobs: number;
}

/** A parsed JSON request body. */
export type Body = Record<string, unknown>;

/** Parses a request body that must be a JSON object. */
export function parseJsonBody(raw: string): Body {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (err) {
    throw badRequest(`the request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw badRequest('the request body must be a JSON object');
  }
  return value as Body;
}

/** Bounds of a number field. */
export interface NumberRule {
  min?: number;
  max?: number;
  integer?: boolean;
}

/** A number field, or undefined when absent or null. */
export function num(body: Body, name: string, rule: NumberRule = {}): number | undefined {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw badRequest(`'${name}' must be a number`, name);
  if (rule.integer && !Number.isSafeInteger(v)) throw badRequest(`'${name}' must be an integer`, name);
  if (rule.min !== undefined && v < rule.min) throw badRequest(`'${name}' must be ≥ ${rule.min}, got ${v}`, name);
  if (rule.max !== undefined && v > rule.max) throw badRequest(`'${name}' must be ≤ ${rule.max}, got ${v}`, name);
  return v;
}

/** A boolean field, or undefined when absent or null. */
export function bool(body: Body, name: string): boolean | undefined {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw badRequest(`'${name}' must be a boolean`, name);
  return v;
}

/** `stop`: a string or strings, empty ones dropped. */
export function stopStrings(body: Body): string[] {
  const v = body.stop;
  if (v === undefined || v === null) return [];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || !list.every((s): s is string => typeof s === 'string')) {
    throw badRequest(`'stop' must be a string or an array of strings`, 'stop');
  }
  return list.filter((s) => s !== '');
}

function sampling(body: Body, maxTokens: number): SamplingParams {
  const n = num(body, 'n', { integer: true });
  if (n !== undefined && n !== 1) throw badRequest(`only n = 1 is supported, got ${n}`, 'n');
  const topK = num(body, 'top_k', { integer: true, min: -1 }) ?? 0;
  const stream = bool(body, 'stream') ?? false;
  const opts = body.stream_options;
  let includeUsage = false;
  if (opts !== undefined && opts !== null) {
    if (!stream) throw badRequest(`'stream_options' is only allowed when 'stream' is true`, 'stream_options');
    if (typeof opts !== 'object' || Array.isArray(opts))
      throw badRequest(`'stream_options' must be an object`, 'stream_options');
    const iu = (opts as Body).include_usage;
    if (iu !== undefined && iu !== null && typeof iu !== 'boolean') {
      throw badRequest(`'stream_options.include_usage' must be a boolean`, 'stream_options.include_usage');
    }
    includeUsage = iu === true;
  }
  return {
    maxTokens,
    temperature: num(body, 'temperature', { min: 0, max: 2 }) ?? 1,
    topP: num(body, 'top_p', { min: 0, max: 1 }) ?? 1,
    topK: topK < 0 ? 0 : topK,
    seed: num(body, 'seed', { integer: true }) ?? null,
    stop: stopStrings(body),
    stream,
    includeUsage,
  };
}

function tokenIds(v: unknown[], vocabSize: number): number[] {
  for (const id of v) {
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= vocabSize) {
      throw badRequest(`'prompt' token ids must be integers in [0, ${vocabSize - 1}]`, 'prompt');
    }
  }
  return v as number[];
}

function prompt(body: Body, vocabSize: number): PromptInput {
  const v = body.prompt;
  if (typeof v === 'string') return { text: v };
  if (Array.isArray(v) && v.length > 0) {
    // A batch of prompts: this engine answers the first (n = 1, one choice).
    const first: unknown = v[0];
    if (typeof first === 'string') {
      if (!v.every((p) => typeof p === 'string')) throw badRequest(`'prompt' mixes strings and other values`, 'prompt');
      return { text: first };
    }
    if (typeof first === 'number') return { ids: tokenIds(v, vocabSize) };
    if (Array.isArray(first) && first.length > 0) return { ids: tokenIds(first, vocabSize) };
  }
  throw badRequest(`'prompt' must be a string, an array of strings, or an array of token ids`, 'prompt');
}

/** Validates a `/v1/completions` body. */
export function parseCompletionRequest(body: Body, vocabSize: number): CompletionRequest {
  const logprobs = num(body, 'logprobs', { integer: true, min: 0, max: MAX_TOP_LOGPROBS }) ?? null;
  const maxTokens = num(body, 'max_tokens', { integer: true, min: 0 }) ?? DEFAULT_COMPLETION_MAX_TOKENS;
  return { ...sampling(body, maxTokens), prompt: prompt(body, vocabSize), echo: bool(body, 'echo') ?? false, logprobs };
}

function messageContent(v: unknown, i: number): string {
  if (v === undefined || v === null) return '';
  if (typeof v === 'string') return v;
  if (Array.isArray(v)) {
    return v
      .map((part: unknown) => {
        const p = part as Body | null;
        if (typeof p === 'object' && p !== null && p.type === 'text' && typeof p.text === 'string') return p.text;
        throw badRequest(`messages[${i}].content: only text parts are supported`, `messages[${i}].content`);
      })
      .join('');
  }
  throw badRequest(`messages[${i}].content must be a string or an array of text parts`, `messages[${i}].content`);
}

/** `messages`: a non-empty array of `{role, content}` with text content. */
export function parseMessages(body: Body): ChatMessage[] {
  const raw = body.messages;
  if (!Array.isArray(raw) || raw.length === 0) throw badRequest(`'messages' must be a non-empty array`, 'messages');
  return raw.map((m: unknown, i): ChatMessage => {
    const msg = m as Body | null;
    if (typeof msg !== 'object' || msg === null || typeof msg.role !== 'string') {
      throw badRequest(`messages[${i}] must be an object with a string 'role'`, `messages[${i}]`);
    }
    return { role: msg.role, content: messageContent(msg.content, i) };
  });
}

/** Validates a `/v1/chat/completions` body. */
export function parseChatRequest(body: Body): ChatRequest {
  const messages = parseMessages(body);
  const logprobs = bool(body, 'logprobs') ?? false;
  const topLogprobs = num(body, 'top_logprobs', { integer: true, min: 0, max: MAX_TOP_LOGPROBS }) ?? 0;
  if (topLogprobs > 0 && !logprobs)
    throw badRequest(`'logprobs' must be true when 'top_logprobs' is used`, 'top_logprobs');
  const maxTokens =
    num(body, 'max_completion_tokens', { integer: true, min: 1 }) ??
    num(body, 'max_tokens', { integer: true, min: 1 }) ??
    DEFAULT_CHAT_MAX_TOKENS;
  return { ...sampling(body, maxTokens), messages, logprobs, topLogprobs };
}

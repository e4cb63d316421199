/**
 * What a route needs from the server for one request, and small response helpers shared by the
 * routes.
 */
import type { ServerResponse } from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';
import { textCells, type ApiProfile } from './api/profile.js';
import { EngineHttpError, errorEnvelope } from './errors.js';
import type { ChatTemplateName } from './chat-template.js';
import type { ServerFaults } from './faults.js';
import type { ResponseMeta, TokenJson } from './format.js';
import type { CacheUse, EngineModel, ModelSequence } from './model.js';
import type { RequestQueue } from './queue.js';
import { mulberry32Rng } from './rng.js';
import type { SamplingParams } from './request.js';
import type { Rng } from './sampling.js';

/** One route of the server. */
export interface Route {
  readonly methods: readonly string[];
  /** A generation: admitted through the queue, with the server-level faults. */
  readonly generation?: boolean;
  /** Response ids start with this (`cmpl`, `chatcmpl`). */
  readonly idPrefix?: string;
  /** SGLang's `@auth_level(AuthLevel.ADMIN_OPTIONAL)`: with an admin key set, only it opens the route. */
  readonly adminOptional?: boolean;
  serve(ctx: RouteContext): Promise<void> | void;
}

/** Server-wide settings a route may read. */
export interface ServerSettings {
  /** The one-slot prefix cache is on (requests are then served one at a time). */
  readonly prefixCache: boolean;
  /** vLLM's `VLLM_SERVER_DEV_MODE=1`: `/reset_prefix_cache` exists. */
  readonly devMode: boolean;
  /** llama-server's `--slot-save-path`: the `/slots` actions exist. */
  readonly slotSavePath: string | null;
  /** vLLM's `--enable-prompt-tokens-details`: `usage.prompt_tokens_details.cached_tokens`. */
  readonly promptTokensDetails: boolean;
  /** The release played (null for the engines without a version endpoint). */
  readonly engineVersion: string | null;
  /** vLLM's `--max-logprobs` (-1: the vocabulary). */
  readonly maxLogprobs: number;
  /** vLLM's V2 model runner: prompt logprobs without top-k. */
  readonly v2ModelRunner: boolean;
  /** Batch-invariant kernels: no batch noise. */
  readonly batchInvariant: boolean;
  /** SGLang's `--enable-cache-report`. */
  readonly enableCacheReport: boolean;
  readonly apiKey: string | null;
  readonly adminApiKey: string | null;
  /** llama-server's `--chat-template NAME` (every API here): a built-in template, or null for the plain one. */
  readonly chatTemplate: ChatTemplateName | null;
  /** vLLM's `--logprobs-mode`: which quantity sample logprobs report. */
  readonly logprobsMode: LogprobsMode;
  /** vLLM's `VLLM_ENABLE_RESPONSES_API_STORE=1`: `/v1/responses` keeps responses (`store`), else `store` is ignored. */
  readonly responsesStore: boolean;
  /** The stored responses and the messages that led to each, by response id. */
  readonly responses: Map<string, StoredResponse>;
  /** Generation admission: the flush routes look at it. */
  readonly queue: RequestQueue;
  readonly host: string;
  port: number;
}

/** vLLM's `LogprobsMode` (vllm/config/model.py). */
export const LOGPROBS_MODES = ['raw_logprobs', 'raw_logits', 'processed_logprobs', 'processed_logits'] as const;
export type LogprobsMode = (typeof LOGPROBS_MODES)[number];

/** A `/v1/responses` answer kept for `previous_response_id` and `GET /v1/responses/{id}`. */
export interface StoredResponse {
  /** The body as sent (JSON). */
  readonly body: string;
  /** The input messages (instructions and history included), then the answer's text. */
  readonly messages: readonly { readonly role: string; readonly content: string }[];
  readonly output: string | null;
}

/** Per-request context handed to a route. */
export interface RouteContext {
  readonly model: EngineModel;
  readonly res: ServerResponse;
  /** Aborted when the client goes away (or the server closes). */
  readonly signal: AbortSignal;
  /** Varies per request: the simulated model's noise source. */
  readonly requestSeed: number;
  readonly faults: ServerFaults;
  readonly tokens: TokenJson;
  readonly meta: ResponseMeta;
  /** Largest prompt + completion length, in tokens. */
  readonly maxContext: number;
  /** Pause after every generated token, in ms (0: none). */
  readonly tokenDelayMs: number;
  /** The engine the server pretends to be. */
  readonly api: ApiProfile;
  readonly server: ServerSettings;
  readonly method: string;
  readonly path: string;
  readonly query: URLSearchParams;
  /** The request body as received. */
  readonly raw: string;
}

/** Sends a complete JSON response (with a content-length, so keep-alive needs no chunking). */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: string,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

/** Sends an OpenAI error envelope. */
export function sendError(res: ServerResponse, err: EngineHttpError): void {
  sendJson(res, err.status, errorEnvelope(err));
}

/** Waits `ms`, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return delay(ms, undefined, { signal }).then(() => undefined);
}

/** The sampling RNG: from the request's `seed` when given (reproducible), else from the request. */
export function samplingRng(params: Pick<SamplingParams, 'seed'>, requestSeed: number): Rng {
  return mulberry32Rng(params.seed !== null ? params.seed : requestSeed ^ 0x2f6b3c1d);
}

/** How a sequence starts, beyond the prompt (see `StartOptions`). */
export interface SequenceStart {
  readonly addBos?: boolean;
  readonly cache?: CacheUse;
  readonly promptLogprobsFrom?: number;
}

/** The prefix-cache use of an ordinary request: read and keep, when the server's cache is on. */
export function defaultCache(ctx: RouteContext): CacheUse | undefined {
  return ctx.server.prefixCache ? { read: true, write: true } : undefined;
}

/**
 * A completions prompt as the model's tokens: as the engine reads it (`api.verbatimIds`: text
 * with BOS, ids as given, the model adds nothing) or as this engine always did (the model
 * prepends BOS to text and ids alike).
 */
export function promptCells(
  ctx: RouteContext,
  prompt: { readonly text: string } | { readonly ids: readonly number[] },
): { cells: number[]; addBos: boolean } {
  if (!ctx.api.verbatimIds)
    return { cells: 'text' in prompt ? ctx.model.tokenize(prompt.text) : [...prompt.ids], addBos: true };
  return { cells: 'text' in prompt ? textCells(ctx.model, prompt.text) : [...prompt.ids], addBos: false };
}

/**
 * Starts a sequence for `prompt`, limiting `maxTokens` to what the context leaves. A prompt that
 * fills the context is a 400, as on vLLM.
 */
export async function startSequence(
  ctx: RouteContext,
  prompt: readonly number[],
  maxTokens: number,
  start: SequenceStart = { cache: defaultCache(ctx) },
): Promise<{ seq: ModelSequence; maxTokens: number }> {
  if (prompt.length >= ctx.maxContext) {
    throw new EngineHttpError(
      400,
      `This model's maximum context length is ${ctx.maxContext} tokens; the prompt has ${prompt.length}.`,
      'prompt',
      'invalid_request_error',
      'context_length_exceeded',
    );
  }
  // Batch variance: the requests in flight share the engine's batch, unless its kernels are batch-invariant.
  const coResident = ctx.server.batchInvariant ? undefined : () => ctx.server.queue.inFlight;
  const seq = await ctx.model.start(prompt, {
    requestSeed: ctx.requestSeed,
    ...start,
    ...(coResident ? { coResident } : {}),
  });
  return { seq, maxTokens: Math.min(maxTokens, ctx.maxContext - prompt.length) };
}

/**
 * SGLang's `usage.prompt_tokens_details` on its OpenAI routes (`usage_processor.py`
 * `_details_if_cached`): `{cached_tokens}` only with `--enable-cache-report` and only when above
 * 0, else null. Other APIs: undefined (their usage has no such field here).
 */
export function cacheReport(ctx: RouteContext, seq: ModelSequence): string | undefined {
  if (ctx.api.api !== 'sglang') return undefined;
  const cached = seq.cacheState?.().reused ?? 0;
  return ctx.server.enableCacheReport && cached > 0 ? `{"cached_tokens":${cached}}` : 'null';
}

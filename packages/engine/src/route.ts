/**
 * What a generation route needs from the server for one request, and small response helpers
 * shared by the routes.
 */
import type { ServerResponse } from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';
import { EngineHttpError, errorEnvelope } from './errors.js';
import type { ServerFaults } from './faults.js';
import type { ResponseMeta, TokenJson } from './format.js';
import type { EngineModel, ModelSequence } from './model.js';
import { mulberry32Rng } from './rng.js';
import type { SamplingParams } from './request.js';
import type { Rng } from './sampling.js';

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
}

/** Sends a complete JSON response (with a content-length, so keep-alive needs no chunking). */
export function sendJson(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
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
export function samplingRng(params: SamplingParams, requestSeed: number): Rng {
  return mulberry32Rng(params.seed !== null ? params.seed : requestSeed ^ 0x2f6b3c1d);
}

/**
 * Starts a sequence for `prompt`, limiting `maxTokens` to what the context leaves. A prompt that
 * fills the context is a 400, as on vLLM.
 */
export async function startSequence(ctx: RouteContext, prompt: readonly number[], maxTokens: number): Promise<{ seq: ModelSequence; maxTokens: number }> {
  if (prompt.length >= ctx.maxContext) {
    throw new EngineHttpError(400, `This model's maximum context length is ${ctx.maxContext} tokens; the prompt has ${prompt.length}.`, 'prompt', 'invalid_request_error', 'context_length_exceeded');
  }
  const seq = await ctx.model.start(prompt, { requestSeed: ctx.requestSeed });
  return { seq, maxTokens: Math.min(maxTokens, ctx.maxContext - prompt.length) };
}

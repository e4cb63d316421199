/**
 * The options and the handle of the engine server (`startEngineServer`, src/openai-server.ts).
 */
import type { EventEmitter } from 'node:events';
import type { EngineApi } from './api/profile.js';
import type { ServerFaults } from './faults.js';
import type { EngineModel } from './model.js';
import type { RecordedRequest } from './recorder.js';

/** A pino-compatible logger subset. */
export interface EngineLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** Options of {@link startEngineServer}. */
export interface EngineServerOptions {
  readonly model: EngineModel;
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default 0 (any free port). */
  readonly port?: number;
  /** Server-level faults: parsed, or fault strings (`http500`, `slow:200`, …). Default none. */
  readonly faults?: ServerFaults | string | readonly string[];
  /**
   * Generations running at once; the rest wait in arrival order. Default 1; 0 or Infinity =
   * unlimited. Always 1 while the prefix cache is on, so its one slot is well defined.
   */
  readonly concurrency?: number;
  /**
   * The engine to pretend to be: its identity, native endpoints and shapes. Default `logprobe`:
   * OpenAI's shapes and nothing else.
   */
  readonly api?: EngineApi;
  /**
   * The one-slot prefix cache (llama-server `-np 1`): a request whose prompt shares a prefix
   * with the previous request's tokens reuses their state. Default: on for vllm, sglang and
   * llamacpp (as the real engines), off for logprobe and openai (every request cold).
   */
  readonly prefixCache?: boolean;
  /** vLLM's `VLLM_SERVER_DEV_MODE=1`: serve `POST /reset_prefix_cache`. Default false (404, as vLLM). */
  readonly devMode?: boolean;
  /** llama-server's `--slot-save-path`: serve `POST /slots/0?action=erase`. Default none (501, as llama-server). */
  readonly slotSavePath?: string;
  /** vLLM's `--enable-prompt-tokens-details`: report `usage.prompt_tokens_details.cached_tokens`. Default false. */
  readonly promptTokensDetails?: boolean;
  /**
   * The release the double plays (`GET /version` on vLLM, `version` in SGLang's `/server_info`);
   * behaviours that changed between releases follow it. Default: vLLM 0.11.0, SGLang 0.5.0.
   */
  readonly engineVersion?: string;
  /** vLLM's `--max-logprobs`: the most `logprobs`, `top_logprobs`, `prompt_logprobs` (-1: the vocabulary). Default 20. */
  readonly maxLogprobs?: number;
  /** vLLM's `VLLM_USE_V2_MODEL_RUNNER=1`: prompt logprobs carry the prompt token only, no top-k. Default false. */
  readonly v2ModelRunner?: boolean;
  /**
   * vLLM's `VLLM_BATCH_INVARIANT=1`, SGLang's `--enable-deterministic-inference`: a request's
   * logits do not depend on what runs beside it (the sim's `batchNoise` is off). Default false.
   */
  readonly batchInvariant?: boolean;
  /** SGLang's `--enable-cache-report`: `usage.prompt_tokens_details.cached_tokens` when above 0. Default false. */
  readonly enableCacheReport?: boolean;
  /** SGLang's `--api-key`: every route but /health*, /metrics needs `Authorization: Bearer KEY`. */
  readonly apiKey?: string;
  /** SGLang's `--admin-api-key`: the admin routes (`/flush_cache`) need it, and the plain key is refused there. */
  readonly adminApiKey?: string;
  /**
   * A generation request whose `model` the engine does not serve gets the engine's 404 (vLLM:
   * "The model `X` does not exist.", NotFoundError). Default: on when the model has adapters
   * (`EngineModel.adapters`), off otherwise (any name is the one model, as this double always did).
   * SGLang and llama-server never check it.
   */
  readonly strictModel?: boolean;
  /**
   * llama-server's `--chat-template NAME`: one of llama.cpp's built-in templates (`chatml`,
   * `llama2`, …; `CHAT_TEMPLATE_NAMES`) renders chat messages into the prompt, on every API.
   * Default: the engine's plain `role: content` template.
   */
  readonly chatTemplate?: string;
  /**
   * vLLM's `--logprobs-mode`: `raw_logprobs` (default), `raw_logits`, `processed_logprobs`
   * (after temperature, top-k, top-p), `processed_logits`: what sample logprobs report.
   */
  readonly logprobsMode?: string;
  /** vLLM's `VLLM_ENABLE_RESPONSES_API_STORE=1`: `/v1/responses` stores responses. Default false (`store` ignored). */
  readonly responsesStore?: boolean;
  /** Requests allowed to wait for a slot before new ones get a 503. Default 1024. */
  readonly maxQueue?: number;
  /** Largest prompt + completion, in tokens. Default 32768. */
  readonly maxContext?: number;
  /** Keep the last this many requests in `handle.requests`. Default 10,000. */
  readonly recordLimit?: number;
  /** Append one JSON line per request (method, path, headers, body, receivedAt) to this file. */
  readonly requestLog?: string;
  /** Base of the per-request seeds (noise differs per request). Default random, so two servers never share noise. */
  readonly requestSeedBase?: number;
  /** `system_fingerprint` in chat responses. Default `fp_logprobe`. */
  readonly systemFingerprint?: string;
  /** Pause after every generated token, in ms: a real engine's decode pace. Default 0. */
  readonly tokenDelayMs?: number;
  /** Largest accepted request body, in bytes. Default 32 MiB. */
  readonly bodyLimitBytes?: number;
  readonly log?: EngineLog;
}

/** Events of a running engine server. */
export interface EngineServerEvents {
  /** A request arrived (body complete). */
  request: [RecordedRequest];
  /** A client went away before its response was complete; generation stopped. */
  aborted: [{ method: string; path: string }];
}

/** A running engine server. */
export interface EngineServerHandle {
  /** `http://host:port`. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** The most recent requests (bounded), oldest first. */
  readonly requests: readonly RecordedRequest[];
  /** Responses cut short because the client went away. */
  readonly aborted: number;
  /** Generation requests answered completely (status 200, all bytes written). */
  readonly completed: number;
  readonly events: EventEmitter<EngineServerEvents>;
  /** The faults in force. */
  readonly faults: ServerFaults;
  /** The engine the server pretends to be. */
  readonly api: EngineApi;
  /** Whether the prefix cache is on. */
  readonly prefixCache: boolean;
  /** Changes the faults for requests that arrive from now on. */
  setFaults(faults: ServerFaults | string | readonly string[]): void;
  /** Stops accepting, aborts running generations, closes connections and the request log. */
  close(): Promise<void>;
}

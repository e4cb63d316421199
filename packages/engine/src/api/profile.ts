/**
 * What the engine pretends to be (`api`): the identity a client probes (`/v1/models` `owned_by`,
 * the `server` header, `/health`), how token-id prompts are read, and the error bodies — each as
 * the real engine sends it, as read in their source (vLLM, SGLang) and in llama-server b4748's
 * recorded responses.
 */
import { badRequest, EngineHttpError } from '../errors.js';
import type { EngineModel } from '../model.js';

/** The engines the server can pretend to be. */
export const ENGINE_APIS = ['logprobe', 'vllm', 'sglang', 'llamacpp', 'openai'] as const;
/** `logprobe` (the default: OpenAI's shapes), or one real engine's API. */
export type EngineApi = (typeof ENGINE_APIS)[number];

/** An error whose body is already the engine's own (FastAPI's `{"detail"}`, plain text, …). */
export class RawHttpError extends EngineHttpError {
  constructor(
    status: number,
    readonly body: string,
    readonly contentType = 'application/json',
  ) {
    super(status, body);
  }
}

/** The per-engine behaviour the server and the shared routes need. */
export interface ApiProfile {
  readonly api: EngineApi;
  /** `/v1/models` `owned_by`. */
  readonly ownedBy: string;
  /** The `server` response header, or null for none. */
  readonly serverHeader: string | null;
  /** Whether the prefix cache is on unless configured: the real engines all cache by default. */
  readonly prefixCacheDefault: boolean;
  /**
   * Token-id prompts are the exact tokens (vLLM, SGLang, llama-server); text prompts get BOS
   * from the tokenizer. False: the model prepends BOS to every prompt (this engine's historical
   * behaviour, kept for `logprobe` and `openai`).
   */
  readonly verbatimIds: boolean;
  /** The body for a path the engine does not serve. */
  notFound(method: string, path: string): EngineHttpError;
  /** The body for a known path with the wrong method. */
  wrongMethod(method: string, path: string): EngineHttpError;
  /** An error as the engine renders it on `path`. */
  errorBody(err: EngineHttpError, path: string): string;
  /** `GET /health`: status and body. */
  readonly health: { readonly body: string; readonly contentType: string };
}

function openaiEnvelope(err: EngineHttpError): string {
  return JSON.stringify({ error: { message: err.message, type: err.type, param: err.param, code: err.code } });
}

// vLLM names the error type after the HTTP status (`ErrorResponse{error: ErrorInfo{message,
// type, param, code: int}}`, engine/protocol.py): BadRequestError, NotFoundError, …
const VLLM_TYPES: Record<number, string> = {
  400: 'BadRequestError',
  404: 'NotFoundError',
  405: 'MethodNotAllowed',
  413: 'RequestEntityTooLarge',
  500: 'InternalServerError',
  501: 'NotImplementedError',
  503: 'ServiceUnavailableError',
};

// llama-server: format_error_response → {"error":{"code","message","type"}} (fixture
// v1_completions_echo_logprobs.json: {"error":{"code":500,"message":"Unsupported param: echo","type":"server_error"}}).
const LLAMA_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  404: 'not_found_error',
  500: 'server_error',
  501: 'not_supported_error',
  503: 'unavailable_error',
};

/** A generation route with the wrong method is a 405; any other path a 404, as this engine always answered. */
function openaiWrongMethod(method: string, path: string): EngineHttpError {
  return path === '/v1/completions' || path === '/v1/chat/completions'
    ? new EngineHttpError(405, `Method ${method} is not allowed on ${path}; use POST`)
    : new EngineHttpError(404, `Invalid URL (${method} ${path})`);
}

const fastApi404 = (): EngineHttpError => new RawHttpError(404, '{"detail":"Not Found"}');
const fastApi405 = (): EngineHttpError => new RawHttpError(405, '{"detail":"Method Not Allowed"}');

/** SGLang's native routes answer `{"error": {"message"}}` (http_server.py `_create_error_response`); its OpenAI routes a flat ErrorResponse. */
const SGLANG_NATIVE = new Set(['/generate', '/tokenize', '/detokenize', '/v1/tokenize', '/v1/detokenize']);

function raw(err: EngineHttpError): string | null {
  return err instanceof RawHttpError ? err.body : null;
}

const PROFILES: Record<EngineApi, ApiProfile> = {
  logprobe: {
    api: 'logprobe',
    ownedBy: 'logprobe',
    serverHeader: null,
    prefixCacheDefault: false,
    verbatimIds: false,
    notFound: (method, path) => new EngineHttpError(404, `Invalid URL (${method} ${path})`),
    wrongMethod: openaiWrongMethod,
    errorBody: (err) => raw(err) ?? openaiEnvelope(err),
    health: { body: '{"status":"ok"}', contentType: 'application/json' },
  },
  openai: {
    api: 'openai',
    // OpenAI's own models list says "system" (or "openai", "openai-internal").
    ownedBy: 'system',
    serverHeader: null,
    prefixCacheDefault: false,
    verbatimIds: false,
    notFound: (method, path) => new EngineHttpError(404, `Invalid URL (${method} ${path})`),
    wrongMethod: openaiWrongMethod,
    errorBody: (err) => raw(err) ?? openaiEnvelope(err),
    health: { body: '{"status":"ok"}', contentType: 'application/json' },
  },
  vllm: {
    api: 'vllm',
    ownedBy: 'vllm',
    // uvicorn's default header; vLLM does not override it (launcher.py) — the same as SGLang.
    serverHeader: 'uvicorn',
    prefixCacheDefault: true,
    verbatimIds: true,
    notFound: fastApi404,
    wrongMethod: fastApi405,
    errorBody: (err) =>
      raw(err) ??
      JSON.stringify({
        error: {
          message: err.message,
          type: VLLM_TYPES[err.status] ?? 'BadRequestError',
          param: err.param,
          code: err.status,
        },
      }),
    // vLLM's /health is an empty 200.
    health: { body: '', contentType: 'application/json' },
  },
  sglang: {
    api: 'sglang',
    ownedBy: 'sglang',
    serverHeader: 'uvicorn',
    prefixCacheDefault: true,
    verbatimIds: true,
    notFound: fastApi404,
    wrongMethod: fastApi405,
    errorBody: (err, path) =>
      raw(err) ??
      (SGLANG_NATIVE.has(path)
        ? JSON.stringify({ error: { message: err.message } })
        : JSON.stringify({
            object: 'error',
            message: err.message,
            type: VLLM_TYPES[err.status] ?? 'BadRequestError',
            param: err.param,
            code: err.status,
          })),
    health: { body: '', contentType: 'text/plain; charset=utf-8' },
  },
  llamacpp: {
    api: 'llamacpp',
    ownedBy: 'llamacpp',
    // svr->set_default_headers({{"Server", "llama.cpp"}})
    serverHeader: 'llama.cpp',
    prefixCacheDefault: true,
    verbatimIds: true,
    // cpp-httplib answers an unregistered method+path with its 404 handler.
    notFound: () => new EngineHttpError(404, 'File Not Found'),
    wrongMethod: () => new EngineHttpError(404, 'File Not Found'),
    errorBody: (err) =>
      raw(err) ??
      JSON.stringify({
        error: { code: err.status, message: err.message, type: LLAMA_TYPES[err.status] ?? 'server_error' },
      }),
    health: { body: '{"status":"ok"}', contentType: 'application/json; charset=utf-8' },
  },
};

/** The profile of `api`. */
export function apiProfile(api: EngineApi): ApiProfile {
  const p = PROFILES[api];
  if (!p) throw new RangeError(`unknown api "${String(api)}": expected one of ${ENGINE_APIS.join(', ')}`);
  return p;
}

/**
 * The tokens of a prompt as the engine reads it: text through the tokenizer with BOS first
 * (`add_special_tokens` / `add_special` default true), token ids verbatim.
 */
export function textCells(model: EngineModel, text: string, addSpecial = true, parseSpecial = false): number[] {
  const ids = parseSpecial && model.tokenizeSpecial ? model.tokenizeSpecial(text) : model.tokenize(text);
  const bos = model.bosToken ?? null;
  return addSpecial && bos !== null ? [bos, ...ids] : ids;
}

/**
 * The text of tokens with special tokens spelled out (`<|startoftext|>`), as `tokenizer.decode`
 * and llama.cpp's `tokens_to_str` render them; other tokens' bytes are decoded together.
 */
export function decodeWithSpecials(model: EngineModel, ids: readonly number[]): string {
  const specials = new Set([model.bosToken, model.eosToken].filter((x): x is number => typeof x === 'number'));
  let out = '';
  let run: number[] = [];
  const flush = (): void => {
    if (run.length > 0) out += model.detokenize(run);
    run = [];
  };
  for (const id of ids) {
    if (specials.has(id)) {
      flush();
      out += model.tokenText(id);
    } else {
      run.push(id);
    }
  }
  flush();
  return out;
}

/** A field holding token ids of the vocabulary. */
export function tokenIdList(body: Record<string, unknown>, field: string, vocabSize: number): number[] {
  const v = body[field];
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < vocabSize)) {
    throw badRequest(`'${field}' must be an array of token ids in [0, ${vocabSize - 1}]`, field);
  }
  return v as number[];
}

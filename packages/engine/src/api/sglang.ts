/**
 * The SGLang profile's routes (python/sglang/srt/entrypoints/http_server.py): native `/generate`, `/tokenize` and
 * `/v1/tokenize`, `/detokenize` and `/v1/detokenize`, the info endpoints under their old and new
 * names, and `/flush_cache` (GET or POST; plain text; 400 while a request runs or waits).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { badRequest, type EngineHttpError } from '../errors.js';
import { applyChatTemplate } from '../chat-template.js';
import { bool, parseJsonBody, parseMessages, type Body } from '../request.js';
import { promptCells, sendJson, type Route, type RouteContext, type ServerSettings } from '../route.js';
import { decodeWithSpecials, RawHttpError, textCells } from './profile.js';
import { versionAtLeast } from './version.js';
import { serveGenerate } from './sglang-generate.js';

/** The SGLang release played by default, reported in `/server_info` (`version`); `engineVersion` picks another. */
export const SGLANG_VERSION = '0.5.0';

/** http_server.py `flush_cache`'s text, for success (200) and refusal (400) alike. */
const FLUSH_TEXT =
  'Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n';

/**
 * The first SGLang release whose `/tokenize` takes `messages` (`entrypoints/openai/protocol.py`
 * `TokenizeRequest`, read @004c82e0; the 0.5.3rc2 read takes text only). Not dated from a tag: 0.5.4 is
 * the pick, set `engineVersion` to play either side.
 */
export const SGLANG_TOKENIZE_MESSAGES_FROM = '0.5.4';

/**
 * `{prompt: str | [str], add_special_tokens=true}` → `{tokens, count, max_model_len}` (lists for a
 * list of prompts); from {@link SGLANG_TOKENIZE_MESSAGES_FROM} also `{messages,
 * add_generation_prompt=true, continue_final_message=false}` through the chat template, the ids
 * the chat route feeds the model.
 */
function tokenize(ctx: RouteContext): void {
  const body = parseJsonBody(ctx.raw);
  const add = bool(body, 'add_special_tokens') ?? true;
  const one = (p: unknown): number[] => {
    if (typeof p !== 'string') throw badRequest("'prompt' must be a string or a list of strings", 'prompt');
    return textCells(ctx.model, p, add);
  };
  const reply = (tokens: number[]): void =>
    sendJson(ctx.res, 200, JSON.stringify({ tokens, count: tokens.length, max_model_len: ctx.maxContext }));
  if (
    body.messages !== undefined &&
    body.messages !== null &&
    versionAtLeast(ctx.server.engineVersion ?? SGLANG_VERSION, SGLANG_TOKENIZE_MESSAGES_FROM)
  ) {
    if (body.prompt !== undefined && body.prompt !== null)
      throw badRequest('Either prompt or messages should be provided, not both.');
    const addGenerationPrompt = bool(body, 'add_generation_prompt') ?? true;
    const continueFinalMessage = bool(body, 'continue_final_message') ?? false;
    reply(
      promptCells(ctx, {
        text: applyChatTemplate(
          parseMessages(body),
          { addGenerationPrompt, continueFinalMessage },
          ctx.server.chatTemplate,
        ),
      }).cells,
    );
    return;
  }
  // max_model_len is the tokenizer's model_max_length here, not the served context (serving_tokenize.py); here the two are the same.
  if (Array.isArray(body.prompt)) {
    const all = body.prompt.map(one);
    sendJson(
      ctx.res,
      200,
      JSON.stringify({ tokens: all, count: all.map((t) => t.length), max_model_len: ctx.maxContext }),
    );
  } else {
    reply(one(body.prompt));
  }
}

function ids(v: unknown, vocabSize: number): number[] {
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < vocabSize)) {
    throw badRequest(`'tokens' must be token ids in [0, ${vocabSize - 1}] or lists of them`, 'tokens');
  }
  return v as number[];
}

/** `{tokens: [int] | [[int]], skip_special_tokens=true}` → `{text}`. */
function detokenize(ctx: RouteContext): void {
  const body = parseJsonBody(ctx.raw);
  const skip = bool(body, 'skip_special_tokens') ?? true;
  const decode = (t: number[]): string => (skip ? ctx.model.detokenize(t) : decodeWithSpecials(ctx.model, t));
  const tokens = body.tokens;
  if (Array.isArray(tokens) && tokens.length > 0 && Array.isArray(tokens[0])) {
    sendJson(ctx.res, 200, JSON.stringify({ text: tokens.map((t) => decode(ids(t, ctx.model.vocabSize))) }));
  } else {
    sendJson(ctx.res, 200, JSON.stringify({ text: decode(ids(tokens, ctx.model.vocabSize)) }));
  }
}

function modelInfo(ctx: RouteContext): void {
  const id = ctx.model.id;
  sendJson(
    ctx.res,
    200,
    JSON.stringify({
      model_path: id,
      tokenizer_path: id,
      is_generation: true,
      preferred_sampling_params: null,
      weight_version: 'default',
      has_image_understanding: false,
      has_audio_understanding: false,
      model_type: 'llama',
      architectures: ['LlamaForCausalLM'],
    }),
  );
}

/** `{**server_args, **scheduler_info, internal_states, version}`: the arguments a client may look at. */
function serverInfo(ctx: RouteContext): void {
  const { server, model } = ctx;
  const args: Body = {
    model_path: model.id,
    tokenizer_path: model.id,
    host: server.host,
    port: server.port,
    context_length: ctx.maxContext,
    tp_size: 1,
    dp_size: 1,
    pp_size: 1,
    page_size: 1,
    disable_radix_cache: !server.prefixCache,
    enable_deterministic_inference: server.batchInvariant,
    enable_cache_report: server.enableCacheReport,
    max_running_requests: 1,
    random_seed: 0,
    served_model_name: model.id,
  };
  sendJson(
    ctx.res,
    200,
    JSON.stringify({
      ...args,
      max_total_num_tokens: ctx.maxContext,
      internal_states: [{ last_gen_throughput: 0 }],
      version: server.engineVersion ?? SGLANG_VERSION,
    }),
  );
}

/**
 * `/flush_cache`: refused (400) while requests run or wait, as SGLang's scheduler does; with
 * `?timeout=S` (newer SGLang; float seconds, default 0: fail fast) it waits up to S seconds for
 * the engine to go idle first, and answers 400 only if it never does.
 */
async function flushCache(ctx: RouteContext): Promise<void> {
  const raw = ctx.query.get('timeout');
  const timeout = raw === null ? 0 : Number(raw);
  if (raw !== null && (raw.trim() === '' || !Number.isFinite(timeout))) {
    throw new RawHttpError(
      422,
      JSON.stringify({
        detail: [
          {
            type: 'float_parsing',
            loc: ['query', 'timeout'],
            msg: 'Input should be a valid number, unable to parse string as a number',
            input: raw,
          },
        ],
      }),
    );
  }
  const idle = timeout > 0 ? await ctx.server.queue.idle(timeout * 1000, ctx.signal) : !ctx.server.queue.busy;
  if (idle) await ctx.model.flushCache?.();
  const res = ctx.res;
  const status = idle ? 200 : 400;
  res.writeHead(status, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(FLUSH_TEXT),
  });
  res.end(FLUSH_TEXT);
}

/**
 * SGLang's API-key middleware (`srt/utils/auth.py` `decide_request_auth`): /health*, /ready*,
 * /metrics* always open; an `ADMIN_OPTIONAL` route (`/flush_cache`) needs the admin key when one
 * is set (the plain key is then refused), else the plain key when set; every other route needs
 * the plain key when set. `Authorization: Bearer KEY` or `x-api-key: KEY`. A refusal is a 401
 * `{"error": "Unauthorized"}`. Null: allowed.
 */
export function sglangAuth(
  server: ServerSettings,
  route: Route | undefined,
  method: string,
  path: string,
  headers: IncomingHttpHeaders,
): EngineHttpError | null {
  if (method === 'OPTIONS' || path.startsWith('/health') || path.startsWith('/ready') || path.startsWith('/metrics'))
    return null;
  const authz = headers.authorization;
  const xKey = headers['x-api-key'];
  const holds = (key: string): boolean => {
    const parts = typeof authz === 'string' ? authz.split(' ') : [];
    if (parts.length >= 2 && parts[0]!.toLowerCase() === 'bearer' && parts.slice(1).join(' ') === key) return true;
    return typeof xKey === 'string' && xKey === key;
  };
  const want = route?.adminOptional ? (server.adminApiKey ?? server.apiKey) : server.apiKey;
  if (want === null || holds(want)) return null;
  return new RawHttpError(401, '{"error":"Unauthorized"}');
}

const generateRoute: Route = { methods: ['POST', 'PUT'], generation: true, idPrefix: '', serve: serveGenerate };
const tokenizeRoute: Route = { methods: ['POST'], serve: tokenize };
const detokenizeRoute: Route = { methods: ['POST'], serve: detokenize };
const modelInfoRoute: Route = { methods: ['GET'], serve: modelInfo };
const serverInfoRoute: Route = { methods: ['GET'], serve: serverInfo };

/** SGLang's routes (added to the OpenAI ones). */
export const SGLANG_ROUTES: Readonly<Record<string, Route>> = {
  '/generate': generateRoute,
  '/tokenize': tokenizeRoute,
  '/v1/tokenize': tokenizeRoute,
  '/detokenize': detokenizeRoute,
  '/v1/detokenize': detokenizeRoute,
  // Newer SGLang renamed them and keeps the old paths (clients should probe both).
  '/get_model_info': modelInfoRoute,
  '/model_info': modelInfoRoute,
  '/get_server_info': serverInfoRoute,
  '/server_info': serverInfoRoute,
  '/flush_cache': { methods: ['GET', 'POST'], adminOptional: true, serve: flushCache },
};

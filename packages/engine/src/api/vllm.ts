/**
 * The vLLM profile's routes (vllm/entrypoints/serve/tokenize, completion/, cache/): `/v1/completions` and
 * `/v1/chat/completions` with vLLM's extensions, `POST /tokenize` (a prompt, or messages through
 * the engine's own chat template), `POST /detokenize`, `GET /version`, and
 * `POST /reset_prefix_cache`, which exists only in dev mode (`VLLM_SERVER_DEV_MODE=1`).
 */
import { applyChatTemplate } from '../chat-template.js';
import { serveChat } from '../chat.js';
import { badRequest } from '../errors.js';
import { TOKEN_ID_RENDER } from '../format.js';
import { bool, parseChatRequest, parseJsonBody, parseMessages, type Body } from '../request.js';
import { sendJson, type Route, type RouteContext } from '../route.js';
import { decodeWithSpecials, RawHttpError, textCells, tokenIdList } from './profile.js';
import { parseVllmCompletion, serveVllmCompletion, vllmLogprobCount, vllmValidation } from './vllm-completions.js';
import { retrieveResponse, serveResponses } from './vllm-responses.js';

/** The vLLM release played by default (V1 engine; `GET /version`); `engineVersion` picks another. */
export const VLLM_VERSION = '0.11.0';

/** `POST /tokenize`: `{prompt, add_special_tokens=true}` or `{messages, add_generation_prompt=true, add_special_tokens=false}`. */
function tokenize(ctx: RouteContext): void {
  const body = parseJsonBody(ctx.raw);
  const { model } = ctx;
  let tokens: number[];
  if (body.messages !== undefined) {
    const addGenerationPrompt = bool(body, 'add_generation_prompt') ?? true;
    const continueFinal = bool(body, 'continue_final_message') ?? false;
    if (addGenerationPrompt && continueFinal)
      throw badRequest('Cannot set both `continue_final_message` and `add_generation_prompt` to True.');
    // The same rendering /v1/chat/completions feeds the model: the template opens with the BOS
    // token, as a model's own template (`{{ bos_token }}…`) does, and adds no other special token.
    const rendered = textCells(
      model,
      applyChatTemplate(
        parseMessages(body),
        { addGenerationPrompt, continueFinalMessage: continueFinal },
        ctx.server.chatTemplate,
      ),
    );
    const bos = model.bosToken ?? null;
    tokens = (bool(body, 'add_special_tokens') ?? false) && bos !== null ? [bos, ...rendered] : rendered;
  } else {
    // TokenizeCompletionRequest.prompt is a str: a token-id list is not accepted.
    if (typeof body.prompt !== 'string') throw badRequest("'prompt' must be a string", 'prompt');
    tokens = textCells(model, body.prompt, bool(body, 'add_special_tokens') ?? true);
  }
  const strs =
    (bool(body, 'return_token_strs') ?? false)
      ? tokens.map((id) => model.vocabPiece?.(id) ?? model.tokenText(id))
      : null;
  sendJson(
    ctx.res,
    200,
    JSON.stringify({ count: tokens.length, max_model_len: ctx.maxContext, tokens, token_strs: strs }),
  );
}

/** `POST /detokenize` `{tokens}` → `{prompt}` (the field is `prompt`; special tokens kept, as `tokenizer.decode`). */
function detokenize(ctx: RouteContext): void {
  const body = parseJsonBody(ctx.raw);
  sendJson(
    ctx.res,
    200,
    JSON.stringify({ prompt: decodeWithSpecials(ctx.model, tokenIdList(body, 'tokens', ctx.model.vocabSize)) }),
  );
}

/** A FastAPI `bool` query parameter (`true`/`1`/`yes`/`on`, `false`/`0`/`no`/`off`), else its 422. */
function queryBool(ctx: RouteContext, name: string): boolean {
  const v = ctx.query.get(name);
  if (v === null) return false;
  const low = v.toLowerCase();
  if (['true', '1', 'yes', 'on', 't', 'y'].includes(low)) return true;
  if (['false', '0', 'no', 'off', 'f', 'n'].includes(low)) return false;
  throw new RawHttpError(
    422,
    JSON.stringify({
      detail: [
        {
          type: 'bool_parsing',
          loc: ['query', name],
          msg: 'Input should be a valid boolean, unable to interpret input',
          input: v,
        },
      ],
    }),
  );
}

/**
 * `POST /reset_prefix_cache` (`entrypoints/serve/cache/api_router.py`): only with
 * `VLLM_SERVER_DEV_MODE=1` (else 404). Always 200 with an empty body — "we currently do not check
 * if the prefix cache is successfully reset": the block pool refuses while running requests hold
 * blocks, and the 200 comes all the same, so here a request running keeps the cache (one only
 * waiting holds no blocks). `?reset_running_requests=true` preempts the running ones first and
 * the reset happens.
 */
async function resetPrefixCache(ctx: RouteContext): Promise<void> {
  if (!ctx.server.devMode) throw ctx.api.notFound(ctx.method, ctx.path);
  if (ctx.method !== 'POST') throw ctx.api.wrongMethod(ctx.method, ctx.path);
  const preempt = queryBool(ctx, 'reset_running_requests');
  queryBool(ctx, 'reset_external');
  if (preempt || ctx.server.queue.active === 0) await ctx.model.flushCache?.();
  ctx.res.writeHead(200, { 'content-length': 0 });
  ctx.res.end();
}

/**
 * `GET /server_info` (`entrypoints/serve/dev` `show_server_info`): only with `VLLM_SERVER_DEV_MODE=1`
 * (else 404). `?config_format=text` (default) gives `str(vllm_config)`, whose fields do not include
 * `logprobs_mode`; `json` gives the config as a dict, where `model_config.logprobs_mode` is the
 * one place a client can read the mode from the server.
 */
function serverInfo(ctx: RouteContext): void {
  if (!ctx.server.devMode) throw ctx.api.notFound(ctx.method, ctx.path);
  const format = ctx.query.get('config_format') ?? 'text';
  if (format !== 'text' && format !== 'json') {
    throw new RawHttpError(
      422,
      JSON.stringify({
        detail: [
          {
            type: 'literal_error',
            loc: ['query', 'config_format'],
            msg: "Input should be 'text' or 'json'",
            input: format,
            ctx: { expected: "'text' or 'json'" },
          },
        ],
      }),
    );
  }
  const { model, server } = ctx;
  const py = (b: boolean): string => (b ? 'True' : 'False');
  const config =
    format === 'text'
      ? `model='${model.id}', speculative_config=None, tokenizer='${model.id}', skip_tokenizer_init=False, ` +
        `dtype=torch.float32, max_seq_len=${ctx.maxContext}, tensor_parallel_size=1, pipeline_parallel_size=1, ` +
        `data_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cpu, ` +
        `seed=0, served_model_name=${model.id}, enable_prefix_caching=${py(server.prefixCache)}, ` +
        `enable_chunked_prefill=True, pooler_config=None, compilation_config={}`
      : {
          model_config: {
            model: model.id,
            tokenizer: model.id,
            dtype: 'torch.float32',
            seed: 0,
            max_model_len: ctx.maxContext,
            max_logprobs: server.maxLogprobs,
            logprobs_mode: server.logprobsMode,
            served_model_name: model.id,
          },
          cache_config: { block_size: 16, enable_prefix_caching: server.prefixCache },
          parallel_config: { tensor_parallel_size: 1, pipeline_parallel_size: 1, data_parallel_size: 1 },
        };
  sendJson(
    ctx.res,
    200,
    JSON.stringify({
      vllm_config: config,
      vllm_env: { VLLM_SERVER_DEV_MODE: '1' },
      system_env: { os: process.platform, python_version: null, vllm_version: server.engineVersion ?? VLLM_VERSION },
    }),
  );
}

function parseVllmChat(body: Body, vocabSize: number, maxLogprobs: number): ReturnType<typeof parseChatRequest> {
  const top = body.top_logprobs;
  if (typeof top === 'number' && top < 0 && top !== -1)
    throw vllmValidation('`top_logprobs` must be a positive value or -1.', 'top_logprobs');
  if (top !== undefined && top !== null && top !== 0 && body.logprobs !== true)
    throw badRequest('when using `top_logprobs`, `logprobs` must be set to true.', 'top_logprobs');
  // The chat request's top_logprobs become the sampling params' logprobs, capped as such
  // (to_sampling_params: `logprobs=self.top_logprobs if self.logprobs else None`; the error names `logprobs`).
  const n =
    body.logprobs === true
      ? (vllmLogprobCount({ top_logprobs: top ?? 0 }, 'top_logprobs', 'sample', vocabSize, maxLogprobs, 'logprobs') ??
        0)
      : 0;
  return { ...parseChatRequest({ ...body, top_logprobs: 0 }), topLogprobs: n };
}

/** vLLM's routes (added to the OpenAI ones). */
export const VLLM_ROUTES: Readonly<Record<string, Route>> = {
  '/v1/completions': {
    methods: ['POST'],
    generation: true,
    idPrefix: 'cmpl',
    serve: (ctx) =>
      serveVllmCompletion(
        ctx,
        parseVllmCompletion(parseJsonBody(ctx.raw), ctx.model.vocabSize, ctx.server.maxLogprobs),
      ),
  },
  '/v1/chat/completions': {
    methods: ['POST'],
    generation: true,
    idPrefix: 'chatcmpl',
    serve: (ctx) => {
      const body = parseJsonBody(ctx.raw);
      const asIds = bool(body, 'return_tokens_as_token_ids') ?? false;
      const returnTokenIds = bool(body, 'return_token_ids') ?? false;
      return serveChat(ctx, parseVllmChat(body, ctx.model.vocabSize, ctx.server.maxLogprobs), {
        vllm: true,
        returnTokenIds,
        ...(asIds ? { tokens: TOKEN_ID_RENDER } : {}),
      });
    },
  },
  // Ids are resp_ + 32 hex digits (ResponsesRequest.request_id), built by the route.
  '/v1/responses': { methods: ['POST'], generation: true, idPrefix: '', serve: serveResponses },
  '/v1/responses/:id': { methods: ['GET'], serve: retrieveResponse },
  '/tokenize': { methods: ['POST'], serve: tokenize },
  '/detokenize': { methods: ['POST'], serve: detokenize },
  '/version': {
    methods: ['GET'],
    serve: (ctx) => sendJson(ctx.res, 200, JSON.stringify({ version: ctx.server.engineVersion ?? VLLM_VERSION })),
  },
  '/server_info': { methods: ['GET'], serve: serverInfo },
  // Every method reaches it, so that without dev mode the path is a 404 whatever the method.
  '/reset_prefix_cache': { methods: ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD'], serve: resetPrefixCache },
};

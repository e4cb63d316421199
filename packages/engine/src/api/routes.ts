/**
 * Which paths the server serves for each `api`: the OpenAI routes every engine has, and each
 * real engine's own. A path the pretended engine lacks is a 404 in that engine's words.
 */
import { serveChat } from '../chat.js';
import { serveCompletion } from '../completions.js';
import { parseChatRequest, parseCompletionRequest, parseJsonBody } from '../request.js';
import { sendJson, type Route, type RouteContext } from '../route.js';
import { LLAMACPP_ROUTES } from './llamacpp.js';
import type { EngineApi } from './profile.js';
import { SGLANG_ROUTES } from './sglang.js';
import { VLLM_ROUTES } from './vllm.js';

const created = Math.floor(Date.now() / 1000);

/** `GET /v1/models` in the pretended engine's shape (vLLM's and SGLang's `ModelCard`, llama-server's `meta`). */
function modelsBody(ctx: RouteContext): string {
  const { model, api, maxContext } = ctx;
  const base = { id: model.id, object: 'model', created, owned_by: api.ownedBy };
  // Adapters are listed after the base, each with its path as root and the base as parent
  // (vLLM serving_models.py `show_available_models` lora_cards, no max_model_len; SGLang
  // http_server.py `available_models`, max_model_len None).
  const adapters = (model.adapters ?? []).map((a) => ({
    ...base,
    id: a.id,
    root: a.root ?? a.id,
    parent: a.parent ?? model.id,
    max_model_len: null,
  }));
  switch (api.api) {
    case 'vllm':
      return JSON.stringify({
        object: 'list',
        data: [
          { ...base, root: model.id, parent: null, max_model_len: maxContext, permission: [vllmPermission()] },
          ...adapters.map((a) => ({ ...a, permission: [vllmPermission()] })),
        ],
      });
    case 'sglang':
      return JSON.stringify({
        object: 'list',
        data: [{ ...base, root: model.id, parent: null, max_model_len: maxContext }, ...adapters],
      });
    case 'llamacpp': {
      const card = model.card;
      const meta = {
        vocab_type: 2,
        n_vocab: model.vocabSize,
        n_ctx_train: maxContext,
        n_embd: card?.embedding ?? 0,
        n_params: card?.parameters ?? 0,
        size: card?.bytes ?? 0,
      };
      return JSON.stringify({ object: 'list', data: [{ ...base, id: card?.path ?? model.id, meta }] });
    }
    default:
      return JSON.stringify({
        object: 'list',
        data: [{ ...base, created: 0 }, ...(model.adapters ?? []).map((a) => ({ ...base, id: a.id, created: 0 }))],
      });
  }
}

function vllmPermission(): Record<string, unknown> {
  return {
    id: 'modelperm-logprobe',
    object: 'model_permission',
    created,
    allow_create_engine: false,
    allow_sampling: true,
    allow_logprobs: true,
    allow_search_indices: false,
    allow_view: true,
    allow_fine_tuning: false,
    organization: '*',
    group: null,
    is_blocking: false,
  };
}

/** The OpenAI routes (and `/health`, `/v1/models`), in OpenAI's shapes. */
const OPENAI_ROUTES: Readonly<Record<string, Route>> = {
  '/v1/completions': {
    methods: ['POST'],
    generation: true,
    idPrefix: 'cmpl',
    serve: (ctx) => serveCompletion(ctx, parseCompletionRequest(parseJsonBody(ctx.raw), ctx.model.vocabSize)),
  },
  '/v1/chat/completions': {
    methods: ['POST'],
    generation: true,
    idPrefix: 'chatcmpl',
    serve: (ctx) => serveChat(ctx, parseChatRequest(parseJsonBody(ctx.raw))),
  },
  '/v1/models': { methods: ['GET'], serve: (ctx) => sendJson(ctx.res, 200, modelsBody(ctx)) },
  '/health': {
    methods: ['GET', 'HEAD'],
    serve: (ctx) => sendJson(ctx.res, 200, ctx.api.health.body, { 'content-type': ctx.api.health.contentType }),
  },
};

const TABLES: Record<EngineApi, Readonly<Record<string, Route>>> = {
  logprobe: OPENAI_ROUTES,
  openai: OPENAI_ROUTES,
  vllm: { ...OPENAI_ROUTES, ...VLLM_ROUTES },
  sglang: { ...OPENAI_ROUTES, ...SGLANG_ROUTES },
  llamacpp: { ...OPENAI_ROUTES, ...LLAMACPP_ROUTES },
};

/** The route serving `path` for `api`, or undefined (a 404). */
export function routeFor(api: EngineApi, path: string): Route | undefined {
  const table = TABLES[api];
  const exact = table[path];
  if (exact) return exact;
  // llama-server's /slots/:id_slot
  if (api === 'llamacpp' && /^\/slots\/\d+$/.test(path)) return table['/slots/:id'];
  // vLLM's /v1/responses/{response_id}
  if (api === 'vllm' && /^\/v1\/responses\/[^/]+$/.test(path)) return table['/v1/responses/:id'];
  return undefined;
}

/**
 * The llama.cpp profile's routes (llama-server's server.cpp, and its b4748 recording in test/fixtures/llama-server-b4748/): native
 * `/completion`, its OpenAI routes, `/tokenize`, `/detokenize`, `/apply-template`, `/props`,
 * and the slot actions, which need `--slot-save-path` (else 501, as llama-server).
 */
import { applyChatTemplate, CHAT_TEMPLATE_JINJA } from '../chat-template.js';
import { badRequest, EngineHttpError } from '../errors.js';
import { bool, parseJsonBody, parseMessages } from '../request.js';
import { sendJson, type Route, type RouteContext } from '../route.js';
import { generationSettings, LLAMACPP_BUILD } from './llamacpp-format.js';
import { serveNativeCompletion } from './llamacpp-native.js';
import { serveLlamaChat, serveLlamaCompletions } from './llamacpp-oai.js';
import { decodeWithSpecials, textCells, tokenIdList } from './profile.js';

const JSON_UTF8 = { 'content-type': 'application/json; charset=utf-8' };
const strict = new TextDecoder('utf-8', { fatal: true });

/** `{content, add_special=false, parse_special=true, with_pieces=false}` → `{tokens}`. */
function tokenize(ctx: RouteContext): void {
  const body = parseJsonBody(ctx.raw);
  if (typeof body.content !== 'string') throw badRequest('"content" must be a string');
  const { model } = ctx;
  const tokens = textCells(
    model,
    body.content,
    bool(body, 'add_special') ?? false,
    bool(body, 'parse_special') ?? true,
  );
  if (!(bool(body, 'with_pieces') ?? false)) {
    sendJson(ctx.res, 200, JSON.stringify({ tokens }), JSON_UTF8);
    return;
  }
  // A piece is its text when valid UTF-8, else its bytes (fixture tokenize_with_pieces.json).
  const pieces = tokens.map((id) => {
    if (id === model.bosToken || id === model.eosToken) return { id, piece: model.tokenText(id) };
    const bytes = model.tokenBytes(id);
    try {
      return { id, piece: strict.decode(bytes) };
    } catch {
      return { id, piece: Array.from(bytes) };
    }
  });
  sendJson(ctx.res, 200, JSON.stringify({ tokens: pieces }), JSON_UTF8);
}

/** `{tokens}` → `{content}` (special tokens spelled out, as `tokens_to_str`). */
function detokenize(ctx: RouteContext): void {
  const body = parseJsonBody(ctx.raw);
  sendJson(
    ctx.res,
    200,
    JSON.stringify({ content: decodeWithSpecials(ctx.model, tokenIdList(body, 'tokens', ctx.model.vocabSize)) }),
    JSON_UTF8,
  );
}

/** `{messages}` → `{prompt}`: the chat template applied, as chat would (then `/tokenize` with `add_special: true` gives chat's ids). */
function applyTemplate(ctx: RouteContext): void {
  const body = parseJsonBody(ctx.raw);
  const prompt = applyChatTemplate(
    parseMessages(body),
    { addGenerationPrompt: bool(body, 'add_generation_prompt') ?? true },
    ctx.server.chatTemplate,
  );
  sendJson(ctx.res, 200, JSON.stringify({ prompt }), JSON_UTF8);
}

/** `GET /props` (fixture props.json). */
function props(ctx: RouteContext): void {
  const { model } = ctx;
  const special = (id: number | null | undefined): string => (typeof id === 'number' ? model.tokenText(id) : '');
  const params = generationSettings({
    nPredict: -1,
    seed: 4294967295,
    temperature: 0.8,
    topK: 40,
    topP: 0.95,
    minP: 0.05,
    stop: [],
    stream: true,
    nProbs: 0,
    postSampling: false,
  });
  sendJson(
    ctx.res,
    200,
    JSON.stringify({
      default_generation_settings: {
        id: 0,
        id_task: -1,
        n_ctx: ctx.maxContext,
        speculative: false,
        is_processing: ctx.server.queue.busy,
        non_causal: false,
        params,
        prompt: '',
        next_token: { has_next_token: true, has_new_line: false, n_remain: -1, n_decoded: 0, stopping_word: '' },
      },
      total_slots: 1,
      model_path: model.card?.path ?? model.id,
      // A built-in name given with --chat-template is reported as given (the template's source).
      chat_template: ctx.server.chatTemplate ?? CHAT_TEMPLATE_JINJA,
      bos_token: special(model.bosToken),
      eos_token: special(model.eosToken),
      build_info: LLAMACPP_BUILD,
    }),
    JSON_UTF8,
  );
}

/**
 * `POST /slots/{id}?action=erase`: needs `--slot-save-path` (post_slots checks it before the
 * action); erasing waits for a busy slot, then drops its cache.
 */
async function slotAction(ctx: RouteContext): Promise<void> {
  if (ctx.server.slotSavePath === null)
    throw new EngineHttpError(501, 'This server does not support slots action. Start it with `--slot-save-path`');
  const id = Number(ctx.path.slice('/slots/'.length));
  const action = ctx.query.get('action');
  if (id !== 0) throw badRequest('Invalid slot ID');
  if (action !== 'erase')
    throw action === 'save' || action === 'restore'
      ? new EngineHttpError(501, `slot ${action} is not supported by this engine`)
      : badRequest('Invalid action');
  const release = await ctx.server.queue.acquire(ctx.signal);
  try {
    const n = (await ctx.model.flushCache?.()) ?? 0;
    sendJson(ctx.res, 200, JSON.stringify({ id_slot: id, n_erased: n }), JSON_UTF8);
  } finally {
    release();
  }
}

const completion: Route = { methods: ['POST'], generation: true, idPrefix: 'chatcmpl', serve: serveNativeCompletion };

/** llama-server's routes (replacing the OpenAI ones with its own shapes). */
export const LLAMACPP_ROUTES: Readonly<Record<string, Route>> = {
  '/completion': completion,
  '/completions': completion,
  // Ids are chatcmpl-… on both OpenAI routes at b4748.
  '/v1/completions': { methods: ['POST'], generation: true, idPrefix: 'chatcmpl', serve: serveLlamaCompletions },
  '/v1/chat/completions': { methods: ['POST'], generation: true, idPrefix: 'chatcmpl', serve: serveLlamaChat },
  '/chat/completions': { methods: ['POST'], generation: true, idPrefix: 'chatcmpl', serve: serveLlamaChat },
  '/tokenize': { methods: ['POST'], serve: tokenize },
  '/detokenize': { methods: ['POST'], serve: detokenize },
  '/apply-template': { methods: ['POST'], serve: applyTemplate },
  '/props': { methods: ['GET'], serve: props },
  '/slots/:id': { methods: ['POST'], serve: slotAction },
};

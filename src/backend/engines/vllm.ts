import { readId } from '../../core/parse/values.js';
import type { TokenStep } from '../../core/types.js';
import { postOk, ScoringError, UnsupportedError, type ScoringTarget } from '../http.js';
import {
  idPrompt,
  modelOf,
  postFlush,
  textField,
  tokenIds,
  type EngineProfile,
  type ProfileScore,
  type PromptSource,
  type ScoreSpec,
} from './profile.js';
import { forcedStep, type Alternative } from './steps.js';

/**
 * vLLM (read in vllm-project/vllm's V1 engine, `entrypoints/openai/completion/protocol.py` and
 * `serving.py`, `entrypoints/serve/tokenize/`): `/tokenize` with `prompt` or `messages` (the same
 * chat preprocessing as `/v1/chat/completions`), and scoring as one `/v1/completions` request
 * with the sequence as a token-id prompt, `max_tokens: 1` and `prompt_logprobs: K`: entry i of
 * `choices[0].prompt_logprobs` (null for i = 0) is keyed by token-id strings and always holds the
 * actual prompt token besides the top K. One prefill pass; vLLM does not read its prefix cache for
 * prompt-logprob requests. Mirrored copies ask `return_token_ids: true` (newer vLLM; older ones
 * ignore it), so the answer names the generated ids.
 */
export const vllmProfile: EngineProfile = {
  name: 'vllm',
  method: 'vllm /v1/completions prompt_logprobs',
  mode: 'prefill',
  copyParams: { return_token_ids: true },
  readsCache: false,
  flushConfirms: false,
  capField: 'prompt_logprobs',

  async promptIds(target: ScoringTarget, source: PromptSource): Promise<number[]> {
    const model = modelOf(source.body);
    if (source.kind === 'completions') {
      const ids = idPrompt(source.body);
      if (ids) return ids;
      if (typeof source.body.prompt !== 'string')
        throw new UnsupportedError('the completions prompt is neither a string nor token ids');
      return tokenIds(
        await postOk(target, '/tokenize', { model, prompt: source.body.prompt, add_special_tokens: true }),
      );
    }
    return tokenIds(await postOk(target, '/tokenize', vllmTokenizeChat(source.body)));
  },

  // Only with VLLM_SERVER_DEV_MODE=1 (entrypoints/serve/cache/api_router.py); a 200 does not prove
  // the engine reset (it refuses while blocks are in use), which the repeat's own figures will show.
  flush: (target) =>
    postFlush(target, '/reset_prefix_cache', {
      404: 'vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1',
      405: 'vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1',
    }),

  async tokenize(target, text, model) {
    return tokenIds(await postOk(target, '/tokenize', { model, prompt: text, add_special_tokens: false }));
  },

  // vllm/entrypoints/openai/api_server.py `detokenize`: `{model, tokens}` → `{prompt}`.
  async detokenize(target, ids, model) {
    return textField(await postOk(target, '/detokenize', { model, tokens: ids }), 'prompt');
  },

  async score(target: ScoringTarget, spec: ScoreSpec): Promise<ProfileScore> {
    const ids = [...spec.prompt, ...spec.continuation];
    const body = await postOk(target, '/v1/completions', {
      model: spec.model,
      prompt: ids,
      max_tokens: 1,
      temperature: 0,
      prompt_logprobs: spec.topK,
    });
    const choice = (body.choices as unknown[] | undefined)?.[0] as { prompt_logprobs?: unknown } | undefined;
    const list = choice?.prompt_logprobs;
    if (!Array.isArray(list) || list.length !== ids.length)
      throw new ScoringError(
        `prompt_logprobs: expected ${ids.length} entries, got ${Array.isArray(list) ? list.length : 'none'}`,
      );
    const topless = withoutTopK(list.slice(1), ids.slice(1), spec.topK);
    const steps: TokenStep[] = [];
    for (let i = 1; i < ids.length; i++) steps.push(idKeyedStep(ids[i]!, list[i], topless));
    return {
      promptStart: 1,
      prompt: steps.slice(0, spec.prompt.length - 1),
      continuation: steps.slice(spec.prompt.length - 1),
      ...(topless ? { topless } : {}),
    };
  },
};

/**
 * The `/tokenize` body that renders a chat as `/v1/chat/completions` rendered it
 * (`entrypoints/openai/chat_completion/protocol.py` `ChatCompletionRequest.build_chat_params`):
 * the client's own `add_generation_prompt` (default true) and `continue_final_message`,
 * `chat_template`, `tools`; `documents`, `reasoning_effort` and the `enable_thinking` vLLM derives
 * from it (unless the client's `chat_template_kwargs` set it) go into `chat_template_kwargs`,
 * which is where the chat request puts them for the template (`TokenizeChatRequest` has no
 * field of their own). `tool_choice` and `response_format` are passed as well: the renderers of
 * newer vLLM read them from the chat request, its `/tokenize` ignores them.
 */
export function vllmTokenizeChat(req: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const body: Record<string, unknown> = { model: modelOf(req), messages: req.messages, add_special_tokens: false };
  const continueFinal = req.continue_final_message === true;
  body.add_generation_prompt =
    typeof req.add_generation_prompt === 'boolean' ? req.add_generation_prompt : !continueFinal;
  if (continueFinal) body.continue_final_message = true;
  for (const k of ['chat_template', 'tools', 'tool_choice', 'response_format'])
    if (req[k] !== undefined && req[k] !== null) body[k] = req[k];
  const user =
    typeof req.chat_template_kwargs === 'object' && req.chat_template_kwargs !== null
      ? (req.chat_template_kwargs as Record<string, unknown>)
      : {};
  const kwargs: Record<string, unknown> = {};
  if (req.documents !== undefined && req.documents !== null) kwargs.documents = req.documents;
  if (typeof req.reasoning_effort === 'string') {
    kwargs.reasoning_effort = req.reasoning_effort;
    if (!('enable_thinking' in user)) kwargs.enable_thinking = req.reasoning_effort !== 'none';
  }
  const merged = { ...user, ...kwargs };
  if (Object.keys(merged).length > 0) body.chat_template_kwargs = merged;
  return body;
}

/**
 * Whether the prompt logprobs carry no alternatives: vLLM's V2 model runner, at some versions,
 * returns the prompt token's own logprob only (`v1/worker/gpu/sample/prompt_logprob.py`: "only
 * support prompt logprobs for the prompt tokens (not top-k)"). Asked for K ≥ 2, the V1 runner
 * always sends at least two entries per position; asked for 1, an entry of one token ranked
 * below 1 is no top-1.
 */
function withoutTopK(entries: readonly unknown[], ids: readonly number[], k: number): boolean {
  if (k <= 0 || entries.length === 0) return false;
  let belowTop = false;
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    if (typeof e !== 'object' || e === null) continue;
    const keys = Object.keys(e);
    if (keys.length > 1) return false;
    const own = (e as Record<string, { rank?: unknown } | undefined>)[String(ids[i])];
    if (typeof own?.rank === 'number' && own.rank > 1) belowTop = true;
  }
  return k >= 2 || belowTop;
}

/** One `prompt_logprobs` entry (`{"<id>": {logprob, rank, decoded_token}}`) as the step forcing `id` (`topless`: its own logprob only). */
function idKeyedStep(id: number, entry: unknown, topless = false): TokenStep {
  const alts: Alternative[] = [];
  if (typeof entry === 'object' && entry !== null) {
    for (const [key, v] of Object.entries(entry as Record<string, unknown>)) {
      const o = (typeof v === 'object' && v !== null ? v : {}) as { logprob?: unknown; decoded_token?: unknown };
      alts.push({
        id: readId(Number(key)),
        text: typeof o.decoded_token === 'string' ? o.decoded_token : key,
        logprob: o.logprob,
      });
    }
  }
  const own = alts.find((a) => a.id === id);
  return forcedStep(id, own?.text ?? `token_id:${id}`, own?.logprob, topless ? [] : alts);
}

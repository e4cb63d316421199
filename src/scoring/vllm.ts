import { readId } from '../core/parse/values.js';
import type { TokenStep } from '../core/types.js';
import { postOk, ScoringError, UnsupportedError, type ScoringTarget } from './http.js';
import { idPrompt, modelOf, postFlush, tokenIds, type EngineProfile, type ProfileScore, type PromptSource, type ScoreSpec } from './profile.js';
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

  async promptIds(target: ScoringTarget, source: PromptSource): Promise<number[]> {
    const model = modelOf(source.body);
    if (source.kind === 'completions') {
      const ids = idPrompt(source.body);
      if (ids) return ids;
      if (typeof source.body.prompt !== 'string') throw new UnsupportedError('the completions prompt is neither a string nor token ids');
      return tokenIds(await postOk(target, '/tokenize', { model, prompt: source.body.prompt, add_special_tokens: true }));
    }
    const body: Record<string, unknown> = { model, messages: source.body.messages, add_generation_prompt: true, add_special_tokens: false };
    for (const k of ['chat_template', 'chat_template_kwargs', 'tools']) if (source.body[k] !== undefined) body[k] = source.body[k];
    return tokenIds(await postOk(target, '/tokenize', body));
  },

  // Only with VLLM_SERVER_DEV_MODE=1 (entrypoints/serve/cache/api_router.py); a 200 does not prove
  // the engine reset (it refuses while blocks are in use), which the repeat's own figures will show.
  flush: (target) =>
    postFlush(target, '/reset_prefix_cache', { 404: 'vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1', 405: 'vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1' }),

  async tokenize(target, text, model) {
    return tokenIds(await postOk(target, '/tokenize', { model, prompt: text, add_special_tokens: false }));
  },

  async score(target: ScoringTarget, spec: ScoreSpec): Promise<ProfileScore> {
    const ids = [...spec.prompt, ...spec.continuation];
    const body = await postOk(target, '/v1/completions', { model: spec.model, prompt: ids, max_tokens: 1, temperature: 0, prompt_logprobs: spec.topK });
    const choice = (body.choices as unknown[] | undefined)?.[0] as { prompt_logprobs?: unknown } | undefined;
    const list = choice?.prompt_logprobs;
    if (!Array.isArray(list) || list.length !== ids.length) throw new ScoringError(`prompt_logprobs: expected ${ids.length} entries, got ${Array.isArray(list) ? list.length : 'none'}`);
    const steps: TokenStep[] = [];
    for (let i = 1; i < ids.length; i++) steps.push(idKeyedStep(ids[i]!, list[i]));
    return { promptStart: 1, prompt: steps.slice(0, spec.prompt.length - 1), continuation: steps.slice(spec.prompt.length - 1) };
  },
};

/** One `prompt_logprobs` entry (`{"<id>": {logprob, rank, decoded_token}}`) as the step forcing `id`. */
function idKeyedStep(id: number, entry: unknown): TokenStep {
  const alts: Alternative[] = [];
  if (typeof entry === 'object' && entry !== null) {
    for (const [key, v] of Object.entries(entry as Record<string, unknown>)) {
      const o = (typeof v === 'object' && v !== null ? v : {}) as { logprob?: unknown; decoded_token?: unknown };
      alts.push({ id: readId(Number(key)), text: typeof o.decoded_token === 'string' ? o.decoded_token : key, logprob: o.logprob });
    }
  }
  const own = alts.find((a) => a.id === id);
  return forcedStep(id, own?.text ?? `token_id:${id}`, own?.logprob, alts);
}

import { readId } from '../core/parse/values.js';
import type { TokenStep } from '../core/types.js';
import { postOk, ScoringError, UnsupportedError, type ScoringTarget } from './http.js';
import { idPrompt, modelOf, postFlush, tokenIds, type EngineProfile, type ProfileScore, type PromptSource, type ScoreSpec } from './profile.js';
import { forcedStep, tupleAlternatives } from './steps.js';

/**
 * SGLang (sgl-project/sglang, `srt/entrypoints/http_server.py`, `srt/managers/io_struct.py`,
 * `scheduler_output_processor_mixin.py`): native `/generate` with `input_ids`,
 * `return_logprob: true`, `logprob_start_len: 0`, `top_logprobs_num: K`; `meta_info`'s
 * `input_token_logprobs` are `[logprob, id, text]` tuples and `input_top_logprobs` lists of them.
 * Their alignment changed between versions (the first entry is null in new ones), so positions are
 * counted from the end of the input. `/tokenize` takes text only: SGLang has no chat-template
 * endpoint, so a chat prompt's ids come from `return_prompt_token_ids` on a one-token chat
 * request (newer SGLang), else chat is not scored. One prefill pass.
 */
export const sglangProfile: EngineProfile = {
  name: 'sglang',
  method: 'sglang /generate input_token_logprobs',
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
    const chat: Record<string, unknown> = { model, messages: source.body.messages, max_tokens: 1, temperature: 0, stream: false, return_prompt_token_ids: true };
    for (const k of ['chat_template_kwargs', 'tools']) if (source.body[k] !== undefined) chat[k] = source.body[k];
    const answer = await postOk(target, '/v1/chat/completions', chat);
    const ids = ((answer.choices as unknown[] | undefined)?.[0] as { prompt_token_ids?: unknown } | undefined)?.prompt_token_ids;
    if (!Array.isArray(ids) || !ids.every((x) => readId(x) !== undefined))
      throw new UnsupportedError('SGLang has no chat-template endpoint and this one does not return prompt_token_ids: chat requests are not scored');
    return ids as number[];
  },

  // GET or POST; 400 while requests run (http_server.py): the repeat then goes without a flush.
  flush: (target) => postFlush(target, '/flush_cache', { 404: 'this SGLang has no /flush_cache' }),

  async tokenize(target, text, model) {
    return tokenIds(await postOk(target, '/tokenize', { model, prompt: text, add_special_tokens: false }));
  },

  async score(target: ScoringTarget, spec: ScoreSpec): Promise<ProfileScore> {
    const ids = [...spec.prompt, ...spec.continuation];
    const body = await postOk(target, '/generate', {
      input_ids: ids,
      sampling_params: { max_new_tokens: 1, temperature: 0 },
      return_logprob: true,
      logprob_start_len: 0,
      top_logprobs_num: spec.topK,
      return_text_in_logprobs: true,
    });
    const meta = body.meta_info as { input_token_logprobs?: unknown; input_top_logprobs?: unknown } | undefined;
    const chosen = meta?.input_token_logprobs;
    const tops = meta?.input_top_logprobs;
    if (!Array.isArray(chosen) || !Array.isArray(tops) || chosen.length !== tops.length || chosen.length < ids.length - 1) {
      throw new ScoringError(`meta_info.input_token_logprobs: expected at least ${ids.length - 1} entries, got ${Array.isArray(chosen) ? chosen.length : 'none'}`);
    }
    // Entry k of the tail refers to input_ids[n - len + k]: the rule that holds in every version.
    const offset = ids.length - chosen.length;
    const steps: TokenStep[] = [];
    for (let i = Math.max(1, offset); i < ids.length; i++) {
      const tuple = chosen[i - offset] as unknown[] | null;
      const alts = tupleAlternatives(tops[i - offset]);
      const lp = Array.isArray(tuple) && readId(tuple[1]) === ids[i] ? tuple[0] : undefined;
      const text = Array.isArray(tuple) && typeof tuple[2] === 'string' ? tuple[2] : (alts.find((a) => a.id === ids[i])?.text ?? `token_id:${ids[i]}`);
      steps.push(forcedStep(ids[i]!, text, lp, alts));
    }
    const promptStart = Math.max(1, offset);
    return { promptStart, prompt: steps.slice(0, Math.max(0, spec.prompt.length - promptStart)), continuation: steps.slice(Math.max(0, spec.prompt.length - promptStart)) };
  },
};

import type { TokenStep } from '../../core/types.js';
import { postOk, requestJson, ScoringError, UnsupportedError, type ScoringTarget } from '../http.js';
import {
  idPrompt,
  postFlush,
  textField,
  tokenIds,
  type EngineProfile,
  type ProfileScore,
  type PromptSource,
  type ScoreSpec,
} from './profile.js';
import { forcedStep, logprobAmong, objectAlternatives } from './steps.js';

/**
 * llama.cpp's `llama-server` (ggml-org/llama.cpp `tools/server`; the recorded answers of build
 * b4748): no prompt logprobs and no echo (`Unsupported param: echo`). Token ids from `/tokenize`
 * (`add_special: true`, as the server tokenizes string prompts), chat prompts through
 * `/apply-template` first. Scoring takes one native `/completion` call per position, the prompt as
 * token ids (the prefix so far), `n_predict: 1`, `n_probs: K`: the continuation with
 * `cache_prompt: true`, so each call evaluates about one token on the cached prefix (the decode
 * path, as generation does); prompt positions with `cache_prompt: false`, each a fresh prefill.
 * The forced token's logprob is known only when it is among the top `n_probs`.
 */
export const llamacppProfile: EngineProfile = {
  name: 'llamacpp',
  method: 'llamacpp /completion per position (cache_prompt)',
  mode: 'incremental',
  copyParams: {},
  readsCache: true,
  flushConfirms: true,
  capField: 'n_probs',

  async promptIds(target: ScoringTarget, source: PromptSource): Promise<number[]> {
    if (source.kind === 'completions') {
      const ids = idPrompt(source.body);
      if (ids) return ids;
      if (typeof source.body.prompt !== 'string')
        throw new UnsupportedError('the completions prompt is neither a string nor token ids');
      return tokenIds(await postOk(target, '/tokenize', { content: source.body.prompt, add_special: true }));
    }
    const templated = await postOk(target, '/apply-template', { messages: source.body.messages });
    if (typeof templated.prompt !== 'string') throw new ScoringError('/apply-template answered no prompt');
    return tokenIds(await postOk(target, '/tokenize', { content: templated.prompt, add_special: true }));
  },

  // Slot actions need --slot-save-path (501 otherwise). Every slot is erased (`/props`
  // `total_slots`, the server's -np): a request may be given any slot, and one that holds the
  // prompt's prefix would serve it warm.
  async flush(target) {
    const n = await totalSlots(target);
    for (let i = 0; i < n; i++)
      await postFlush(target, `/slots/${i}?action=erase`, {
        501: 'llama-server erases a slot only when started with --slot-save-path',
        404: 'this llama-server has no /slots endpoint',
      });
  },

  async tokenize(target, text) {
    return tokenIds(await postOk(target, '/tokenize', { content: text, add_special: false }));
  },

  // tools/server/server.cpp `/detokenize`: `{tokens}` → `{content}`.
  async detokenize(target, ids) {
    return textField(await postOk(target, '/detokenize', { tokens: ids }), 'content');
  },

  async score(target: ScoringTarget, spec: ScoreSpec): Promise<ProfileScore> {
    const P = spec.prompt;
    // Prompt positions first (fresh prefills), the last `promptPositions` of them.
    const promptStart = Math.max(1, P.length - spec.promptPositions);
    const prompt: TokenStep[] = [];
    for (let i = promptStart; i < P.length; i++)
      prompt.push(await position(target, P.slice(0, i), P[i]!, spec.topK, false));
    const continuation: TokenStep[] = [];
    const seq = [...P];
    for (const id of spec.continuation) {
      continuation.push(await position(target, seq, id, spec.topK, spec.prefill !== true));
      seq.push(id);
    }
    return { promptStart, prompt, continuation };
  },
};

/** The distribution after `prefix`, as the step forcing `id`. */
async function position(
  target: ScoringTarget,
  prefix: readonly number[],
  id: number,
  k: number,
  cache: boolean,
): Promise<TokenStep> {
  const body = await postOk(target, '/completion', {
    prompt: prefix,
    n_predict: 1,
    n_probs: k,
    cache_prompt: cache,
    temperature: 0,
    top_k: 1,
    stream: false,
  });
  const first = (body.completion_probabilities as unknown[] | undefined)?.[0] as
    { top_logprobs?: unknown; top_probs?: unknown } | undefined;
  if (!first) throw new ScoringError('/completion answered no completion_probabilities');
  if (first.top_logprobs === undefined && first.top_probs !== undefined)
    throw new ScoringError('/completion answered probabilities, not logprobs (post_sampling_probs)');
  const alts = objectAlternatives(first.top_logprobs);
  const own = alts.find((a) => a.id === id);
  return forcedStep(id, own?.text ?? `token_id:${id}`, logprobAmong(id, alts), alts);
}

/** The server's slots (`/props` `total_slots`); 1 where it does not say (one slot is slot 0). */
async function totalSlots(target: ScoringTarget): Promise<number> {
  const a = await requestJson(target, 'GET', '/props');
  const n = (a.body as { total_slots?: unknown } | null)?.total_slots;
  return a.status === 200 && typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : 1;
}

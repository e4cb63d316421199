import { newStep, topValue, finishTop } from '../../core/parse/values.js';
import type { TokenStep, TopEntry } from '../../core/types.js';
import { postOk, ScoringError, UnsupportedError, type ScoringTarget } from '../http.js';
import { idPrompt, type EngineProfile, type ProfileScore, type PromptSource, type ScoreSpec } from './profile.js';

/**
 * Any OpenAI-compatible server that accepts the legacy `echo: true` + `logprobs: K` +
 * `max_tokens: 0` on `/v1/completions` (the prompt's own tokens with their logprobs; the first
 * one null). There is no tokenize endpoint to rely on, so the sequence is sent as token ids
 * when the request carried ids; token ids of a text prompt are unknown and such requests are
 * not scored. One prefill pass.
 */
export const openaiProfile: EngineProfile = {
  name: 'openai',
  method: 'openai /v1/completions echo',
  mode: 'prefill',
  copyParams: {},
  readsCache: false,
  flushConfirms: false,
  capField: 'logprobs',

  async promptIds(_target: ScoringTarget, source: PromptSource): Promise<number[]> {
    if (source.kind === 'chat')
      throw new UnsupportedError('an OpenAI-compatible server scores completions prompts only (echo), not chat');
    const ids = idPrompt(source.body);
    if (!ids)
      throw new UnsupportedError(
        'no tokenize endpoint on an OpenAI-compatible server: only token-id prompts are scored',
      );
    return ids;
  },

  async flush() {
    throw new UnsupportedError('an OpenAI-compatible server has no cache reset');
  },

  async tokenize() {
    throw new UnsupportedError('no tokenize endpoint on an OpenAI-compatible server');
  },

  async score(target: ScoringTarget, spec: ScoreSpec): Promise<ProfileScore> {
    const ids = [...spec.prompt, ...spec.continuation];
    const body = await postOk(target, '/v1/completions', {
      model: spec.model,
      prompt: ids,
      echo: true,
      logprobs: spec.topK,
      max_tokens: 0,
      temperature: 0,
    });
    const lp = (
      (body.choices as unknown[] | undefined)?.[0] as
        { logprobs?: { tokens?: unknown; token_logprobs?: unknown; top_logprobs?: unknown } } | undefined
    )?.logprobs;
    const tokens = lp?.tokens;
    const values = lp?.token_logprobs;
    const tops = lp?.top_logprobs;
    if (!Array.isArray(tokens) || !Array.isArray(values) || tokens.length < ids.length)
      throw new ScoringError(
        `echo: expected ${ids.length} prompt tokens, got ${Array.isArray(tokens) ? tokens.length : 'none'}`,
      );
    const steps: TokenStep[] = [];
    for (let i = 1; i < ids.length; i++) {
      const step = newStep(tokens[i], values[i]);
      step.id = ids[i]!;
      const dict = Array.isArray(tops) ? tops[i] : null;
      const entries: TopEntry[] =
        typeof dict === 'object' && dict !== null
          ? Object.entries(dict as Record<string, unknown>).map(([t, v]) => [t, topValue(step, v)])
          : [];
      finishTop(step, entries, []);
      steps.push(step);
    }
    return {
      promptStart: 1,
      prompt: steps.slice(0, spec.prompt.length - 1),
      continuation: steps.slice(spec.prompt.length - 1),
    };
  },
};

import { readId } from '../../core/parse/values.js';
import type { TokenStep } from '../../core/types.js';
import { postOk, requestJson, ScoringError, UnsupportedError, type ScoringTarget } from '../http.js';
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
import { forcedStep, tupleAlternatives } from './steps.js';

/** Backends (by URL) whose `/tokenize` takes no `messages`. */
const noChatTokenize = new Set<string>();

/** Fields of a chat request that shape its rendered prompt; sampling and output fields are left out. */
const RENDER_FIELDS = [
  'messages',
  'tools',
  'tool_choice',
  'response_format',
  'reasoning_effort',
  'chat_template_kwargs',
  'continue_final_message',
  'add_generation_prompt',
];

/** The fields of a chat request that shape its prompt. */
function chatFields(body: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of RENDER_FIELDS) if (body[k] !== undefined && body[k] !== null) out[k] = body[k];
  return out;
}

/**
 * SGLang (sgl-project/sglang, `srt/entrypoints/http_server.py`, `srt/managers/io_struct.py`,
 * `scheduler_output_processor_mixin.py`): native `/generate` with `input_ids`,
 * `return_logprob: true`, `logprob_start_len: 0`, `top_logprobs_num: K`; `meta_info`'s
 * `input_token_logprobs` are `[logprob, id, text]` tuples and `input_top_logprobs` lists of them.
 * Their alignment changed between versions (the first entry is null in new ones), so positions are
 * counted from the end of the input. A chat prompt's ids: `/tokenize` with `messages` (newer
 * SGLang, `entrypoints/openai/protocol.py` `TokenizeRequest`), else `return_prompt_token_ids` on a
 * one-token chat request with the request's own rendering inputs, else chat is not scored. One
 * prefill pass, which does not read the prefix cache: `logprob_start_len` caps the reused prefix
 * (`managers/schedule_batch.py`), 0 reuses nothing.
 */
export const sglangProfile: EngineProfile = {
  name: 'sglang',
  method: 'sglang /generate input_token_logprobs',
  mode: 'prefill',
  copyParams: { return_token_ids: true },
  readsCache: false,
  flushConfirms: true,
  capField: 'top_logprobs_num',

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
    // Newer SGLang tokenizes messages through the chat template (`/tokenize` with `messages`).
    if (!noChatTokenize.has(target.url)) {
      const a = await requestJson(target, 'POST', '/tokenize', {
        ...chatFields(source.body),
        model,
        add_special_tokens: false,
      });
      const tokens = (a.body as { tokens?: unknown } | null)?.tokens;
      if (
        a.status === 200 &&
        Array.isArray(tokens) &&
        tokens.length > 0 &&
        tokens.every((x) => readId(x) !== undefined)
      )
        return tokens as number[];
      // An older /tokenize (prompt only: a 400/422 for the missing prompt), or none: the chat
      // generation below, from now on (another failure is tried again next time).
      if (a.status === 400 || a.status === 422 || a.status === 404 || a.status === 200) noChatTokenize.add(target.url);
    }
    // Else a one-token chat generation with the request's own inputs (tools, tool_choice,
    // response_format, reasoning_effort, chat_template_kwargs, …), its prompt ids returned.
    const chat: Record<string, unknown> = {
      ...chatFields(source.body),
      model,
      max_tokens: 1,
      temperature: 0,
      stream: false,
      return_prompt_token_ids: true,
    };
    const answer = await postOk(target, '/v1/chat/completions', chat);
    const ids = ((answer.choices as unknown[] | undefined)?.[0] as { prompt_token_ids?: unknown } | undefined)
      ?.prompt_token_ids;
    if (!Array.isArray(ids) || !ids.every((x) => readId(x) !== undefined))
      throw new UnsupportedError(
        'SGLang has no chat-template endpoint and this one does not return prompt_token_ids: chat requests are not scored',
      );
    return ids as number[];
  },

  // GET or POST; 400 while requests run (http_server.py), unless `?timeout=` (seconds) lets it
  // wait for idle: half the backend's timeout, so that the answer comes within it. Older SGLang
  // ignores the parameter; a 400 then means the repeat goes without a flush.
  flush: (target) =>
    postFlush(target, `/flush_cache?timeout=${Math.max(1, Math.floor(target.timeoutMs / 2000))}`, {
      404: 'this SGLang has no /flush_cache',
    }),

  async tokenize(target, text, model) {
    return tokenIds(await postOk(target, '/tokenize', { model, prompt: text, add_special_tokens: false }));
  },

  // sglang/srt/entrypoints/http_server.py `/detokenize`: `{tokens, skip_special_tokens}` → `{text}`.
  async detokenize(target, ids, model) {
    return textField(await postOk(target, '/detokenize', { model, tokens: ids, skip_special_tokens: false }), 'text');
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
    if (
      !Array.isArray(chosen) ||
      !Array.isArray(tops) ||
      chosen.length !== tops.length ||
      chosen.length < ids.length - 1
    ) {
      throw new ScoringError(
        `meta_info.input_token_logprobs: expected at least ${ids.length - 1} entries, got ${Array.isArray(chosen) ? chosen.length : 'none'}`,
      );
    }
    // Entry k of the tail refers to input_ids[n - len + k]: the rule that holds in every version.
    const offset = ids.length - chosen.length;
    const steps: TokenStep[] = [];
    for (let i = Math.max(1, offset); i < ids.length; i++) {
      const tuple = chosen[i - offset] as unknown[] | null;
      const alts = tupleAlternatives(tops[i - offset]);
      const lp = Array.isArray(tuple) && readId(tuple[1]) === ids[i] ? tuple[0] : undefined;
      const text =
        Array.isArray(tuple) && typeof tuple[2] === 'string'
          ? tuple[2]
          : (alts.find((a) => a.id === ids[i])?.text ?? `token_id:${ids[i]}`);
      steps.push(forcedStep(ids[i]!, text, lp, alts));
    }
    const promptStart = Math.max(1, offset);
    return {
      promptStart,
      prompt: steps.slice(0, Math.max(0, spec.prompt.length - promptStart)),
      continuation: steps.slice(Math.max(0, spec.prompt.length - promptStart)),
    };
  },
};

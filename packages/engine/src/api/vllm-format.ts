/**
 * vLLM's OpenAI-server bodies (`vllm/entrypoints/openai/completion/protocol.py`,
 * `chat_completion/protocol.py`, serialised with every field, nulls included): the completions
 * logprobs with the sampled token first and `-inf` as -9999.0, `prompt_logprobs` keyed by token
 * id, `stop_reason`, and the usage block with `prompt_tokens_details`.
 */
import type { TokenRender } from '../format.js';
import type { FinishReason, GenerateResult, TopEntry } from '../generate.js';
import type { ModelSequence, NextTokenDistribution } from '../model.js';
import type { RouteContext } from '../route.js';
import { versionAtLeast } from './version.js';
import { VLLM_VERSION } from './vllm.js';

/** vLLM clamps -inf to -9999.0 in sample and prompt logprobs (`max(lp, -9999.0)`, `clamp_prompt_logprobs`). */
export function vllmLp(x: number): string {
  if (Number.isNaN(x)) return 'null';
  return x === -Infinity || x < -9999 ? '-9999.0' : String(x);
}

/**
 * The first vLLM release whose serving code reports a zero count: vllm-project/vllm#44383
 * (June 2026, after v0.20.2) turned `and num_cached_tokens:` into `is not None` in the chat and
 * completions serving; the release carrying it is taken to be 0.21.0 (not confirmed from a tag).
 */
export const VLLM_ZERO_CACHED_FROM = '0.21.0';

/**
 * `usage`, with `prompt_tokens_details` only under `--enable-prompt-tokens-details` (else null);
 * a count of 0 is dropped (null) before {@link VLLM_ZERO_CACHED_FROM}, as the older serving code's
 * truthiness test does.
 */
export function vllmUsage(ctx: RouteContext, promptTokens: number, completionTokens: number, cached: number): string {
  const zeroReported = versionAtLeast(ctx.server.engineVersion ?? VLLM_VERSION, VLLM_ZERO_CACHED_FROM);
  const details =
    ctx.server.promptTokensDetails && (cached > 0 || zeroReported) ? `{"cached_tokens":${cached}}` : 'null';
  return `{"prompt_tokens":${promptTokens},"total_tokens":${promptTokens + completionTokens},"completion_tokens":${completionTokens},"prompt_tokens_details":${details}}`;
}

/** Tokens a request took from the prefix cache. */
export function cachedTokens(seq: ModelSequence): number {
  return seq.cacheState?.().reused ?? 0;
}

/** `stop_reason`: the stop string that ended the completion, null for EOS or the length limit. */
export function stopReason(result: GenerateResult): string {
  return result.stopString === undefined ? 'null' : JSON.stringify(result.stopString);
}

function finishJson(f: FinishReason | null): string {
  return f === null ? 'null' : `"${f}"`;
}

/** One row of completions logprobs: a token and the id-dict of its position (null for the first prompt token). */
export interface VllmRow {
  readonly id: number;
  readonly logprob: number | null;
  /** The sampled/actual token first, then the top entries (vLLM's `[sampled, top-1, …]`). */
  readonly top: readonly TopEntry[] | null;
}

/**
 * The completions `logprobs` object `{text_offset, token_logprobs, tokens, top_logprobs}`:
 * `top_logprobs[i]` holds the first K+1 entries of the position's id-dict keyed by the
 * rendered token; a repeated key keeps its first position and takes the later value, as a
 * Python dict comprehension does. Offsets count rendered tokens from `offset0`.
 */
export function vllmCompletionLogprobs(t: TokenRender, rows: readonly VllmRow[], k: number, offset0 = 0): string {
  const offsets: number[] = [];
  let offset = offset0;
  for (const r of rows) {
    offsets.push(offset);
    offset += [...(JSON.parse(t.text(r.id)) as string)].length;
  }
  const tops = rows.map((r) => {
    if (r.top === null) return 'null';
    const dict = new Map<string, number>();
    const seen = new Set<number>();
    let i = 0;
    for (const e of [{ id: r.id, logprob: r.logprob ?? -Infinity }, ...r.top]) {
      if (seen.has(e.id)) continue;
      seen.add(e.id);
      if (i++ > k) break;
      dict.set(t.text(e.id), e.logprob);
    }
    return `{${[...dict].map(([key, lp]) => `${key}:${vllmLp(lp)}`).join(',')}}`;
  });
  return (
    `{"text_offset":[${offsets.join(',')}],"token_logprobs":[${rows.map((r) => (r.logprob === null ? 'null' : vllmLp(r.logprob))).join(',')}],` +
    `"tokens":[${rows.map((r) => t.text(r.id)).join(',')}],"top_logprobs":[${tops.join(',')}]}`
  );
}

/** The rank vLLM gives a token: how many tokens are at least as likely (itself included). */
export function vllmRank(dist: NextTokenDistribution, id: number, vocabSize: number): number {
  const lp = dist.logprobOf(id);
  let rank = 0;
  for (let v = 0; v < vocabSize; v++) if (dist.logprobOf(v) >= lp) rank++;
  return Math.max(rank, 1);
}

/**
 * `prompt_logprobs`: `null` for the first prompt token, then per token a dict keyed by the
 * token-id string — the actual prompt token first (with its true rank), then the top K (ranks
 * 1..K), so K or K+1 keys — of `{logprob, rank, decoded_token}`.
 */
export function vllmPromptLogprobs(
  ctx: RouteContext,
  prompt: readonly number[],
  dists: readonly NextTokenDistribution[],
  k: number,
): string {
  const { model } = ctx;
  const text = (id: number): string => JSON.stringify(model.tokenText(id));
  const parts = ['null'];
  for (let i = 1; i < prompt.length; i++) {
    const d = dists[i - 1];
    if (!d) break;
    const actual = prompt[i] as number;
    const entries: string[] = [
      `"${actual}":{"logprob":${vllmLp(d.logprobOf(actual))},"rank":${vllmRank(d, actual, model.vocabSize)},"decoded_token":${text(actual)}}`,
    ];
    const n = Math.min(k, d.ids.length);
    for (let r = 0; r < n; r++) {
      const id = d.ids[r] as number;
      if (id === actual) continue;
      entries.push(
        `"${id}":{"logprob":${vllmLp(d.logprobs[r] as number)},"rank":${r + 1},"decoded_token":${text(id)}}`,
      );
    }
    parts.push(`{${entries.join(',')}}`);
  }
  return `[${parts.join(',')}]`;
}

/** Fields of a non-streamed completions choice. */
export interface VllmChoice {
  readonly text: string;
  readonly logprobs: string | null;
  readonly finish: FinishReason;
  readonly stopReason: string;
  readonly tokenIds: readonly number[] | null;
  readonly promptLogprobs: string | null;
  readonly promptTokenIds: readonly number[] | null;
}

/** A non-streamed `/v1/completions` body. */
export function vllmCompletionBody(ctx: RouteContext, c: VllmChoice, usage: string): string {
  const m = ctx.meta;
  return (
    `{"id":${JSON.stringify(m.id)},"object":"text_completion","created":${m.created},"model":${JSON.stringify(m.model)},` +
    `"choices":[{"index":0,"text":${JSON.stringify(c.text)},"logprobs":${c.logprobs ?? 'null'},"finish_reason":${finishJson(c.finish)},"stop_reason":${c.stopReason},` +
    (c.tokenIds ? `"token_ids":[${c.tokenIds.join(',')}],` : '') +
    `"prompt_logprobs":${c.promptLogprobs ?? 'null'}` +
    (c.promptTokenIds ? `,"prompt_token_ids":[${c.promptTokenIds.join(',')}]` : '') +
    `}],"service_tier":null,"system_fingerprint":null,"usage":${usage},"kv_transfer_params":null}`
  );
}

/** A streamed `/v1/completions` chunk. */
export function vllmCompletionChunk(
  ctx: RouteContext,
  text: string,
  logprobs: string | null,
  finish: FinishReason | null,
  stop: string,
  ids: { prompt?: readonly number[]; tokens?: readonly number[] },
): string {
  const m = ctx.meta;
  return (
    `{"id":${JSON.stringify(m.id)},"object":"text_completion","created":${m.created},"model":${JSON.stringify(m.model)},` +
    `"choices":[{"index":0,"text":${JSON.stringify(text)},"logprobs":${logprobs ?? 'null'},"finish_reason":${finishJson(finish)},"stop_reason":${stop}` +
    (ids.prompt ? `,"prompt_token_ids":[${ids.prompt.join(',')}]` : '') +
    (ids.tokens ? `,"token_ids":[${ids.tokens.join(',')}]` : '') +
    `}]}`
  );
}

/** The streamed usage chunk (`stream_options.include_usage`): no choices. */
export function vllmUsageChunk(ctx: RouteContext, usage: string, object = 'text_completion'): string {
  const m = ctx.meta;
  return `{"id":${JSON.stringify(m.id)},"object":"${object}","created":${m.created},"model":${JSON.stringify(m.model)},"choices":[],"usage":${usage}}`;
}

/** A non-streamed `/v1/chat/completions` body. */
export function vllmChatBody(
  ctx: RouteContext,
  seq: ModelSequence,
  content: string,
  logprobs: string | null,
  result: GenerateResult,
  usage: { promptTokens: number; completionTokens: number },
  ids: { tokenIds: readonly number[]; promptTokenIds: readonly number[] } | null = null,
): string {
  const m = ctx.meta;
  return (
    `{"id":${JSON.stringify(m.id)},"object":"chat.completion","created":${m.created},"model":${JSON.stringify(m.model)},` +
    `"choices":[{"index":0,"message":{"role":"assistant","reasoning_content":null,"content":${JSON.stringify(content)},"tool_calls":[]},` +
    `"logprobs":${logprobs ?? 'null'},"finish_reason":${finishJson(result.finishReason)},"stop_reason":${stopReason(result)}${ids ? `,"token_ids":[${ids.tokenIds.join(',')}]` : ''}}],` +
    `"service_tier":null,"system_fingerprint":null,"usage":${vllmUsage(ctx, usage.promptTokens, usage.completionTokens, cachedTokens(seq))},` +
    `"prompt_logprobs":null,${ids ? `"prompt_token_ids":[${ids.promptTokenIds.join(',')}],` : ''}"kv_transfer_params":null}`
  );
}

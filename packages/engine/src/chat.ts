/**
 * `POST /v1/chat/completions`: messages → the chat template → completion, non-streamed or as
 * OpenAI's chat stream: a role chunk, one chunk per token, a finish chunk with an empty delta,
 * an optional usage chunk with no choices, then `[DONE]`. With `vllm`, the logprobs and the
 * non-streamed body are vLLM's (no `refusal`, `stop_reason`, `prompt_tokens_details`).
 */
import { applyChatTemplate } from './chat-template.js';
import {
  chatBody,
  chatFinishChunk,
  chatFirstChunk,
  chatLogprobItem,
  chatLogprobs,
  chatTokenChunk,
  chatUsageChunk,
  type TokenRender,
} from './format.js';
import { generate, type TokenStep } from './generate.js';
import type { ModelSequence } from './model.js';
import type { ChatRequest, SamplingParams } from './request.js';
import type { Rng } from './sampling.js';
import {
  cacheReport,
  defaultCache,
  promptCells,
  samplingRng,
  sendJson,
  sleep,
  startSequence,
  type RouteContext,
} from './route.js';
import { SseWriter } from './sse.js';
import { vllmChatBody } from './api/vllm-format.js';
import { vllmReport } from './api/vllm-logprobs-mode.js';

/** How the engine renders chat logprobs. Default: OpenAI's. */
export interface ChatStyle {
  /** Token names (vLLM's `return_tokens_as_token_ids` renders `token_id:N`). */
  readonly tokens?: TokenRender;
  /** vLLM's shapes: logprobs without `refusal`, its non-streamed body. */
  readonly vllm?: boolean;
  /** vLLM's `return_token_ids` (≥ 0.10.2): the generated ids in `choices[0].token_ids`, the prompt's in `prompt_token_ids`. */
  readonly returnTokenIds?: boolean;
}

/** One chat request under way: what its whole answer and its stream both read. */
interface ChatJob {
  ctx: RouteContext;
  req: ChatRequest;
  style: ChatStyle;
  cells: readonly number[];
  seq: ModelSequence;
  params: SamplingParams;
  rng: Rng;
  topN: number | null;
  withLogprobs: boolean;
  tokens: TokenRender;
  /** The `refusal` field of OpenAI's logprobs (vLLM has none). */
  refusal: boolean;
}

/** Serves one validated chat request. */
export async function serveChat(ctx: RouteContext, req: ChatRequest, style: ChatStyle = {}): Promise<void> {
  const { cells, addBos } = promptCells(ctx, { text: applyChatTemplate(req.messages, {}, ctx.server.chatTemplate) });
  const withLogprobs = req.logprobs && !ctx.faults.nologprobs;
  const { seq, maxTokens } = await startSequence(ctx, cells, req.maxTokens, { addBos, cache: defaultCache(ctx) });
  try {
    const job: ChatJob = {
      ctx,
      req,
      style,
      cells,
      seq,
      params: { ...req, maxTokens },
      rng: samplingRng(req, ctx.requestSeed),
      topN: withLogprobs ? req.topLogprobs : null,
      withLogprobs,
      tokens: style.tokens ?? ctx.tokens,
      refusal: !style.vllm,
    };
    if (!req.stream) await sendChat(job);
    else await streamChat(job);
  } finally {
    await seq.dispose();
  }
}

/** The whole answer at once, in OpenAI's shape or vLLM's. */
async function sendChat(j: ChatJob): Promise<void> {
  const { ctx, req, style, cells, seq, params, rng, topN, withLogprobs, tokens, refusal } = j;
  const { model } = ctx;
  const steps: TokenStep[] = [];
  const result = await generate({
    model,
    seq,
    params,
    topN,
    rng,
    ...vllmReport(ctx, params),
    signal: ctx.signal,
    tokenDelayMs: ctx.tokenDelayMs,
    emit: (s) => void steps.push(...s),
  });
  const content = steps.map((s) => s.text).join('');
  const logprobs = withLogprobs
    ? chatLogprobs(
        steps.map((s) => chatLogprobItem(tokens, s, req.topLogprobs)),
        refusal,
      )
    : null;
  const usage = {
    promptTokens: cells.length,
    completionTokens: result.completionTokens,
    details: cacheReport(ctx, seq),
  };
  if (style.vllm)
    sendJson(
      ctx.res,
      200,
      vllmChatBody(
        ctx,
        seq,
        content,
        logprobs,
        result,
        usage,
        style.returnTokenIds ? { tokenIds: steps.map((s) => s.id), promptTokenIds: cells } : null,
      ),
    );
  else sendJson(ctx.res, 200, chatBody(ctx.meta, content, logprobs, result.finishReason, usage));
}

/** The answer as a stream: the role chunk, a chunk per token, the finish chunk and the usage. */
async function streamChat(j: ChatJob): Promise<void> {
  const { ctx, req, cells, seq, params, rng, topN, withLogprobs, tokens, refusal } = j;
  const { model } = ctx;
  const sse = new SseWriter(ctx.res, ctx.signal);
  sse.open();
  await sse.send(chatFirstChunk(ctx.meta, withLogprobs, refusal));
  let sent = 0;
  const emit = async (steps: TokenStep[]): Promise<void> => {
    for (const s of steps) {
      const lp = withLogprobs ? chatLogprobs([chatLogprobItem(tokens, s, req.topLogprobs)], refusal) : null;
      await sse.send(chatTokenChunk(ctx.meta, s.text, lp));
      if (++sent === 1 && ctx.faults.stallMs > 0) await sleep(ctx.faults.stallMs, ctx.signal);
    }
  };
  const result = await generate({
    model,
    seq,
    params,
    topN,
    rng,
    ...vllmReport(ctx, params),
    signal: ctx.signal,
    tokenDelayMs: ctx.tokenDelayMs,
    emit,
  });
  await sse.send(chatFinishChunk(ctx.meta, result.finishReason));
  if (req.includeUsage)
    await sse.send(
      chatUsageChunk(ctx.meta, {
        promptTokens: cells.length,
        completionTokens: result.completionTokens,
        details: cacheReport(ctx, seq),
      }),
    );
  sse.done();
}

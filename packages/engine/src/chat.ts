/**
 * `POST /v1/chat/completions`: messages → the chat template → completion, non-streamed or as
 * OpenAI's chat stream: a role chunk, one chunk per token, a finish chunk with an empty delta,
 * an optional usage chunk with no choices, then `[DONE]`.
 */
import { applyChatTemplate } from './chat-template.js';
import { chatBody, chatFinishChunk, chatFirstChunk, chatLogprobItem, chatLogprobs, chatTokenChunk, chatUsageChunk } from './format.js';
import { generate, type TokenStep } from './generate.js';
import type { ChatRequest } from './request.js';
import { samplingRng, sendJson, sleep, startSequence, type RouteContext } from './route.js';
import { SseWriter } from './sse.js';

/** Serves one validated chat request. */
export async function serveChat(ctx: RouteContext, req: ChatRequest): Promise<void> {
  const { model } = ctx;
  const promptIds = model.tokenize(applyChatTemplate(req.messages));
  const withLogprobs = req.logprobs && !ctx.faults.nologprobs;
  const topN = withLogprobs ? req.topLogprobs : null;
  const { seq, maxTokens } = await startSequence(ctx, promptIds, req.maxTokens);
  try {
    const params = { ...req, maxTokens };
    const rng = samplingRng(req, ctx.requestSeed);

    if (!req.stream) {
      const steps: TokenStep[] = [];
      const result = await generate({ model, seq, params, topN, rng, signal: ctx.signal, tokenDelayMs: ctx.tokenDelayMs, emit: (s) => void steps.push(...s) });
      const content = steps.map((s) => s.text).join('');
      const logprobs = withLogprobs ? chatLogprobs(steps.map((s) => chatLogprobItem(ctx.tokens, s, req.topLogprobs))) : null;
      const usage = { promptTokens: promptIds.length, completionTokens: result.completionTokens };
      sendJson(ctx.res, 200, chatBody(ctx.meta, content, logprobs, result.finishReason, usage));
      return;
    }

    const sse = new SseWriter(ctx.res, ctx.signal);
    sse.open();
    await sse.send(chatFirstChunk(ctx.meta, withLogprobs));
    let sent = 0;
    const emit = async (steps: TokenStep[]): Promise<void> => {
      for (const s of steps) {
        const lp = withLogprobs ? chatLogprobs([chatLogprobItem(ctx.tokens, s, req.topLogprobs)]) : null;
        await sse.send(chatTokenChunk(ctx.meta, s.text, lp));
        if (++sent === 1 && ctx.faults.stallMs > 0) await sleep(ctx.faults.stallMs, ctx.signal);
      }
    };
    const result = await generate({ model, seq, params, topN, rng, signal: ctx.signal, tokenDelayMs: ctx.tokenDelayMs, emit });
    await sse.send(chatFinishChunk(ctx.meta, result.finishReason));
    if (req.includeUsage) await sse.send(chatUsageChunk(ctx.meta, { promptTokens: promptIds.length, completionTokens: result.completionTokens }));
    sse.done();
  } finally {
    await seq.dispose();
  }
}

/**
 * `POST /v1/completions`: prompt (text or token ids) → completion, non-streamed or as OpenAI's
 * legacy stream: one token per chunk (the last one carrying finish_reason), a trailing chunk with
 * empty logprob arrays and finish_reason, an optional usage chunk, then `[DONE]`.
 */
import { badRequest } from './errors.js';
import {
  completionBody,
  completionChunk,
  completionLogprobs,
  completionRows,
  completionUsageChunk,
  EMPTY_COMPLETION_LOGPROBS,
  type CompletionRow,
} from './format.js';
import { generate, topEntries, type TokenStep } from './generate.js';
import type { ModelSequence } from './model.js';
import type { CompletionRequest, SamplingParams } from './request.js';
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

/** Logprob rows for an echoed prompt: the first token has no conditional (null), as on vLLM. */
async function echoRows(
  ctx: RouteContext,
  seq: ModelSequence,
  prompt: readonly number[],
  n: number,
): Promise<CompletionRow[]> {
  if (prompt.length === 0) return [];
  if (!seq.promptDistributions)
    throw badRequest('this engine cannot return prompt logprobs: use echo without logprobs', 'echo');
  const dists = await seq.promptDistributions();
  const decoder = new TextDecoder();
  const rows: CompletionRow[] = [];
  let offset = 0;
  prompt.forEach((id, i) => {
    const dist = i === 0 ? undefined : dists[i - 1];
    rows.push({ id, logprob: dist ? dist.logprobOf(id) : null, top: dist ? topEntries(dist, n) : null, offset });
    offset += decoder.decode(ctx.model.tokenBytes(id), { stream: true }).length;
  });
  return rows;
}

/** Serves one validated completions request. */
export async function serveCompletion(ctx: RouteContext, req: CompletionRequest): Promise<void> {
  const { model } = ctx;
  const { cells: promptIds, addBos } = promptCells(ctx, req.prompt);
  const promptText = 'text' in req.prompt ? req.prompt.text : model.detokenize(req.prompt.ids);
  const n = ctx.faults.nologprobs ? null : req.logprobs;
  if (promptIds.length === 0 && !addBos) throw badRequest('the prompt is empty', 'prompt');
  const echoLogprobs = req.echo && n !== null;
  const { seq, maxTokens } = await startSequence(ctx, promptIds, req.maxTokens, {
    addBos,
    // Prompt logprobs are computed, not read from the cache (as vLLM skips it for them).
    cache: echoLogprobs && ctx.server.prefixCache ? { read: false, write: true } : defaultCache(ctx),
    ...(echoLogprobs ? { promptLogprobsFrom: 1 } : {}),
  });
  try {
    const job: CompletionJob = {
      ctx,
      req,
      promptIds,
      promptText,
      n,
      seq,
      echoed: echoLogprobs ? await echoRows(ctx, seq, promptIds, n) : null,
      params: { ...req, maxTokens },
      rng: samplingRng(req, ctx.requestSeed),
      base: promptText.length,
    };
    if (!req.stream) await sendCompletion(job);
    else await streamCompletion(job);
  } finally {
    await seq.dispose();
  }
}

/** One completions request under way: what its whole answer and its stream both read. */
interface CompletionJob {
  ctx: RouteContext;
  req: CompletionRequest;
  promptIds: readonly number[];
  promptText: string;
  /** Top logprobs per token (null: none asked). */
  n: number | null;
  seq: ModelSequence;
  /** The prompt's rows when echoed with logprobs. */
  echoed: CompletionRow[] | null;
  params: SamplingParams;
  rng: Rng;
  /** Where the generated text starts in the echoed text (its logprobs' text offsets). */
  base: number;
}

/** The whole answer at once. */
async function sendCompletion(j: CompletionJob): Promise<void> {
  const { ctx, req, promptIds, promptText, n, seq, echoed, params, rng, base } = j;
  const { model } = ctx;
  const steps: TokenStep[] = [];
  const result = await generate({
    model,
    seq,
    params,
    topN: n,
    rng,
    signal: ctx.signal,
    tokenDelayMs: ctx.tokenDelayMs,
    emit: (s) => void steps.push(...s),
  });
  const text = (req.echo ? promptText : '') + steps.map((s) => s.text).join('');
  const logprobs =
    n === null ? null : completionLogprobs(ctx.tokens, [...(echoed ?? []), ...completionRows(steps, base)]);
  const usage = {
    promptTokens: promptIds.length,
    completionTokens: result.completionTokens,
    details: cacheReport(ctx, seq),
  };
  sendJson(ctx.res, 200, completionBody(ctx.meta, text, logprobs, result.finishReason, usage));
}

/** The answer as a stream: the echoed prompt, a chunk per token (the last with finish_reason), an empty finish chunk, the usage. */
async function streamCompletion(j: CompletionJob): Promise<void> {
  const { ctx, req, promptIds, promptText, n, seq, echoed, params, rng, base } = j;
  const { model } = ctx;
  const sse = new SseWriter(ctx.res, ctx.signal);
  sse.open();
  if (req.echo)
    await sse.send(completionChunk(ctx.meta, promptText, echoed ? completionLogprobs(ctx.tokens, echoed) : null, null));
  // One token of lookahead: the last token's chunk carries finish_reason, as OpenAI's does.
  let pending: TokenStep | null = null;
  let sent = 0;
  const chunkOf = (s: TokenStep, finish: 'stop' | 'length' | null): string =>
    completionChunk(
      ctx.meta,
      s.text,
      n === null ? null : completionLogprobs(ctx.tokens, completionRows([s], base)),
      finish,
    );
  const emit = async (steps: TokenStep[]): Promise<void> => {
    for (const s of steps) {
      if (pending) {
        await sse.send(chunkOf(pending, null));
        if (++sent === 1 && ctx.faults.stallMs > 0) await sleep(ctx.faults.stallMs, ctx.signal);
      }
      pending = s;
    }
  };
  const result = await generate({
    model,
    seq,
    params,
    topN: n,
    rng,
    signal: ctx.signal,
    tokenDelayMs: ctx.tokenDelayMs,
    emit,
  });
  const last = pending as TokenStep | null;
  if (last) await sse.send(chunkOf(last, result.finishReason));
  await sse.send(completionChunk(ctx.meta, '', n === null ? null : EMPTY_COMPLETION_LOGPROBS, result.finishReason));
  if (req.includeUsage)
    await sse.send(
      completionUsageChunk(ctx.meta, {
        promptTokens: promptIds.length,
        completionTokens: result.completionTokens,
        details: cacheReport(ctx, seq),
      }),
    );
  sse.done();
}

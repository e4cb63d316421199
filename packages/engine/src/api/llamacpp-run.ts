/**
 * One llama-server generation, shared by its native `/completion` and its OpenAI routes: the
 * request's sampling fields with llama-server's defaults (`params_from_json_cmpl`), the prefix
 * cache as `cache_prompt` uses it, timings, and b4748's `n_predict: 0` quirk.
 */
import { badRequest } from '../errors.js';
import { generate, type GenerateResult, type TokenStep } from '../generate.js';
import type { ModelSequence, NextTokenDistribution } from '../model.js';
import { bool, num, stopStrings, type Body, type SamplingParams } from '../request.js';
import { samplingRng, startSequence, type RouteContext } from '../route.js';
import type { ChainSettings, SettingsEcho, Timings } from './llamacpp-format.js';

/** LLAMA_DEFAULT_SEED: "random" (what generation_settings shows for an unset seed). */
const DEFAULT_SEED = 4294967295;

/** A request's generation fields. */
export interface LlamaParams extends SettingsEcho {
  readonly cachePrompt: boolean;
  readonly returnTokens: boolean;
  /** The request's own seed, or null for a random one. */
  readonly userSeed: number | null;
}

/** Reads llama-server's fields; `nPredictField` is `max_tokens` on the OpenAI routes. */
export function llamaParams(
  body: Body,
  o: { nPredict?: number | undefined; nProbs?: number | undefined; stream?: boolean } = {},
): LlamaParams {
  const seed = num(body, 'seed', { integer: true });
  const userSeed = seed === undefined || seed < 0 || seed === DEFAULT_SEED ? null : seed;
  return {
    nPredict:
      o.nPredict ?? num(body, 'n_predict', { integer: true }) ?? num(body, 'max_tokens', { integer: true }) ?? -1,
    // llama-server's defaults: --temp 0.8, --top-k 40, --top-p 0.95, --min-p 0.05.
    temperature: num(body, 'temperature') ?? 0.8,
    topK: num(body, 'top_k', { integer: true }) ?? 40,
    topP: num(body, 'top_p') ?? 0.95,
    minP: num(body, 'min_p') ?? 0.05,
    seed: userSeed ?? DEFAULT_SEED,
    userSeed,
    stop: stopStrings(body),
    stream: o.stream ?? bool(body, 'stream') ?? false,
    nProbs: o.nProbs ?? num(body, 'n_probs', { integer: true, min: 0 }) ?? 0,
    postSampling: bool(body, 'post_sampling_probs') ?? false,
    cachePrompt: bool(body, 'cache_prompt') ?? true,
    returnTokens: bool(body, 'return_tokens') ?? false,
  };
}

/** The sampler settings that shape `post_sampling_probs`, or null without it. */
export function chainOf(p: LlamaParams): ChainSettings | null {
  return p.postSampling ? { temperature: p.temperature, topK: p.topK, topP: p.topP, minP: p.minP } : null;
}

/** A finished generation. */
export interface LlamaRun {
  readonly cells: readonly number[];
  readonly steps: readonly TokenStep[];
  readonly result: GenerateResult;
  readonly timings: Timings;
  /** `tokens_cached`: the tokens the slot holds for this request at the end (n_past). */
  readonly held: number;
  /** Sampled tokens, end-of-sequence included (`tokens_predicted`). */
  readonly predicted: number;
}

/** A sequence that notes when its first distribution (the end of the prompt's evaluation) arrived. */
function timed(seq: ModelSequence, at: { firstMs: number }): ModelSequence {
  const t0 = performance.now();
  return {
    next: async (): Promise<NextTokenDistribution> => {
      const d = await seq.next();
      if (at.firstMs < 0) at.firstMs = performance.now() - t0;
      return d;
    },
    push: (id) => seq.push(id),
    dispose: () => seq.dispose(),
    ...(seq.promptDistributions ? { promptDistributions: () => seq.promptDistributions!() } : {}),
    ...(seq.cacheState ? { cacheState: () => seq.cacheState!() } : {}),
  };
}

/** llama-server's sampling parameters as `generate` reads them: a temperature ≤ 0 is greedy. */
function samplingParams(p: LlamaParams, maxTokens: number): SamplingParams {
  const greedy = p.temperature <= 0;
  return {
    maxTokens,
    temperature: greedy ? 0 : p.temperature,
    topP: p.topP,
    topK: p.topK,
    seed: p.userSeed,
    stop: p.stop,
    stream: p.stream,
    includeUsage: false,
  };
}

/**
 * Runs one generation on `cells` (used verbatim: llama-server adds BOS to text prompts only),
 * reading and keeping the slot's prefix unless `cache_prompt` is false, which empties it.
 * `emit` sees tokens as they are final (for streams).
 */
export async function runLlama(
  ctx: RouteContext,
  cells: readonly number[],
  p: LlamaParams,
  emit?: (steps: TokenStep[]) => Promise<void> | void,
): Promise<LlamaRun> {
  if (cells.length === 0) throw badRequest('empty prompt', 'prompt');
  const use = ctx.server.prefixCache && p.cachePrompt;
  // b4748 checks the limit after sampling, so n_predict 0 still yields one token
  // (fixture completion_token_ids_n_predict0.json: "tokens_predicted":1).
  const limit = p.nPredict < 0 ? Infinity : Math.max(1, p.nPredict);
  const { seq: inner, maxTokens } = await startSequence(ctx, cells, Math.min(limit, ctx.maxContext), {
    addBos: false,
    cache: use ? { read: true, write: true } : undefined,
  });
  const at = { firstMs: -1 };
  const seq = timed(inner, at);
  const t0 = performance.now();
  const steps: TokenStep[] = [];
  const params = samplingParams(p, maxTokens);
  const topN = ctx.faults.nologprobs || p.nProbs === 0 ? null : p.nProbs;
  try {
    const result = await generate({
      model: ctx.model,
      seq,
      params,
      topN,
      rng: samplingRng(params, ctx.requestSeed),
      signal: ctx.signal,
      tokenDelayMs: ctx.tokenDelayMs,
      keepDistributions: topN !== null,
      emit: async (s) => {
        steps.push(...s);
        await emit?.(s);
      },
    });
    const total = performance.now() - t0;
    const state = inner.cacheState?.() ?? {
      cells: cells.length,
      reused: 0,
      held: cells.length + Math.max(0, steps.length - 1),
    };
    const promptMs = Math.max(0, at.firstMs);
    const predicted = result.completionTokens + (result.eos ? 1 : 0);
    return {
      cells,
      steps,
      result,
      timings: {
        promptN: cells.length - state.reused,
        promptMs,
        predictedN: predicted,
        predictedMs: Math.max(0, total - promptMs),
      },
      held: state.held,
      predicted,
    };
  } finally {
    await inner.dispose();
  }
}

/**
 * vLLM's `/v1/completions` (`completion/protocol.py` `CompletionRequest`, `completion/serving.py`),
 * the scoring path of the vLLM profile: token-id prompts used verbatim, `prompt_logprobs: K`
 * (the actual prompt token plus the top K per position, keyed by token id), `echo` with
 * `max_tokens: 0` (the prompt only), `return_tokens_as_token_ids`, `return_token_ids`, and the
 * `--max-logprobs` 20 cap in vLLM's words.
 */
import { badRequest, EngineHttpError } from '../errors.js';
import { TOKEN_ID_RENDER, type TokenRender } from '../format.js';
import { generate, topEntries, type GenerateResult, type TokenStep } from '../generate.js';
import type { ModelSequence, NextTokenDistribution } from '../model.js';
import { bool, parseCompletionRequest, type Body, type CompletionRequest, type SamplingParams } from '../request.js';
import type { Rng } from '../sampling.js';
import { samplingRng, sendJson, sleep, startSequence, type RouteContext } from '../route.js';
import { SseWriter } from '../sse.js';
import { textCells } from './profile.js';
import { vllmReport } from './vllm-logprobs-mode.js';
import {
  cachedTokens,
  stopReason,
  vllmCompletionBody,
  vllmCompletionChunk,
  vllmCompletionLogprobs,
  vllmPromptLogprobs,
  vllmUsage,
  vllmUsageChunk,
  type VllmRow,
} from './vllm-format.js';

/** vLLM's `--max-logprobs` default (`ModelConfig.max_logprobs = 20`); the server's `maxLogprobs` sets another. */
export const VLLM_MAX_LOGPROBS = 20;
/** vLLM's KV block size: the prefix cache serves whole blocks only. */
export const VLLM_BLOCK_SIZE = 16;

/** A `VLLMValidationError`, rendered as vLLM does: `message (parameter=…, value=…)`. */
export function vllmValidation(message: string, param: string, value?: unknown): EngineHttpError {
  return badRequest(value === undefined ? message : `${message} (parameter=${param}, value=${String(value)})`, param);
}

/**
 * `logprobs` / `prompt_logprobs` / chat `top_logprobs`: an integer ≥ 0 or -1 (the vocabulary), at
 * most `--max-logprobs` (`max`, -1: the vocabulary), as `SamplingParams._validate_logprobs`
 * (a 0 is never checked: `if num_logprobs := self.logprobs`).
 */
export function vllmLogprobCount(
  body: Body,
  field: string,
  kind: 'sample' | 'prompt',
  vocabSize: number,
  max = VLLM_MAX_LOGPROBS,
  param = field,
): number | null {
  const v = body[field];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw vllmValidation(`\`${field}\` must be an integer.`, field);
  if (v < 0 && v !== -1) throw vllmValidation(`\`${field}\` must be a positive value or -1.`, field);
  const n = v === -1 ? vocabSize : v;
  const cap = max === -1 ? vocabSize : max;
  if (n > cap)
    throw vllmValidation(`Requested ${kind} logprobs of ${n}, which is greater than max allowed: ${cap}`, param, n);
  return n;
}

/** A validated vLLM completions request. */
export interface VllmCompletionRequest extends CompletionRequest {
  readonly promptLogprobs: number | null;
  readonly tokenIds: boolean;
  readonly returnTokenIds: boolean;
  readonly addSpecialTokens: boolean;
}

/** Validates a vLLM `/v1/completions` body, with vLLM's rules and messages first. */
export function parseVllmCompletion(
  body: Body,
  vocabSize: number,
  maxLogprobs = VLLM_MAX_LOGPROBS,
): VllmCompletionRequest {
  const logprobs = vllmLogprobCount(body, 'logprobs', 'sample', vocabSize, maxLogprobs);
  const promptLogprobs = vllmLogprobCount(body, 'prompt_logprobs', 'prompt', vocabSize, maxLogprobs);
  const echo = bool(body, 'echo') ?? false;
  if (promptLogprobs !== null && body.stream === true)
    throw badRequest('`prompt_logprobs` are not available when `stream=True`.', 'prompt_logprobs');
  const maxTokens = body.max_tokens;
  // SamplingParams._verify_args; only echo may ask for 0 (the prompt alone, one token generated inside).
  if (typeof maxTokens === 'number' && Number.isInteger(maxTokens) && (maxTokens < 0 || (maxTokens === 0 && !echo))) {
    throw vllmValidation(`max_tokens must be at least 1, got ${maxTokens}.`, 'max_tokens', maxTokens);
  }
  // The cap is vLLM's, checked above; the generic parser's OpenAI maximum (20) does not apply.
  const base = parseCompletionRequest({ ...body, logprobs: null }, vocabSize);
  return {
    ...base,
    logprobs,
    promptLogprobs,
    tokenIds: bool(body, 'return_tokens_as_token_ids') ?? false,
    returnTokenIds: bool(body, 'return_token_ids') ?? false,
    addSpecialTokens: bool(body, 'add_special_tokens') ?? true,
  };
}

function promptRows(cells: readonly number[], dists: readonly NextTokenDistribution[], k: number): VllmRow[] {
  return cells.map((id, i) => {
    const d = i === 0 ? undefined : dists[i - 1];
    return d ? { id, logprob: d.logprobOf(id), top: topEntries(d, k) } : { id, logprob: null, top: null };
  });
}

const stepRows = (steps: readonly TokenStep[]): VllmRow[] =>
  steps.map((s) => ({ id: s.id, logprob: s.logprob, top: s.top ?? [] }));

/** One vLLM completions request under way: what its whole answer and its stream both read. */
interface VllmJob {
  ctx: RouteContext;
  req: VllmCompletionRequest;
  cells: readonly number[];
  /** Top logprobs per generated token (null: none asked). */
  n: number | null;
  promptK: number | null;
  promptTop: number;
  echoOnly: boolean;
  render: TokenRender;
  seq: ModelSequence;
  dists: readonly NextTokenDistribution[] | null | undefined;
  promptText: string;
  params: SamplingParams;
  rng: Rng;
  echoRows: VllmRow[];
}

/** Serves one validated vLLM completions request. */
export async function serveVllmCompletion(ctx: RouteContext, req: VllmCompletionRequest): Promise<void> {
  const { model } = ctx;
  const cells = 'text' in req.prompt ? textCells(model, req.prompt.text, req.addSpecialTokens) : [...req.prompt.ids];
  if (cells.length === 0) throw badRequest('The decoder prompt cannot be empty', 'prompt');
  const n = ctx.faults.nologprobs ? null : req.logprobs;
  // to_sampling_params: echo with logprobs asks for prompt logprobs of the same size.
  const promptK = ctx.faults.nologprobs
    ? null
    : (req.promptLogprobs ?? (req.echo && req.logprobs !== null ? req.logprobs : null));
  const echoOnly = req.echo && req.maxTokens === 0;
  // The V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1, v1/worker/gpu/sample/prompt_logprob.py): "only
  // support prompt logprobs for the prompt tokens (not top-k)" — each position carries its own token alone.
  const promptTop = promptK === null ? 0 : ctx.server.v2ModelRunner ? 0 : promptK;
  const render: TokenRender = req.tokenIds ? TOKEN_ID_RENDER : ctx.tokens;
  const { seq, maxTokens } = await startSequence(ctx, cells, echoOnly ? 1 : req.maxTokens, {
    addBos: false,
    // vLLM: prompt_logprobs skip reading the prefix cache (SamplingParams.skip_reading_prefix_cache), but their blocks are still cached.
    cache: ctx.server.prefixCache ? { read: promptK === null, write: true, block: VLLM_BLOCK_SIZE } : undefined,
    ...(promptK !== null ? { promptLogprobsFrom: 1 } : {}),
  });
  try {
    const dists = promptK !== null ? await seq.promptDistributions?.() : null;
    if (promptK !== null && !dists) throw badRequest('this engine cannot return prompt logprobs', 'prompt_logprobs');
    const job: VllmJob = {
      ctx,
      req,
      cells,
      n,
      promptK,
      promptTop,
      echoOnly,
      render,
      seq,
      dists,
      promptText: req.returnTokenIds ? '' : 'text' in req.prompt ? req.prompt.text : model.detokenize(cells),
      params: { ...req, maxTokens },
      rng: samplingRng(req, ctx.requestSeed),
      echoRows: req.echo && dists ? promptRows(cells, dists, promptTop) : [],
    };
    if (!req.stream) await sendVllmCompletion(job);
    else await streamVllmCompletion(job);
  } finally {
    await seq.dispose();
  }
}

/** The whole answer at once. */
async function sendVllmCompletion(j: VllmJob): Promise<void> {
  const { ctx, req, n, echoOnly, promptText } = j;
  const steps: TokenStep[] = [];
  const result = await generate({
    model: ctx.model,
    seq: j.seq,
    params: j.params,
    topN: n,
    rng: j.rng,
    ...vllmReport(ctx, j.params),
    signal: ctx.signal,
    tokenDelayMs: ctx.tokenDelayMs,
    emit: (s) => void steps.push(...s),
  });
  const generated = steps.map((s) => s.text).join('');
  const rows = echoOnly ? j.echoRows : [...j.echoRows, ...stepRows(steps)];
  const text = echoOnly ? promptText : (req.echo ? promptText : '') + generated;
  sendJson(
    ctx.res,
    200,
    vllmCompletionBody(
      ctx,
      {
        text,
        logprobs: n === null ? null : vllmCompletionLogprobs(j.render, rows, n),
        finish: result.finishReason,
        stopReason: stopReason(result),
        tokenIds: req.returnTokenIds ? steps.map((s) => s.id) : null,
        promptLogprobs: j.dists && j.promptK !== null ? vllmPromptLogprobs(ctx, j.cells, j.dists, j.promptTop) : null,
        promptTokenIds: req.returnTokenIds ? j.cells : null,
      },
      vllmUsage(ctx, j.cells.length, result.completionTokens, cachedTokens(j.seq)),
    ),
  );
}

/**
 * What each chunk carries besides its text: the token ids (the prompt's with the first chunk) and
 * the logprobs, whose text offsets run on across chunks.
 */
function chunkParts(j: VllmJob): {
  ids: (tokens: readonly number[]) => { prompt?: readonly number[]; tokens?: readonly number[] };
  lpOf: (rows: VllmRow[]) => string | null;
} {
  const { req, n, cells } = j;
  let offset = 0;
  let first = true;
  const ids = (tokens: readonly number[]): { prompt?: readonly number[]; tokens?: readonly number[] } => {
    if (!req.returnTokenIds) return {};
    const out = first ? { prompt: cells, tokens } : { tokens };
    first = false;
    return out;
  };
  const lpOf = (rows: VllmRow[]): string | null => {
    if (n === null) return null;
    const json = vllmCompletionLogprobs(j.render, rows, n, offset);
    for (const r of rows) offset += [...(JSON.parse(j.render.text(r.id)) as string)].length;
    return json;
  };
  return { ids, lpOf };
}

/** The answer as a stream: the echoed prompt first (alone when max_tokens is 0), then a chunk per token. */
async function streamVllmCompletion(j: VllmJob): Promise<void> {
  const { ctx, req, n, seq, params, rng } = j;
  const sse = new SseWriter(ctx.res, ctx.signal);
  sse.open();
  const { ids, lpOf } = chunkParts(j);
  if (req.echo) {
    const lp = lpOf(j.echoRows);
    if (!j.echoOnly) await sse.send(vllmCompletionChunk(ctx, j.promptText, lp, null, 'null', ids([])));
    else {
      const result = await generate({
        model: ctx.model,
        seq,
        params,
        topN: n,
        rng,
        signal: ctx.signal,
        emit: () => undefined,
      });
      await sse.send(vllmCompletionChunk(ctx, j.promptText, lp, result.finishReason, stopReason(result), ids([])));
      await endStream(j, sse, result);
      return;
    }
  }
  // One token of lookahead: the last token's chunk carries finish_reason and stop_reason, as vLLM's does.
  let pending: TokenStep | null = null;
  let sent = 0;
  const emit = async (steps: TokenStep[]): Promise<void> => {
    for (const s of steps) {
      if (pending) {
        await sse.send(
          vllmCompletionChunk(ctx, pending.text, lpOf(stepRows([pending])), null, 'null', ids([pending.id])),
        );
        if (++sent === 1 && ctx.faults.stallMs > 0) await sleep(ctx.faults.stallMs, ctx.signal);
      }
      pending = s;
    }
  };
  const result = await generate({
    model: ctx.model,
    seq,
    params,
    topN: n,
    rng,
    ...vllmReport(ctx, params),
    signal: ctx.signal,
    tokenDelayMs: ctx.tokenDelayMs,
    emit,
  });
  const last = pending as TokenStep | null;
  await sse.send(
    vllmCompletionChunk(
      ctx,
      last?.text ?? '',
      last ? lpOf(stepRows([last])) : null,
      result.finishReason,
      stopReason(result),
      ids(last ? [last.id] : []),
    ),
  );
  await endStream(j, sse, result);
}

/** The usage chunk (when asked), then the end of the stream. */
async function endStream(j: VllmJob, sse: SseWriter, result: GenerateResult): Promise<void> {
  const { ctx, cells, seq } = j;
  if (j.req.includeUsage)
    await sse.send(vllmUsageChunk(ctx, vllmUsage(ctx, cells.length, result.completionTokens, cachedTokens(seq))));
  sse.done();
}

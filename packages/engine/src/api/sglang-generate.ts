/**
 * SGLang's native `POST /generate` (`GenerateReqInput`, io_struct.py; the scheduler's logprob
 * processing), the scoring path of the SGLang profile: `text` or
 * `input_ids`, `sampling_params`, `return_logprob`, `logprob_start_len` (default -1: output
 * only), `top_logprobs_num`, `token_ids_logprob`, `return_text_in_logprobs`. Logprob entries
 * are `[logprob, token_id, text|null]`; input entries cover tokens s..n-1 with the newest
 * alignment: entry 0 is always null.
 */
import { badRequest, EngineHttpError } from '../errors.js';
import {
  generate,
  topEntries,
  type GenerateOptions,
  type GenerateResult,
  type TokenStep,
  type TopEntry,
} from '../generate.js';
import type { ModelSequence, NextTokenDistribution } from '../model.js';
import { bool, num, parseJsonBody, stopStrings, type Body } from '../request.js';
import { samplingRng, sendJson, startSequence, type RouteContext } from '../route.js';
import { SseWriter } from '../sse.js';
import { textCells, tokenIdList } from './profile.js';

/** SGLang's `max_new_tokens` default (SamplingParams). */
const DEFAULT_MAX_NEW_TOKENS = 128;
/** torch.finfo(float32).min: what SGLang's sampler clamps -inf to. */
const FLOAT32_LOWEST = '-3.4028234663852886e+38';

interface GenerateRequest {
  readonly cells: number[];
  readonly maxNewTokens: number;
  readonly temperature: number;
  readonly topP: number;
  readonly topK: number;
  readonly seed: number | null;
  readonly stop: readonly string[];
  readonly returnLogprob: boolean;
  /** Resolved: -1 became n-1. */
  readonly logprobStartLen: number;
  readonly topLogprobsNum: number;
  readonly tokenIdsLogprob: readonly number[] | null;
  readonly withText: boolean;
  readonly stream: boolean;
  /** `rid`: the request id `meta_info.id` reports (default a fresh one). */
  readonly rid: string | null;
}

function parseGenerate(ctx: RouteContext, body: Body): GenerateRequest {
  const { model } = ctx;
  const hasText = body.text !== undefined && body.text !== null;
  const hasIds = body.input_ids !== undefined && body.input_ids !== null;
  if (hasText === hasIds)
    throw badRequest(
      hasText
        ? 'Either text or input_ids should be provided, not both.'
        : 'Either text, input_ids or input_embeds should be provided.',
    );
  if (hasText && typeof body.text !== 'string')
    throw badRequest('only one prompt per request is supported here: text must be a string', 'text');
  // The tokenizer's defaults add BOS to text (add_special_tokens); input_ids are used as given.
  const cells = hasText ? textCells(model, body.text as string) : tokenIdList(body, 'input_ids', model.vocabSize);
  if (cells.length === 0) throw badRequest('The input is empty.');
  const sp = (body.sampling_params ?? {}) as Body;
  if (typeof sp !== 'object' || Array.isArray(sp))
    throw badRequest('sampling_params must be an object', 'sampling_params');
  const maxNewTokens = num(sp, 'max_new_tokens', { integer: true }) ?? DEFAULT_MAX_NEW_TOKENS;
  // SamplingParams.verify: 0 is accepted (a prefill-only request).
  if (maxNewTokens < 0) throw badRequest(`max_new_tokens must be at least 0, got ${maxNewTokens}.`);
  const temperature = num(sp, 'temperature') ?? 1;
  if (temperature < 0) throw badRequest(`temperature must be non-negative, got ${temperature}.`);
  const topP = num(sp, 'top_p') ?? 1;
  if (!(topP > 0 && topP <= 1)) throw badRequest(`top_p must be in (0, 1], got ${topP}.`);
  const topK = num(sp, 'top_k', { integer: true }) ?? -1;
  if (topK < -1 || topK === 0) throw badRequest(`top_k must be -1 (disable), or at least 1, got ${topK}.`);
  const returnLogprob = bool(body, 'return_logprob') ?? false;
  const requested = num(body, 'logprob_start_len', { integer: true }) ?? -1;
  const n = cells.length;
  // Scheduler: "By default, only return the logprobs for output tokens".
  const s = requested === -1 || !returnLogprob ? n - 1 : requested;
  if (s >= n || s < 0) {
    throw badRequest(
      `req.logprob_start_len=${s} is higher than the number of input tokens len(req.origin_input_ids)=${n}. Please use a smaller logprob_start_len.`,
    );
  }
  const ids = body.token_ids_logprob;
  return {
    cells,
    maxNewTokens,
    temperature,
    topP,
    topK: topK === -1 ? 0 : topK,
    seed: num(sp, 'sampling_seed', { integer: true }) ?? null,
    stop: stopStrings(sp),
    returnLogprob,
    logprobStartLen: s,
    topLogprobsNum: num(body, 'top_logprobs_num', { integer: true, min: 0 }) ?? 0,
    tokenIdsLogprob: ids === undefined || ids === null ? null : tokenIdList(body, 'token_ids_logprob', model.vocabSize),
    withText: bool(body, 'return_text_in_logprobs') ?? false,
    stream: bool(body, 'stream') ?? false,
    rid: typeof body.rid === 'string' ? body.rid : null,
  };
}

/** The logprob fields of `meta_info`, built as the request's state grows. */
class LogprobFields {
  private readonly inToken: string[] = [];
  private readonly inTop: string[] = [];
  private readonly inIds: string[] = [];
  private readonly outToken: string[] = [];
  private readonly outTop: string[] = [];
  private readonly outIds: string[] = [];

  constructor(
    private readonly ctx: RouteContext,
    private readonly req: GenerateRequest,
  ) {}

  private lp(x: number): string {
    return x === -Infinity || x < -3.4e38 ? FLOAT32_LOWEST : String(x);
  }

  private entry(lp: number, id: number): string {
    return `[${this.lp(lp)},${id},${this.req.withText ? JSON.stringify(this.ctx.model.tokenText(id)) : 'null'}]`;
  }

  private tops(d: NextTokenDistribution): string {
    return this.topList(topEntries(d, this.req.topLogprobsNum));
  }

  private topList(top: readonly TopEntry[]): string {
    return `[${top.map((e) => this.entry(e.logprob, e.id)).join(',')}]`;
  }

  private idsOf(d: NextTokenDistribution): string {
    return `[${(this.req.tokenIdsLogprob ?? []).map((id) => this.entry(d.logprobOf(id), id)).join(',')}]`;
  }

  /** Input tokens s..n-1: entry 0 null (`[None] + logprobs[:-1]`), then one per later token. */
  input(dists: readonly NextTokenDistribution[]): void {
    const { cells, logprobStartLen: s } = this.req;
    this.inToken.push(
      `[null,${cells[s]},${this.req.withText ? JSON.stringify(this.ctx.model.tokenText(cells[s] as number)) : 'null'}]`,
    );
    this.inTop.push('null');
    this.inIds.push('null');
    dists.forEach((d, k) => {
      const id = cells[s + 1 + k] as number;
      this.inToken.push(this.entry(d.logprobOf(id), id));
      this.inTop.push(this.tops(d));
      this.inIds.push(this.idsOf(d));
    });
  }

  /** One output token (the end-of-sequence token included, as SGLang counts it). */
  output(step: Omit<TokenStep, 'text' | 'offset'>): void {
    this.outToken.push(this.entry(step.logprob, step.id));
    this.outTop.push(this.topList(step.top ?? []));
    if (step.dist) this.outIds.push(this.idsOf(step.dist));
  }

  json(): string {
    let s = `"input_token_logprobs":[${this.inToken.join(',')}],"output_token_logprobs":[${this.outToken.join(',')}]`;
    if (this.req.topLogprobsNum > 0)
      s += `,"input_top_logprobs":[${this.inTop.join(',')}],"output_top_logprobs":[${this.outTop.join(',')}]`;
    if (this.req.tokenIdsLogprob)
      s += `,"input_token_ids_logprobs":[${this.inIds.join(',')}],"output_token_ids_logprobs":[${this.outIds.join(',')}]`;
    return s;
  }
}

function finishReason(req: GenerateRequest, result: GenerateResult | null): string {
  if (result === null) return 'null';
  if (result.eos) return `{"type":"stop","matched":${result.eos.id}}`;
  if (result.stopString !== undefined) return `{"type":"stop","matched":${JSON.stringify(result.stopString)}}`;
  return `{"type":"length","length":${req.maxNewTokens}}`;
}

function body(
  ctx: RouteContext,
  req: GenerateRequest,
  seq: ModelSequence,
  text: string,
  outIds: readonly number[],
  lp: LogprobFields | null,
  result: GenerateResult | null,
  t0: number,
): string {
  const cached = seq.cacheState?.().reused ?? 0;
  return (
    `{"text":${JSON.stringify(text)},"output_ids":[${outIds.join(',')}],"meta_info":{"id":${JSON.stringify(req.rid ?? ctx.meta.id)},` +
    `"finish_reason":${finishReason(req, result)},"prompt_tokens":${req.cells.length},"weight_version":"default",` +
    (lp ? `${lp.json()},` : '') +
    `"total_retractions":0,"completion_tokens":${outIds.length},"cached_tokens":${cached},"cached_tokens_details":null,"dp_rank":null,` +
    `"e2e_latency":${(performance.now() - t0) / 1000}}}`
  );
}

/** What `generate` reads for a `/generate` request, its `emit` aside: SGLang's sampling parameters, the logprobs asked. */
function generateOptions(
  ctx: RouteContext,
  req: GenerateRequest,
  seq: ModelSequence,
  maxTokens: number,
  withLogprob: boolean,
): Omit<GenerateOptions, 'emit'> {
  const topN = withLogprob ? req.topLogprobsNum : null;
  const keep = withLogprob && req.tokenIdsLogprob !== null;
  const params = {
    maxTokens,
    temperature: req.temperature,
    topP: req.topP,
    topK: req.topK,
    seed: req.seed,
    stop: req.stop,
    stream: req.stream,
    includeUsage: false,
  };
  const rng = samplingRng(params, ctx.requestSeed);
  return {
    model: ctx.model,
    seq,
    params,
    topN,
    rng,
    signal: ctx.signal,
    tokenDelayMs: ctx.tokenDelayMs,
    keepDistributions: keep,
  };
}

/**
 * A streamed request's ValueError (a bad field, `logprob_start_len` past the input): SGLang's
 * `stream_results` catches it inside the stream, so the answer is a 200 with one
 * `data: {"error": {"message"}}` event, then `[DONE]` (http_server.py `generate_request`).
 */
function streamedError(ctx: RouteContext, err: EngineHttpError): void {
  const sse = new SseWriter(ctx.res, ctx.signal);
  sse.open();
  void sse.send(JSON.stringify({ error: { message: err.message } }));
  sse.done();
}

/** `POST /generate` (and PUT, as SGLang's `api_route`). */
export async function serveGenerate(ctx: RouteContext): Promise<void> {
  const t0 = performance.now();
  const input = parseJsonBody(ctx.raw);
  let req: GenerateRequest;
  try {
    req = parseGenerate(ctx, input);
  } catch (err) {
    if (input.stream === true && err instanceof EngineHttpError && err.status === 400) {
      streamedError(ctx, err);
      return;
    }
    throw err;
  }
  const withLogprob = req.returnLogprob && !ctx.faults.nologprobs;
  const s = req.logprobStartLen;
  const { seq, maxTokens } = await startSequence(ctx, req.cells, req.maxNewTokens, {
    addBos: false,
    // Req._compute_max_prefix_len: a logprob request never matches a cached prefix beyond logprob_start_len.
    cache: ctx.server.prefixCache ? { read: true, write: true, ...(withLogprob ? { limit: s } : {}) } : undefined,
    ...(withLogprob ? { promptLogprobsFrom: s + 1 } : {}),
  });
  try {
    const lp = withLogprob ? new LogprobFields(ctx, req) : null;
    if (lp) lp.input(s + 1 < req.cells.length ? ((await seq.promptDistributions?.()) ?? []) : []);
    const run = generateOptions(ctx, req, seq, maxTokens, withLogprob);
    const ids: number[] = [];
    let text = '';
    const take = (steps: TokenStep[]): void => {
      for (const st of steps) {
        ids.push(st.id);
        text += st.text;
        lp?.output(st);
      }
    };
    const finish = (result: GenerateResult): void => {
      if (!result.eos) return;
      ids.push(result.eos.id);
      lp?.output(result.eos);
    };
    if (!req.stream) {
      const result = await generate({ ...run, emit: take });
      finish(result);
      sendJson(ctx.res, 200, body(ctx, req, seq, text, ids, lp, result, t0));
      return;
    }
    // The stream carries the whole state so far in every event, as SGLang's does.
    const sse = new SseWriter(ctx.res, ctx.signal);
    sse.open();
    const result = await generate({
      ...run,
      emit: async (steps) => {
        take(steps);
        await sse.send(body(ctx, req, seq, text, ids, lp, null, t0));
      },
    });
    finish(result);
    await sse.send(body(ctx, req, seq, text, ids, lp, result, t0));
    sse.done();
  } finally {
    await seq.dispose();
  }
}

/**
 * vLLM's `POST /v1/responses` and `GET /v1/responses/{id}` without Harmony (serving_responses.py
 * `OpenAIServingResponses.create_responses`, `responses_full_generator`,
 * `_process_simple_streaming_events`, `_create_response_logprobs`; protocol.py `ResponsesRequest`,
 * `ResponsesResponse.from_request`; api_router.py `_convert_stream_to_sse_events`): `input` as a
 * string or messages, `instructions` as a system message first, `include:
 * ["message.output_text.logprobs"]` with `top_logprobs`, `store` (ignored unless
 * `VLLM_ENABLE_RESPONSES_API_STORE=1`), `previous_response_id` (404 when not stored), and the
 * named-event stream with `sequence_number`, no `[DONE]`.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { applyChatTemplate } from '../chat-template.js';
import { badRequest } from '../errors.js';
import { generate, type GenerateResult, type TokenStep, type TopEntry } from '../generate.js';
import type { ModelSequence } from '../model.js';
import { bool, num, parseJsonBody, type Body, type ChatMessage, type SamplingParams } from '../request.js';
import {
  defaultCache,
  promptCells,
  samplingRng,
  sendJson,
  startSequence,
  type RouteContext,
  type StoredResponse,
} from '../route.js';
import { RawHttpError } from './profile.js';
import { versionAtLeast } from './version.js';
import { VLLM_VERSION } from './vllm.js';
import { vllmLogprobCount } from './vllm-completions.js';
import { vllmLp } from './vllm-format.js';
import { vllmReport } from './vllm-logprobs-mode.js';

/**
 * The first release whose `/v1/responses` returns logprobs: vllm-project/vllm#23319 (merged
 * August 2025, for vllm-project/vllm#23225, non-stream) is taken to ship in 0.10.2; the streamed
 * deltas' logprobs are played from the same release (their PR not dated here). Before it the
 * output text's `logprobs` is null and every delta's `[]`, whatever was asked.
 */
export const VLLM_RESPONSES_LOGPROBS_FROM = '0.10.2';

const INCLUDE_LOGPROBS = 'message.output_text.logprobs';

interface ResponsesRequest {
  readonly body: Body;
  readonly input: ChatMessage[];
  readonly instructions: string | null;
  readonly maxOutputTokens: number | null;
  readonly temperature: number;
  readonly topP: number;
  readonly topK: number;
  /** `top_logprobs` when the logprobs are included (the sampling params' `logprobs`), else null. */
  readonly topLogprobs: number | null;
  readonly store: boolean;
  readonly stream: boolean;
  readonly previousResponseId: string | null;
}

/** A content part's text: a string, or `input_text` / `output_text` / `text` parts joined by newlines (chat_utils). */
function partsText(v: unknown, i: number): string {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) throw badRequest(`input[${i}].content must be a string or a list of content parts`, 'input');
  return v
    .map((part: unknown) => {
      const p = part as Body | null;
      if (
        p &&
        typeof p === 'object' &&
        typeof p.text === 'string' &&
        ['input_text', 'output_text', 'text'].includes(String(p.type))
      )
        return p.text;
      throw badRequest(`input[${i}].content: only text parts are supported`, 'input');
    })
    .join('\n');
}

function parseInput(v: unknown): ChatMessage[] {
  if (typeof v === 'string') return [{ role: 'user', content: v }];
  if (!Array.isArray(v)) throw badRequest("'input' must be a string or a list of input items", 'input');
  return v.map((item: unknown, i): ChatMessage => {
    const m = item as Body | null;
    if (!m || typeof m !== 'object' || typeof m.role !== 'string') {
      // Function calls and other items need tools, which vLLM refuses without Harmony.
      throw badRequest(`input[${i}] must be a message with a role`, 'input');
    }
    return { role: m.role, content: partsText(m.content, i) };
  });
}

function parseResponses(body: Body, vocabSize: number, maxLogprobs: number): ResponsesRequest {
  if (body.input === undefined || body.input === null) throw badRequest("'input' is required", 'input');
  const include = body.include;
  if (include !== undefined && include !== null && !Array.isArray(include))
    throw badRequest("'include' must be a list", 'include');
  const withLogprobs = Array.isArray(include) && include.includes(INCLUDE_LOGPROBS);
  const top = body.top_logprobs ?? 0;
  // to_sampling_params: logprobs=self.top_logprobs if is_include_output_logprobs() else None; the cap is SamplingParams'.
  const topLogprobs = withLogprobs
    ? (vllmLogprobCount({ top_logprobs: top }, 'top_logprobs', 'sample', vocabSize, maxLogprobs, 'logprobs') ?? 0)
    : null;
  const instructions = body.instructions;
  if (instructions !== undefined && instructions !== null && typeof instructions !== 'string')
    throw badRequest("'instructions' must be a string", 'instructions');
  const prev = body.previous_response_id;
  if (prev !== undefined && prev !== null && typeof prev !== 'string')
    throw badRequest("'previous_response_id' must be a string", 'previous_response_id');
  const topK = num(body, 'top_k', { integer: true }) ?? 0;
  return {
    body,
    input: parseInput(body.input),
    instructions: typeof instructions === 'string' ? instructions : null,
    maxOutputTokens: num(body, 'max_output_tokens', { integer: true, min: 1 }) ?? null,
    temperature: num(body, 'temperature', { min: 0 }) ?? 1,
    topP: num(body, 'top_p') ?? 1,
    topK: topK < 0 ? 0 : topK,
    topLogprobs,
    store: bool(body, 'store') ?? true,
    stream: bool(body, 'stream') ?? false,
    previousResponseId: typeof prev === 'string' ? prev : null,
  };
}

/** `_make_not_found_error`: a 404 whose type is `invalid_request_error`. */
function notFound(id: string): RawHttpError {
  return new RawHttpError(
    404,
    JSON.stringify({
      error: { message: `Response with id '${id}' not found.`, type: 'invalid_request_error', param: null, code: 404 },
    }),
  );
}

/** One request under way. */
interface Job {
  ctx: RouteContext;
  req: ResponsesRequest;
  id: string;
  created: number;
  messages: ChatMessage[];
  cells: readonly number[];
  seq: ModelSequence;
  params: SamplingParams;
  /** Top entries per token when logprobs are computed (the release returns them), else null. */
  topN: number | null;
}

const bytesOf = (text: string): number[] => Array.from(Buffer.from(text, 'utf8'));

/** The sampled token first, then the top entries without it, the first K (the logprobs dict's order). */
function topList(step: { id: number; logprob: number; top: readonly TopEntry[] | null }, k: number): TopEntry[] {
  if (k <= 0) return [];
  const rest = (step.top ?? []).filter((e) => e.id !== step.id);
  return [{ id: step.id, logprob: step.logprob }, ...rest].slice(0, k);
}

/** `_create_response_logprobs`: `{token, bytes, logprob, top_logprobs: [{token, bytes, logprob}]}`. */
function logprobItem(ctx: RouteContext, s: TokenStep, k: number): string {
  const t = ctx.model.tokenText(s.id);
  const tops = topList(s, k).map((e) => {
    const tt = ctx.model.tokenText(e.id);
    return `{"token":${JSON.stringify(tt)},"bytes":[${bytesOf(tt).join(',')}],"logprob":${vllmLp(e.logprob)}}`;
  });
  return `{"token":${JSON.stringify(t)},"bytes":[${bytesOf(t).join(',')}],"logprob":${vllmLp(s.logprob)},"top_logprobs":[${tops.join(',')}]}`;
}

/** `_create_stream_response_logprobs`: the delta event's shape, without bytes. */
function deltaLogprobItem(ctx: RouteContext, s: TokenStep, k: number): string {
  const tops = topList(s, k).map(
    (e) => `{"token":${JSON.stringify(ctx.model.tokenText(e.id))},"logprob":${vllmLp(e.logprob)}}`,
  );
  return `{"token":${JSON.stringify(ctx.model.tokenText(s.id))},"logprob":${vllmLp(s.logprob)},"top_logprobs":[${tops.join(',')}]}`;
}

function outputText(text: string, logprobs: string): string {
  return `{"annotations":[],"text":${JSON.stringify(text)},"type":"output_text","logprobs":${logprobs}}`;
}

/** `_make_response_output_items`: one message when the text is not empty, else none. */
function outputItems(j: Job, steps: readonly TokenStep[]): string {
  const text = steps.map((s) => s.text).join('');
  if (text === '') return '[]';
  const lp = j.topN === null ? 'null' : `[${steps.map((s) => logprobItem(j.ctx, s, j.topN as number)).join(',')}]`;
  const id = `msg_${randomBytes(16).toString('hex')}`;
  return `[{"id":"${id}","content":[${outputText(text, lp)}],"role":"assistant","status":"completed","type":"message"}]`;
}

function usageJson(j: Job, result: GenerateResult): string {
  const cached = j.seq.cacheState?.().reused ?? 0;
  const p = j.cells.length;
  const o = result.completionTokens;
  return (
    `{"input_tokens":${p},"input_tokens_details":{"cached_tokens":${cached},"input_tokens_per_turn":[],"cached_tokens_per_turn":[]},` +
    `"output_tokens":${o},"output_tokens_details":{"reasoning_tokens":0,"tool_output_tokens":0,"output_tokens_per_turn":[],"tool_output_tokens_per_turn":[]},` +
    `"total_tokens":${p + o}}`
  );
}

/** `ResponsesResponse.from_request`, its fields in the class's order. */
function responseJson(j: Job, status: string, output: string, usage: string): string {
  const { req, params, ctx } = j;
  const b = req.body;
  const metadata = b.metadata !== undefined && b.metadata !== null ? JSON.stringify(b.metadata) : 'null';
  const user = typeof b.user === 'string' ? JSON.stringify(b.user) : 'null';
  return (
    `{"id":"${j.id}","created_at":${j.created},"incomplete_details":null,"instructions":${JSON.stringify(req.instructions)},` +
    `"metadata":${metadata},"model":${JSON.stringify(ctx.meta.model)},"object":"response","output":${output},` +
    `"parallel_tool_calls":true,"temperature":${params.temperature},"tool_choice":"auto","tools":[],"top_p":${params.topP},` +
    `"background":false,"max_output_tokens":${params.maxTokens},"max_tool_calls":null,` +
    `"previous_response_id":${JSON.stringify(req.previousResponseId)},"prompt":null,"reasoning":null,"service_tier":"auto",` +
    `"status":"${status}","text":null,"top_logprobs":${req.topLogprobs === null ? 'null' : req.topLogprobs},` +
    `"truncation":"disabled","usage":${usage},"user":${user},"input_messages":null,"output_messages":null}`
  );
}

/** The conversation: instructions, the stored turn (its input, then its output as the assistant's), the new input. */
function conversation(ctx: RouteContext, req: ResponsesRequest): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (req.instructions) messages.push({ role: 'system', content: req.instructions });
  if (req.previousResponseId !== null) {
    const prev = ctx.server.responses.get(req.previousResponseId);
    if (!prev) throw notFound(req.previousResponseId);
    messages.push(...prev.messages);
    if (prev.output !== null) messages.push({ role: 'assistant', content: prev.output });
  }
  messages.push(...req.input);
  return messages;
}

/** `POST /v1/responses`. */
export async function serveResponses(ctx: RouteContext): Promise<void> {
  const req = parseResponses(parseJsonBody(ctx.raw), ctx.model.vocabSize, ctx.server.maxLogprobs);
  const messages = conversation(ctx, req);
  const { cells, addBos } = promptCells(ctx, { text: applyChatTemplate(messages, {}, ctx.server.chatTemplate) });
  const limit = req.maxOutputTokens ?? ctx.maxContext - cells.length;
  const { seq, maxTokens } = await startSequence(ctx, cells, limit, { addBos, cache: defaultCache(ctx) });
  try {
    const fixed = versionAtLeast(ctx.server.engineVersion ?? VLLM_VERSION, VLLM_RESPONSES_LOGPROBS_FROM);
    const j: Job = {
      ctx,
      req,
      id: `resp_${ctx.meta.id}`,
      created: ctx.meta.created,
      messages,
      cells,
      seq,
      params: {
        maxTokens,
        temperature: req.temperature,
        topP: req.topP,
        topK: req.topK,
        seed: num(req.body, 'seed', { integer: true }) ?? null,
        stop: [],
        stream: req.stream,
        includeUsage: false,
      },
      topN: req.topLogprobs !== null && fixed && !ctx.faults.nologprobs ? req.topLogprobs : null,
    };
    if (req.stream) await streamResponse(j);
    else {
      const steps: TokenStep[] = [];
      const result = await run(j, (s) => void steps.push(...s));
      const body = responseJson(j, 'completed', outputItems(j, steps), usageJson(j, result));
      keep(j, steps, body);
      sendJson(ctx.res, 200, body);
    }
  } finally {
    await seq.dispose();
  }
}

function run(j: Job, emit: (steps: TokenStep[]) => void | Promise<void>): Promise<GenerateResult> {
  const { ctx, params } = j;
  return generate({
    model: ctx.model,
    seq: j.seq,
    params,
    topN: j.topN,
    rng: samplingRng(params, ctx.requestSeed),
    ...vllmReport(ctx, params),
    signal: ctx.signal,
    tokenDelayMs: ctx.tokenDelayMs,
    emit,
  });
}

/** With the store enabled and `store` (default true), the response and its conversation are kept. */
function keep(j: Job, steps: readonly TokenStep[], body: string): void {
  if (!j.ctx.server.responsesStore || !j.req.store) return;
  const text = steps.map((s) => s.text).join('');
  const stored: StoredResponse = { body, messages: j.messages, output: text === '' ? null : text };
  j.ctx.server.responses.set(j.id, stored);
}

/** The named-event stream: `event: TYPE\ndata: JSON\n\n`, every event numbered from 0. */
async function streamResponse(j: Job): Promise<void> {
  const { ctx } = j;
  const res = ctx.res;
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  res.flushHeaders();
  let n = 0;
  const send = async (type: string, fields: string): Promise<void> => {
    if (res.destroyed) return;
    const data = `{${fields}${fields === '' ? '' : ','}"sequence_number":${n++},"type":"${type}"}`;
    if (!res.write(`event: ${type}\ndata: ${data}\n\n`))
      await once(res, 'drain', { signal: ctx.signal }).catch(() => undefined);
  };
  // Event fields in the openai types' order; sequence_number and type last.
  const initial = responseJson(j, 'in_progress', '[]', 'null');
  await send('response.created', `"response":${initial}`);
  await send('response.in_progress', `"response":${initial}`);
  const itemId = randomUUID();
  const all: TokenStep[] = [];
  let contentIndex = 0;
  const withLp = j.topN !== null;
  const result = await run(j, async (steps) => {
    for (const s of steps) {
      if (all.length === 0) {
        await send(
          'response.output_item.added',
          `"item":{"id":"${itemId}","content":[],"role":"assistant","status":"in_progress","type":"message"},"output_index":0`,
        );
        await send(
          'response.content_part.added',
          `"content_index":${contentIndex},"item_id":"${itemId}","output_index":0,"part":${outputText('', '[]')}`,
        );
        contentIndex++;
      }
      all.push(s);
      const lp = withLp ? `[${deltaLogprobItem(ctx, s, j.topN as number)}]` : '[]';
      // The content index advances with every delta, as _process_simple_streaming_events counts it.
      await send(
        'response.output_text.delta',
        `"content_index":${contentIndex},"delta":${JSON.stringify(s.text)},"item_id":"${itemId}","logprobs":${lp},"output_index":0`,
      );
      contentIndex++;
    }
  });
  if (all.length > 0) await closeItem(send, itemId, all, contentIndex);
  const final = responseJson(j, 'completed', outputItems(j, all), usageJson(j, result));
  keep(j, all, final);
  await send('response.completed', `"response":${final}`);
  res.end();
}

/** The text's done event, the part's and the item's, with the content index still counting up. */
async function closeItem(
  send: (type: string, fields: string) => Promise<void>,
  itemId: string,
  all: readonly TokenStep[],
  from: number,
): Promise<void> {
  let contentIndex = from;
  const text = all.map((s) => s.text).join('');
  await send(
    'response.output_text.done',
    `"content_index":${contentIndex++},"item_id":"${itemId}","logprobs":[],"output_index":0,"text":${JSON.stringify(text)}`,
  );
  const part = outputText(text, 'null');
  await send(
    'response.content_part.done',
    `"content_index":${contentIndex++},"item_id":"${itemId}","output_index":0,"part":${part}`,
  );
  await send(
    'response.output_item.done',
    `"item":{"id":"${itemId}","content":[${part}],"role":"assistant","status":"completed","type":"message","summary":[]},"output_index":0`,
  );
}

/** `GET /v1/responses/{id}`: a stored response, else the 404. */
export function retrieveResponse(ctx: RouteContext): void {
  const id = decodeURIComponent(ctx.path.slice('/v1/responses/'.length));
  const stored = ctx.server.responses.get(id);
  if (!stored) throw notFound(id);
  sendJson(ctx.res, 200, stored.body);
}

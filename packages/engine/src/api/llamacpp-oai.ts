/**
 * llama-server's OpenAI routes at b4748 (fixtures v1_*.json/.sse): chat-shaped logprobs
 * (`choices[].logprobs.content[]` with `id`, `token`, `bytes`, `logprob`, `top_logprobs`) on
 * completions too, `timings` on every final object, ids `chatcmpl-…` even for completions,
 * `system_fingerprint` = the build, and `echo` refused (500 "Unsupported param: echo").
 */
import { applyChatTemplate } from '../chat-template.js';
import { EngineHttpError } from '../errors.js';
import type { TokenStep } from '../generate.js';
import { bool, num, parseJsonBody, parseMessages, type Body } from '../request.js';
import { sendJson, type RouteContext } from '../route.js';
import { SseWriter } from '../sse.js';
import { LLAMACPP_BUILD, llamaItem, LlamaTokens, timingsJson } from './llamacpp-format.js';
import { LLAMACPP_DEFAULT_MODEL, llamaPrompt } from './llamacpp-native.js';
import { chainOf, llamaParams, runLlama, type LlamaParams, type LlamaRun } from './llamacpp-run.js';
import { textCells } from './profile.js';

/** A parse error on the OpenAI routes: b4748 lets it reach the exception handler, a 500 server_error. */
const serverError = (message: string): EngineHttpError => new EngineHttpError(500, message);

function finish(run: LlamaRun): string {
  return run.result.finishReason === 'stop' ? '"stop"' : '"length"';
}

function usage(run: LlamaRun): string {
  const c = run.result.completionTokens;
  return `{"completion_tokens":${c},"prompt_tokens":${run.cells.length},"total_tokens":${c + run.cells.length}}`;
}

function tail(ctx: RouteContext, body: Body): string {
  const model = typeof body.model === 'string' ? body.model : LLAMACPP_DEFAULT_MODEL;
  return `"created":${ctx.meta.created},"model":${JSON.stringify(model)},"system_fingerprint":"${LLAMACPP_BUILD}"`;
}

function logprobsOf(ctx: RouteContext, t: LlamaTokens, p: LlamaParams, steps: readonly TokenStep[]): string {
  return `{"content":[${steps.map((s) => llamaItem(t, s, p.nProbs, ctx.model.vocabSize, chainOf(p))).join(',')}]}`;
}

/** `POST /v1/completions`. */
export async function serveLlamaCompletions(ctx: RouteContext): Promise<void> {
  const body = parseJsonBody(ctx.raw);
  // oaicompat_completion_params_parse: any of these keys is refused, whatever its value (b4748).
  for (const param of ['best_of', 'echo', 'suffix'])
    if (param in body) throw serverError(`Unsupported param: ${param}`);
  const n = num(body, 'n', { integer: true });
  if (n !== undefined && n !== 1) throw serverError('Only one completion choice is allowed');
  // "Use OpenAI API logprobs only if n_probs wasn't provided".
  const nProbs = body.n_probs === undefined ? num(body, 'logprobs', { integer: true, min: 0 }) : undefined;
  const p = llamaParams(body, { nPredict: num(body, 'max_tokens', { integer: true }), nProbs });
  const cells = llamaPrompt(ctx, body);
  const t = new LlamaTokens(ctx.model);
  const withProbs = p.nProbs > 0 && !ctx.faults.nologprobs;
  const head = tail(ctx, body);
  if (!p.stream) {
    const run = await runLlama(ctx, cells, p);
    const text = run.steps.map((s) => s.text).join('');
    const lp = withProbs ? logprobsOf(ctx, t, p, run.steps) : 'null';
    sendJson(
      ctx.res,
      200,
      `{"choices":[{"text":${JSON.stringify(text)},"index":0,"logprobs":${lp},"finish_reason":${finish(run)}}],${head},"object":"text_completion","usage":${usage(run)},"id":${JSON.stringify(ctx.meta.id)},"timings":${timingsJson(run.timings)}}`,
      { 'content-type': 'application/json; charset=utf-8' },
    );
    return;
  }
  const sse = new SseWriter(ctx.res, ctx.signal);
  sse.open();
  const run = await runLlama(ctx, cells, p, async (steps) => {
    for (const s of steps) {
      const lp = withProbs ? logprobsOf(ctx, t, p, [s]) : 'null';
      await sse.send(
        `{"choices":[{"text":${JSON.stringify(s.text)},"index":0,"logprobs":${lp},"finish_reason":null}],${head},"object":"text_completion","id":${JSON.stringify(ctx.meta.id)}}`,
      );
    }
  });
  // The last chunk carries usage and timings without stream_options (fixture v1_completions_logprobs5_stream.sse).
  await sse.send(
    `{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":${finish(run)}}],${head},"object":"text_completion","usage":${usage(run)},"id":${JSON.stringify(ctx.meta.id)},"timings":${timingsJson(run.timings)}}`,
  );
  sse.done();
}

/** `POST /v1/chat/completions`: the template, tokenized with BOS and special tokens (`tokenize_input_prompts(…, true, true)`). */
export async function serveLlamaChat(ctx: RouteContext): Promise<void> {
  const body = parseJsonBody(ctx.raw);
  const messages = parseMessages(body);
  const logprobs = bool(body, 'logprobs') ?? false;
  const top = num(body, 'top_logprobs', { integer: true, min: 0 });
  // oaicompat_chat_params_parse: logprobs → n_probs = top_logprobs (default 20); top_logprobs 0 → no logprobs at all.
  if (!logprobs && top !== undefined) throw serverError('top_logprobs requires logprobs to be set to true');
  const p = llamaParams(body, {
    nPredict: num(body, 'max_tokens', { integer: true }) ?? num(body, 'max_completion_tokens', { integer: true }),
    nProbs: logprobs ? (top ?? 20) : 0,
  });
  const cells = textCells(ctx.model, applyChatTemplate(messages, {}, ctx.server.chatTemplate), true, true);
  const t = new LlamaTokens(ctx.model);
  const withProbs = p.nProbs > 0 && !ctx.faults.nologprobs;
  const head = tail(ctx, body);
  if (!p.stream) {
    const run = await runLlama(ctx, cells, p);
    const content = run.steps.map((s) => s.text).join('');
    const lp = withProbs ? `,"logprobs":${logprobsOf(ctx, t, p, run.steps)}` : '';
    sendJson(
      ctx.res,
      200,
      `{"choices":[{"finish_reason":${finish(run)},"index":0,"message":{"role":"assistant","content":${JSON.stringify(content)}}${lp}}],${head},"object":"chat.completion","usage":${usage(run)},"id":${JSON.stringify(ctx.meta.id)},"timings":${timingsJson(run.timings)}}`,
      { 'content-type': 'application/json; charset=utf-8' },
    );
    return;
  }
  const sse = new SseWriter(ctx.res, ctx.signal);
  sse.open();
  const id = JSON.stringify(ctx.meta.id);
  const chunkTail = (): string =>
    `"created":${ctx.meta.created},"id":${id},"model":${JSON.stringify(typeof body.model === 'string' ? body.model : LLAMACPP_DEFAULT_MODEL)},"system_fingerprint":"${LLAMACPP_BUILD}","object":"chat.completion.chunk"`;
  // No role chunk: b4748's first event already carries the first token (fixture v1_chat_top_logprobs5_stream.sse).
  const run = await runLlama(ctx, cells, p, async (steps) => {
    for (const s of steps) {
      const lp = withProbs ? `,"logprobs":${logprobsOf(ctx, t, p, [s])}` : '';
      await sse.send(
        `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":${JSON.stringify(s.text)}}${lp}}],${chunkTail()}}`,
      );
    }
  });
  await sse.send(
    `{"choices":[{"finish_reason":${finish(run)},"index":0,"delta":{}}],${chunkTail()},"usage":${usage(run)},"timings":${timingsJson(run.timings)}}`,
  );
  sse.done();
}

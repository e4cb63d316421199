/**
 * llama-server's native `POST /completion` at b4748 (fixtures completion_*.json/.sse), the
 * scoring path of the llama.cpp profile: one call per position with the token ids so far,
 * `n_predict: 1`, `n_probs: K`, `cache_prompt: true`. Token-id
 * prompts are used verbatim (no BOS added); text gets BOS. The slot's reuse shows in
 * `tokens_cached` and `timings.prompt_n`.
 */
import { badRequest } from '../errors.js';
import type { TokenStep } from '../generate.js';
import { parseJsonBody, type Body } from '../request.js';
import { sendJson, type RouteContext } from '../route.js';
import { SseWriter } from '../sse.js';
import { generationSettings, llamaItem, LlamaTokens, timingsJson } from './llamacpp-format.js';
import { chainOf, llamaParams, runLlama, type LlamaParams, type LlamaRun } from './llamacpp-run.js';
import { decodeWithSpecials, textCells } from './profile.js';

/** The model name llama-server reports without `--alias` (DEFAULT_OAICOMPAT_MODEL). */
export const LLAMACPP_DEFAULT_MODEL = 'gpt-3.5-turbo';

/** A prompt as llama-server tokenizes it: text with BOS and special-token parsing, ids as given. */
export function llamaPrompt(ctx: RouteContext, body: Body): number[] {
  let v = body.prompt;
  if (Array.isArray(v) && v.length === 1 && (typeof v[0] === 'string' || Array.isArray(v[0]))) v = v[0];
  if (typeof v === 'string') return textCells(ctx.model, v, true, true);
  if (Array.isArray(v) && v.every((x) => typeof x === 'number' && Number.isInteger(x))) {
    const bad = v.find((x) => (x as number) < 0 || (x as number) >= ctx.model.vocabSize);
    if (bad !== undefined)
      throw badRequest(
        `invalid token id ${String(bad)} in the prompt (vocabulary of ${ctx.model.vocabSize})`,
        'prompt',
      );
    return v as number[];
  }
  throw badRequest('"prompt" must be a string or an array of token ids', 'prompt');
}

function stopType(run: LlamaRun): string {
  return run.result.eos ? 'eos' : run.result.stopString !== undefined ? 'word' : 'limit';
}

function items(ctx: RouteContext, t: LlamaTokens, p: LlamaParams, steps: readonly TokenStep[]): string {
  return steps.map((s) => llamaItem(t, s, p.nProbs, ctx.model.vocabSize, chainOf(p))).join(',');
}

/** The final object (non-streamed body, or the stream's last event). */
function finalJson(ctx: RouteContext, p: LlamaParams, run: LlamaRun, content: string, probs: string | null): string {
  const head = {
    index: 0,
    content,
    tokens: p.returnTokens && !p.stream ? run.steps.map((s) => s.id) : [],
    id_slot: 0,
    stop: true,
    model: LLAMACPP_DEFAULT_MODEL,
    tokens_predicted: run.predicted,
    tokens_evaluated: run.cells.length,
    generation_settings: generationSettings(p),
    prompt: decodeWithSpecials(ctx.model, run.cells),
    has_new_line: content.includes('\n'),
    truncated: false,
    stop_type: stopType(run),
    stopping_word: run.result.stopString ?? '',
    tokens_cached: run.held,
  };
  const text = JSON.stringify(head);
  return `${text.slice(0, -1)},"timings":${timingsJson(run.timings)}${probs === null ? '' : `,"completion_probabilities":[${probs}]`}}`;
}

/** `POST /completion` (and `/completions`). */
export async function serveNativeCompletion(ctx: RouteContext): Promise<void> {
  const body = parseJsonBody(ctx.raw);
  const p = llamaParams(body);
  const cells = llamaPrompt(ctx, body);
  const t = new LlamaTokens(ctx.model);
  const withProbs = p.nProbs > 0 && !ctx.faults.nologprobs;
  if (!p.stream) {
    const run = await runLlama(ctx, cells, p);
    const content = run.steps.map((s) => s.text).join('');
    sendJson(ctx.res, 200, finalJson(ctx, p, run, content, withProbs ? items(ctx, t, p, run.steps) : null), {
      'content-type': 'application/json; charset=utf-8',
    });
    return;
  }
  const sse = new SseWriter(ctx.res, ctx.signal);
  sse.open();
  let predicted = 0;
  const run = await runLlama(ctx, cells, p, async (steps) => {
    for (const s of steps) {
      predicted++;
      const probs = withProbs ? `,"completion_probabilities":[${items(ctx, t, p, [s])}]` : '';
      await sse.send(
        `{"index":0,"content":${JSON.stringify(s.text)},"tokens":[${s.id}],"stop":false,"id_slot":-1,"tokens_predicted":${predicted},"tokens_evaluated":${cells.length}${probs}}`,
      );
    }
  });
  // The native stream ends with the final object; there is no [DONE] (fixture completion_n_probs5_stream.sse).
  await sse.send(finalJson(ctx, p, run, '', null));
  ctx.res.end();
}

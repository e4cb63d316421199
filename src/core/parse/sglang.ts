import type { TokenStep, TopEntry } from '../types.js';
import { addFlag, finishTop, newStep, readId, topValue } from './values.js';

/**
 * SGLang's native `/generate` `meta_info`: `output_token_logprobs` is a list of
 * `[logprob, token_id, text | null]` tuples and `output_top_logprobs` a list (per position, or
 * `null`) of such tuples. The text is `null` unless `return_text_in_logprobs` was set, so the id is
 * what identifies a token here.
 */
export function sglangSteps(meta: Record<string, unknown>): TokenStep[] {
  const chosen = Array.isArray(meta.output_token_logprobs) ? meta.output_token_logprobs : [];
  const tops = Array.isArray(meta.output_top_logprobs) ? meta.output_top_logprobs : null;
  const steps: TokenStep[] = [];
  for (let i = 0; i < chosen.length; i++) {
    const t: unknown = chosen[i];
    const tuple = Array.isArray(t) ? t : [];
    const step = newStep(tuple[2], tuple[0]);
    const id = readId(tuple[1]);
    if (id !== undefined) step.id = id;
    const top: unknown = tops ? tops[i] : undefined;
    if (Array.isArray(top)) {
      const entries: TopEntry[] = [];
      const ids: Array<number | undefined> = [];
      for (const e of top) {
        if (!Array.isArray(e)) continue;
        const text: unknown = e[2];
        entries.push([typeof text === 'string' ? text : '', topValue(step, e[0])]);
        ids.push(readId(e[1]));
      }
      finishTop(step, entries, ids);
    } else {
      addFlag(step, 'missingTop');
    }
    steps.push(step);
  }
  return steps;
}

/** True when `meta_info` carries output logprobs in SGLang's native shape. */
export function hasSglangLogprobs(meta: Record<string, unknown>): boolean {
  return Array.isArray(meta.output_token_logprobs);
}

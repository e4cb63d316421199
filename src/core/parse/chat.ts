import type { TokenStep, TopEntry } from '../types.js';
import { addFlag, finishTop, isObject, newStep, placeholderId, readBytes, readId, topValue } from './values.js';

/**
 * Chat-shaped logprob items → steps. The same item shape serves OpenAI/vLLM/SGLang chat
 * (`logprobs.content[]`), llama.cpp's `/v1/completions` and `/v1/chat/completions` (items with
 * `id`), and llama.cpp's native `completion_probabilities` (with `post_sampling_probs` the values
 * are probabilities, `prob`/`top_probs`, and are converted to logs).
 *
 * The top list is sorted on the way in: vLLM lists the sampled token first even when it is not the
 * largest.
 */
export function appendChatItems(steps: TokenStep[], items: unknown[]): void {
  for (const item of items) steps.push(chatItem(item));
}

function chatItem(item: unknown): TokenStep {
  if (!isObject(item)) {
    const step = newStep('', null);
    addFlag(step, 'missingTop');
    return step;
  }
  const probMode = !('logprob' in item) && ('prob' in item || 'top_probs' in item);
  const step = newStep(item.token, probMode ? probToLog(item.prob) : item.logprob);
  if (probMode) addFlag(step, 'probability');
  const id = readId(item.id);
  if (id !== undefined) step.id = id;
  const bytes = readBytes(item.bytes);
  if (bytes) step.bytes = bytes;
  const rawTop = probMode ? item.top_probs : item.top_logprobs;
  if (!Array.isArray(rawTop)) {
    addFlag(step, 'missingTop');
    return step;
  }
  const entries: TopEntry[] = [];
  const ids: Array<number | undefined> = [];
  for (const e of rawTop) {
    if (!isObject(e)) continue;
    const tok = typeof e.token === 'string' ? e.token : '';
    entries.push([tok, topValue(step, probMode ? probToLog(e.prob) : e.logprob)]);
    ids.push(readId(e.id) ?? placeholderId(tok));
  }
  finishTop(step, entries, ids);
  return step;
}

/** log(p) for a probability in (0, 1]; anything else passes through to be flagged. */
function probToLog(p: unknown): unknown {
  if (typeof p !== 'number') return p;
  if (p === 0) return -Infinity;
  return p > 0 && p <= 1 ? Math.log(p) : Number.NaN;
}

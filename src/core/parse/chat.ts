import type { TokenStep, TopEntry } from '../types.js';
import {
  addFlag,
  finishTop,
  isObject,
  newStep,
  placeholderId,
  readBytes,
  readId,
  topValue,
  wireText,
} from './values.js';

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
  let listsChosen = false;
  for (const e of rawTop) {
    if (!isObject(e)) continue;
    const tok = typeof e.token === 'string' ? wireText(e.token) : '';
    if (tok === step.token) listsChosen = true;
    entries.push([tok, topValue(step, probMode ? probToLog(e.prob) : e.logprob)]);
    ids.push(readId(e.id) ?? placeholderId(tok));
  }
  if (!listsChosen && entries.length > 0) respellByteLevel(step.token, entries);
  finishTop(step, entries, ids);
  return step;
}

const BYTE_LEVEL = /[\u0120\u010a\u0109]/;

/**
 * LMDeploy's chat leaves the chosen token out of its alternatives and spells those as byte-level
 * BPE pieces (`Ġthe`) while the chosen token is decoded (` the`). When the alternatives carry the
 * byte-level whitespace markers and the chosen token does not, the markers are read as what they
 * stand for (Ġ a space, Ċ a newline, ĉ a tab), so ` the` is found among them rather than taken
 * for an unlisted token (whose value would bound a flip's gap from the wrong side). Other
 * non-ASCII bytes stay as spelled: such alternatives match nothing.
 */
function respellByteLevel(chosen: string, entries: TopEntry[]): void {
  if (BYTE_LEVEL.test(chosen)) return;
  let marked = false;
  for (const e of entries) if (BYTE_LEVEL.test(e[0])) marked = true;
  if (!marked) return;
  for (const e of entries) e[0] = e[0].replaceAll('\u0120', ' ').replaceAll('\u010a', '\n').replaceAll('\u0109', '\t');
}

/** log(p) for a probability in (0, 1]; anything else passes through to be flagged. */
function probToLog(p: unknown): unknown {
  if (typeof p !== 'number') return p;
  if (p === 0) return -Infinity;
  return p > 0 && p <= 1 ? Math.log(p) : Number.NaN;
}

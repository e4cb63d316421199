import type { TokenStep, TopEntry } from '../types.js';
import { addFlag, finishTop, isObject, newStep, placeholderId, topValue, wireText } from './values.js';

/**
 * Legacy completions logprobs (`tokens` / `token_logprobs` / `top_logprobs` dicts) → steps.
 *
 * Engine quirks handled here: vLLM's N+1 entries (the sampled token added to the top-N when it is
 * not among them), SGLang's `text_offset: -1` (offsets are never read), `null` entries for an
 * echoed first prompt token, `token_id:N` keys, and dicts whose keys collapsed because two token
 * ids decoded to one string. The last can only be seen across the whole response, so it is
 * flagged by {@link flagCollapsedTopK} once every chunk is in.
 */
export interface DictSizes {
  /** Per step: the dict's size minus a vLLM "+1" sampled entry, or −1 for no dict. */
  effective: number[];
  /** Per step: whether the chosen token is missing from its own dict. */
  chosenAbsent: boolean[];
}

/** A fresh, empty {@link DictSizes}. */
export function newDictSizes(): DictSizes {
  return { effective: [], chosenAbsent: [] };
}

/** Appends the positions of one completions `logprobs` object (a whole body or one chunk). */
export function appendCompletions(steps: TokenStep[], sizes: DictSizes, logprobs: Record<string, unknown>): void {
  const tokens = Array.isArray(logprobs.tokens) ? logprobs.tokens : [];
  const lps = Array.isArray(logprobs.token_logprobs) ? logprobs.token_logprobs : [];
  const tops = Array.isArray(logprobs.top_logprobs) ? logprobs.top_logprobs : null;
  const n = Math.max(tokens.length, lps.length);
  for (let i = 0; i < n; i++) {
    const step = newStep(tokens[i], lps[i]);
    const dict: unknown = tops ? tops[i] : undefined;
    let effective = -1;
    let chosenAbsent = false;
    if (isObject(dict)) {
      const entries: TopEntry[] = [];
      const ids: Array<number | undefined> = [];
      let chosenValue = Number.NaN;
      let smallestOther = Infinity;
      chosenAbsent = true;
      for (const key of Object.keys(dict)) {
        const v = topValue(step, dict[key]);
        const text = wireText(key);
        entries.push([text, v]);
        ids.push(placeholderId(key));
        if (text === step.token) {
          chosenValue = v;
          chosenAbsent = false;
        } else if (v !== -Infinity && v < smallestOther) smallestOther = v;
      }
      // vLLM adds the sampled token to the top-N when it is not among them: N+1 keys, the
      // sampled one strictly the smallest of the values (placeholders compare with nothing). A
      // dict of 20 with 16 at −9999 did not lose keys: every key counts.
      const plusOne = !chosenAbsent && entries.length >= 2 && chosenValue < smallestOther;
      effective = entries.length - (plusOne ? 1 : 0);
      finishTop(step, entries, ids);
    } else {
      addFlag(step, 'missingTop');
    }
    sizes.effective.push(effective);
    sizes.chosenAbsent.push(chosenAbsent);
    steps.push(step);
  }
}

/**
 * Flags `collapsedTopK` on every dict that is missing its own chosen token or holds fewer entries
 * than the response asked for (taken as the largest effective dict size in the response).
 */
export function flagCollapsedTopK(steps: TokenStep[], sizes: DictSizes): void {
  let asked = 0;
  for (const e of sizes.effective) if (e > asked) asked = e;
  for (let i = 0; i < steps.length; i++) {
    const e = sizes.effective[i] ?? -1;
    if (e < 0) continue;
    if (sizes.chosenAbsent[i] === true || e < asked) addFlag(steps[i]!, 'collapsedTopK');
  }
}

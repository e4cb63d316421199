import { addFlag, finishTop, newStep, readId, readLogprob, topValue } from '../../core/parse/values.js';
import type { TokenStep, TopEntry } from '../../core/types.js';

/**
 * Builders of teacher-forced steps from the engines' scoring answers: the forced token is the
 * chosen one, its logprob read where the engine reports it, the alternatives as the top list,
 * with ids so both sides match by id. The wire rules (sentinels, nulls) are the parsers'.
 */

/** One alternative as `{id, text, logprob}`. */
export interface Alternative {
  id: number | undefined;
  text: string;
  logprob: unknown;
}

/** A forced step: the chosen token `id`, its logprob (null when the engine did not report it), and the alternatives. */
export function forcedStep(
  id: number,
  text: string,
  logprob: unknown,
  alternatives: readonly Alternative[],
): TokenStep {
  const step = newStep(text, logprob);
  step.id = id;
  const entries: TopEntry[] = [];
  const ids: Array<number | undefined> = [];
  for (const a of alternatives) {
    entries.push([a.text, topValue(step, a.logprob)]);
    ids.push(a.id);
  }
  finishTop(step, entries, ids);
  return step;
}

/** The forced token's logprob among the alternatives (by id), or undefined when it is not there. */
export function logprobAmong(id: number, alternatives: readonly Alternative[]): unknown {
  return alternatives.find((a) => a.id === id)?.logprob;
}

/** A step whose forced token's logprob is unknown (outside the reported top-k). */
export function unknownChosen(step: TokenStep): TokenStep {
  if (step.logprob === null) addFlag(step, 'nullLogprob');
  return step;
}

/** `[logprob, id, text]` tuples (SGLang) as alternatives. */
export function tupleAlternatives(list: unknown): Alternative[] {
  if (!Array.isArray(list)) return [];
  return list.flatMap((t) =>
    Array.isArray(t) ? [{ logprob: t[0], id: readId(t[1]), text: typeof t[2] === 'string' ? t[2] : '' }] : [],
  );
}

/** `{id, token, logprob}` objects (llama.cpp) as alternatives. */
export function objectAlternatives(list: unknown): Alternative[] {
  if (!Array.isArray(list)) return [];
  return list.flatMap((o) =>
    typeof o === 'object' && o !== null
      ? [
          {
            id: readId((o as { id?: unknown }).id),
            text: String((o as { token?: unknown }).token ?? ''),
            logprob: (o as { logprob?: unknown }).logprob,
          },
        ]
      : [],
  );
}

/** A finite logprob or null: for deciding whether a chosen value is usable. */
export const usable = readLogprob;

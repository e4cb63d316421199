import type { StepFlag, TokenStep, TopEntry } from '../types.js';

/** A plain JSON object (not an array, not null). */
export type JsonObject = Record<string, unknown>;

/** True for a non-null, non-array object. */
export function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Reads a logprob off the wire. Returns the number, or `null` for everything that is not a usable
 * logprob: null, NaN, ±Infinity, −9999 (vLLM's and OpenAI's "very unlikely"), ≤ −3.4e38
 * (llama.cpp's and SGLang's float-lowest clamp), non-numbers, and values above 1 (no logprob is
 * positive; rounding and injected noise stay far below 1). Anything ≤ −9999 counts as a sentinel,
 * as the wire-format reference recommends. The bounds keep every difference finite.
 */
export function readLogprob(v: unknown): number | null {
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= -9999 || v > 1) return null;
  return v;
}

/** Tells which flag a rejected chosen logprob deserves. */
export function rejectionFlag(v: unknown): StepFlag {
  return typeof v === 'number' && (v <= -9999 || v === -Infinity) ? 'sentinel' : 'nullLogprob';
}

/**
 * A token's text as the wire spells it, read as text: a SentencePiece piece's `▁` (U+2581) is
 * the space it stands for. Older vLLM answered chat logprobs with raw pieces (`▁Hello`), newer
 * ones and other servers with decoded text (` Hello`); read both ways, the same token matches.
 */
export function wireText(s: string): string {
  return s.includes('\u2581') ? s.replaceAll('\u2581', ' ') : s;
}

const PLACEHOLDER = /^token_id:(\d+)$/;

/** vLLM's `return_tokens_as_token_ids` placeholder `token_id:N` → N, else `undefined`. */
export function placeholderId(token: string): number | undefined {
  if (token.length < 10 || token.charCodeAt(0) !== 116 /* t */) return undefined;
  const m = PLACEHOLDER.exec(token);
  if (!m) return undefined;
  const n = Number(m[1]);
  return Number.isSafeInteger(n) ? n : undefined;
}

/** A token id when `v` is a non-negative safe integer. */
export function readId(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
}

/**
 * A byte array when `v` is an array of integers 0..255. Bytes that hold U+FFFD (EF BF BD) are
 * not the token's: SGLang and vLLM send the UTF-8 of the *decoded* text, and a byte-fallback
 * fragment decodes to the replacement character (`" �"` → 32, 239, 191, 189), so two different
 * fragments send the same bytes. Those are read as no bytes.
 */
export function readBytes(v: unknown): number[] | undefined {
  if (!Array.isArray(v)) return undefined;
  const n = v.length;
  for (let i = 0; i < n; i++) {
    const b: unknown = v[i];
    if (typeof b !== 'number' || !Number.isInteger(b) || b < 0 || b > 255) return undefined;
    if (b === 239 && v[i + 1] === 191 && v[i + 2] === 189) return undefined;
  }
  return v as number[];
}

/** Adds a flag to a step once. */
export function addFlag(step: TokenStep, flag: StepFlag): void {
  if (!step.flags) step.flags = [flag];
  else if (!step.flags.includes(flag)) step.flags.push(flag);
}

/**
 * Sorts top entries by logprob, largest first (stable, so equal values keep the server's order),
 * keeping the ids index for index, and reads their texts with {@link wireText}. Flags duplicate
 * tokens (same text, or same id).
 *
 * A placeholder (−9999, float32 lowest, null, NaN: read as `-Infinity` by {@link topValue}) stays
 * in the list, last, as a token with no value: no figure reads a value off it (no top-1 − top-2
 * gap, no shift, no KL mass), and a flip to that token has no gap — the server listed it, so its
 * value is not bounded by the listed ones, and the placeholder says nothing about what it was.
 */
export function finishTop(step: TokenStep, entries: TopEntry[], ids: Array<number | undefined>): void {
  const n = entries.length;
  let sorted = true;
  for (let j = 0; j < n; j++) {
    const e = entries[j]!;
    e[0] = wireText(e[0]);
    if (j > 0 && e[1] > entries[j - 1]![1]) sorted = false;
  }
  const allIds = n > 0 && ids.length === n && ids.every((x) => x !== undefined);
  if (sorted) {
    step.top = entries;
    if (allIds) step.topIds = ids as number[];
  } else {
    const order = entries.map((_, j) => j).sort((a, b) => entries[b]![1] - entries[a]![1] || a - b);
    step.top = order.map((j) => entries[j]!);
    if (allIds) step.topIds = order.map((j) => ids[j]!);
  }
  // By text as well as by id: texts are what collide when a side is matched by string.
  for (let a = 1; a < n; a++) {
    for (let b = 0; b < a; b++) {
      const same =
        step.top[a]![0] === step.top[b]![0] || (step.topIds !== undefined && step.topIds[a] === step.topIds[b]);
      if (same) {
        addFlag(step, 'duplicateTopKeys');
        return;
      }
    }
  }
}

/** A top entry's value: finite logprob, or `-Infinity` (flagged) for a sentinel, null or NaN. */
export function topValue(step: TokenStep, v: unknown): number {
  const lp = readLogprob(v);
  if (lp === null) {
    addFlag(step, 'sentinelInTop');
    return -Infinity;
  }
  return lp;
}

/** A new step with the chosen token and logprob read (and flagged) from the wire. */
export function newStep(token: unknown, logprob: unknown): TokenStep {
  const text = wireText(typeof token === 'string' ? token : token === null || token === undefined ? '' : String(token));
  const lp = readLogprob(logprob);
  const step: TokenStep = { token: text, logprob: lp, top: [] };
  if (lp === null) addFlag(step, rejectionFlag(logprob));
  const pid = placeholderId(text);
  if (pid !== undefined) {
    step.id = pid;
    addFlag(step, 'tokenIdPlaceholder');
  }
  return step;
}

import type { TokenStep, TopEntry } from '../types.js';
import { parseResponse } from './index.js';
import { parseJson } from './json.js';
import { addFlag, finishTop, isObject, newStep, readId, topValue } from './values.js';

/**
 * Token-logprob files (docs/training.md): what a trainer dumps with
 * `log_softmax(logits).gather(labels)` — JSON or JSONL, per sequence
 * `{id?, token_ids | tokens, logprobs, top_logprobs?}` — and the engine's side of the same
 * tokens (a response with the rollout's own logprobs, vLLM `prompt_logprobs`, SGLang
 * `input_token_logprobs`), read into one {@link TokenSequence} each and lined up position by
 * position. Pure; never throws.
 */

/** One scored sequence: its steps (the chosen token is the scored one) and where it came from. */
export interface TokenSequence {
  /** The sequence's `id`, when it has one. */
  id?: string;
  steps: TokenStep[];
  /** `tokens`: a token-logprob file; else the engine format it was read from. */
  source: 'tokens' | 'prompt_logprobs' | 'input_token_logprobs' | 'response';
  /**
   * The engine reported distributions without naming the scored token (vLLM `prompt_logprobs`
   * without `prompt_token_ids`): the chosen ids come from the other side, checked against each
   * position's entries.
   */
  chosenUnknown?: boolean;
}

/** What a file held. */
export interface SequenceFile {
  /** `tokens` when at least one sequence came from a token-logprob object; `engine` otherwise. */
  kind: 'tokens' | 'engine';
  sequences: TokenSequence[];
  /** Values that were neither (`line N: reason`). */
  problems: string[];
}

const ID_KEYS = ['token_ids', 'ids', 'input_ids'] as const;
const TEXT_KEYS = ['tokens'] as const;
const LP_KEYS = ['logprobs', 'token_logprobs', 'logps'] as const;
const MASK_KEYS = ['mask', 'loss_mask', 'response_mask'] as const;

function pick(o: Record<string, unknown>, keys: readonly string[]): unknown {
  for (const k of keys) if (o[k] !== undefined) return o[k];
  return undefined;
}

/** True for an object in the token-logprob shape: a `logprobs` list of numbers with `token_ids` or `tokens`. */
export function isTokenSequence(v: unknown): v is Record<string, unknown> {
  if (!isObject(v)) return false;
  const lp = pick(v, LP_KEYS);
  if (!Array.isArray(lp)) return false;
  const ids = pick(v, ID_KEYS);
  const texts = pick(v, TEXT_KEYS);
  if (!Array.isArray(ids) && !Array.isArray(texts)) return false;
  // A batch: lists of lists.
  if (lp.length > 0 && Array.isArray(lp[0])) return true;
  return lp.every((x) => x === null || typeof x === 'number');
}

/** The sequences of a columnar batch object: every per-position field a list of lists, `id` a list (or absent). */
function batchSequences(o: Record<string, unknown>, lp: unknown[], index: number): TokenSequence[] | string {
  const out: TokenSequence[] = [];
  const ids = Array.isArray(o.id)
    ? o.id
    : Array.isArray(o.ids) && !Array.isArray((o.ids as unknown[])[0])
      ? o.ids
      : null;
  for (let b = 0; b < lp.length; b++) {
    const row: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(o)) if (Array.isArray(v) && k !== 'id') row[k] = v[b];
    if (ids) row.id = ids[b];
    const one = tokenSequences(row, index + b);
    if (typeof one === 'string') return `sequence ${b}: ${one}`;
    out.push(...one);
  }
  return out;
}

/** The sequences of one token-logprob object (a batch object holds several). */
function tokenSequences(o: Record<string, unknown>, index: number): TokenSequence[] | string {
  const lp = pick(o, LP_KEYS) as unknown[];
  if (lp.length > 0 && Array.isArray(lp[0])) return batchSequences(o, lp, index);
  const idList = pick(o, ID_KEYS);
  const textList = pick(o, TEXT_KEYS);
  const ids = Array.isArray(idList)
    ? idList
    : Array.isArray(textList) && textList.every((t) => typeof t === 'number')
      ? textList
      : null;
  const texts = Array.isArray(textList) && textList.some((t) => typeof t === 'string') ? textList : null;
  const n = lp.length;
  if (ids && ids.length !== n) return `token_ids has ${ids.length} entries and logprobs ${n}`;
  if (texts && texts.length !== n) return `tokens has ${texts.length} entries and logprobs ${n}`;
  const tops = Array.isArray(o.top_logprobs) ? o.top_logprobs : null;
  if (tops && tops.length !== n) return `top_logprobs has ${tops.length} entries and logprobs ${n}`;
  const topIds = pick(o, ['top_token_ids', 'top_ids']);
  const topTexts = o.top_tokens;
  const mask = pick(o, MASK_KEYS);
  if (mask !== undefined && (!Array.isArray(mask) || mask.length !== n)) return `mask must be a list of ${n} entries`;
  const steps: TokenStep[] = [];
  for (let i = 0; i < n; i++) {
    if (Array.isArray(mask) && !mask[i]) continue;
    const id = ids ? readId(ids[i]) : undefined;
    const text =
      texts && typeof texts[i] === 'string' ? (texts[i] as string) : id !== undefined ? `token_id:${id}` : '';
    const step = newStep(text, lp[i]);
    // The ids are the file's own: a `token_id:N` text is a placeholder for them, not a vLLM flag.
    if (id !== undefined) step.id = id;
    else delete step.id;
    if (step.flags) step.flags = step.flags.filter((f) => f !== 'tokenIdPlaceholder');
    if (step.flags?.length === 0) delete step.flags;
    if (tops)
      readTop(
        step,
        tops[i],
        Array.isArray(topIds) ? topIds[i] : undefined,
        Array.isArray(topTexts) ? topTexts[i] : undefined,
        ids !== null && texts === null,
      );
    steps.push(step);
  }
  const seq: TokenSequence = { steps, source: 'tokens' };
  const name = o.id ?? o.sequence_id ?? o.uid;
  if (typeof name === 'string' || typeof name === 'number') seq.id = String(name);
  void index;
  return [seq];
}

const DIGITS = /^\d+$/;

/**
 * One position's alternatives, in any of the shapes a script writes: `{token: lp}` (keys are ids
 * when the sequence names ids only and every key is a number), `{key: {logprob}}` (vLLM),
 * `[[token|id, lp], …]`, `[{token?, token_id?|id?, logprob}, …]`, or a list of numbers with
 * `top_token_ids`/`top_tokens` beside it (a `torch.topk` dump).
 */
function readTop(step: TokenStep, raw: unknown, rawIds: unknown, rawTexts: unknown, idsOnly: boolean): void {
  if (raw === null || raw === undefined) {
    addFlag(step, 'missingTop');
    return;
  }
  const entries: TopEntry[] = [];
  const ids: Array<number | undefined> = [];
  const push = (key: unknown, value: unknown, id?: unknown) => {
    const asId =
      readId(id) ??
      (typeof key === 'number'
        ? readId(key)
        : idsOnly && typeof key === 'string' && DIGITS.test(key)
          ? readId(Number(key))
          : undefined);
    const text =
      typeof key === 'string' && !(idsOnly && DIGITS.test(key) && id === undefined)
        ? key
        : asId !== undefined
          ? `token_id:${asId}`
          : String(key ?? '');
    const v = isObject(value) ? value.logprob : value;
    entries.push([text, topValue(step, v)]);
    ids.push(asId);
  };
  if (Array.isArray(raw)) {
    for (let j = 0; j < raw.length; j++) {
      const e: unknown = raw[j];
      if (typeof e === 'number' || e === null)
        push(
          Array.isArray(rawTexts) ? rawTexts[j] : Array.isArray(rawIds) ? Number(rawIds[j]) : j,
          e,
          Array.isArray(rawIds) ? rawIds[j] : undefined,
        );
      else if (Array.isArray(e)) push(e[0], e[1]);
      else if (isObject(e)) push(e.token ?? e.decoded_token ?? e.text, e.logprob, e.token_id ?? e.id);
    }
  } else if (isObject(raw)) {
    for (const [k, v] of Object.entries(raw)) push(k, v, isObject(v) ? (v.token_id ?? v.id) : undefined);
  } else {
    addFlag(step, 'missingTop');
    return;
  }
  // Texts of id-keyed entries are placeholders: match them by id (every entry needs one).
  finishTop(step, entries, ids);
}

/**
 * vLLM's `prompt_logprobs` (entry 0 null; then `{"<id>": {logprob, rank, decoded_token}}`, the
 * ids as string keys) as steps from position 1. A key that is not a token id is refused: the
 * entries are matched by id, and a text key would match nothing.
 */
function promptLogprobSteps(list: unknown[], promptIds: unknown): TokenSequence | string {
  const ids = Array.isArray(promptIds) && promptIds.length === list.length ? promptIds : null;
  const steps: TokenStep[] = [];
  for (let i = 1; i < list.length; i++) {
    const entry = list[i];
    const id = ids ? readId(ids[i]) : undefined;
    const alts: Array<{ id: number | undefined; text: string; logprob: unknown }> = [];
    if (isObject(entry)) {
      for (const [k, v] of Object.entries(entry)) {
        const altId = DIGITS.test(k) ? readId(Number(k)) : undefined;
        if (altId === undefined)
          return `prompt_logprobs[${i}]: key ${JSON.stringify(k.slice(0, 40))} is not a token id`;
        const o = isObject(v) ? v : { logprob: v };
        alts.push({
          id: altId,
          text: typeof o.decoded_token === 'string' ? o.decoded_token : `token_id:${k}`,
          logprob: o.logprob,
        });
      }
    } else if (entry !== null && entry !== undefined) {
      return `prompt_logprobs[${i}]: expected an object keyed by token id, got ${Array.isArray(entry) ? 'a list' : typeof entry}`;
    }
    const own = id !== undefined ? alts.find((a) => a.id === id) : undefined;
    const step = newStep(own?.text ?? (id !== undefined ? `token_id:${id}` : ''), own?.logprob ?? null);
    if (id !== undefined) step.id = id;
    const entries: TopEntry[] = alts.map((a) => [a.text, topValue(step, a.logprob)]);
    finishTop(
      step,
      entries,
      alts.map((a) => a.id),
    );
    steps.push(step);
  }
  return ids ? { steps, source: 'prompt_logprobs' } : { steps, source: 'prompt_logprobs', chosenUnknown: true };
}

/** SGLang's `meta_info.input_token_logprobs` (`[logprob, id, text]`, entry 0 null) and `input_top_logprobs`. */
function inputTokenSteps(meta: Record<string, unknown>): TokenSequence {
  const chosen = meta.input_token_logprobs as unknown[];
  const tops = Array.isArray(meta.input_top_logprobs) ? meta.input_top_logprobs : null;
  const steps: TokenStep[] = [];
  for (let i = 0; i < chosen.length; i++) {
    const t = chosen[i];
    if (!Array.isArray(t) || (i === 0 && (t[0] === null || t[0] === undefined))) continue;
    const step = newStep(typeof t[2] === 'string' ? t[2] : `token_id:${String(t[1])}`, t[0]);
    const id = readId(t[1]);
    if (id !== undefined) step.id = id;
    const top = tops?.[i];
    if (Array.isArray(top)) {
      const entries: TopEntry[] = [];
      const ids: Array<number | undefined> = [];
      for (const e of top) {
        if (!Array.isArray(e)) continue;
        entries.push([typeof e[2] === 'string' ? e[2] : `token_id:${String(e[1])}`, topValue(step, e[0])]);
        ids.push(readId(e[1]));
      }
      finishTop(step, entries, ids);
    }
    steps.push(step);
  }
  return { steps, source: 'input_token_logprobs' };
}

/** An engine's response as one sequence: its prompt scoring when it carries one, else its generated tokens. */
export function engineSequence(body: unknown): TokenSequence | string {
  if (isObject(body)) {
    const choice = Array.isArray(body.choices) && isObject(body.choices[0]) ? body.choices[0] : null;
    const pl = choice?.prompt_logprobs ?? body.prompt_logprobs;
    if (Array.isArray(pl) && pl.length > 1)
      return promptLogprobSteps(pl, choice?.prompt_token_ids ?? body.prompt_token_ids);
    const meta = isObject(body.meta_info) ? body.meta_info : null;
    if (meta && Array.isArray(meta.input_token_logprobs) && meta.input_token_logprobs.length > 1)
      return inputTokenSteps(meta);
  }
  const parsed = parseResponse(body);
  if (parsed.steps.length === 0) return parsed.error ?? 'no logprobs';
  const steps = parsed.steps.map((s) => ({ ...s }));
  // vLLM/SGLang `return_token_ids`: the generated ids beside the steps.
  const listed =
    isObject(body) && Array.isArray(body.choices) && isObject(body.choices[0]) ? body.choices[0].token_ids : undefined;
  if (Array.isArray(listed) && listed.length === steps.length) steps.forEach((s, i) => (s.id ??= readId(listed[i])));
  return { steps, source: 'response' };
}

function fromValue(v: unknown, where: string, out: SequenceFile): void {
  if (isTokenSequence(v)) {
    const s = tokenSequences(v, out.sequences.length);
    if (typeof s === 'string') out.problems.push(`${where}: ${s}`);
    else {
      out.sequences.push(...s);
      out.kind = 'tokens';
    }
    return;
  }
  if (Array.isArray(v) && v.length > 0 && v.every(isTokenSequence)) {
    v.forEach((x, j) => fromValue(x, `${where}, sequence ${j}`, out));
    return;
  }
  if (isObject(v) && Array.isArray(v.sequences)) {
    v.sequences.forEach((x: unknown, j: number) => fromValue(x, `${where}, sequence ${j}`, out));
    return;
  }
  const e = engineSequence(v);
  if (typeof e === 'string')
    out.problems.push(`${where}: neither a token-logprob sequence nor a response with logprobs (${e})`);
  else {
    const id = isObject(v) && (typeof v.id === 'string' || typeof v.id === 'number') ? String(v.id) : undefined;
    out.sequences.push(id !== undefined && e.source !== 'response' ? { ...e, id } : e);
  }
}

/**
 * Reads a file's text as scored sequences: one JSON value (a token-logprob object, a list of
 * them, `{sequences: […]}`, or an engine response), or JSON lines of any of these. Returns null
 * when it holds no token-logprob object at all and is one response body (the caller parses it as
 * a response, with its own errors).
 */
export function readSequences(text: string): SequenceFile {
  const out: SequenceFile = { kind: 'engine', sequences: [], problems: [] };
  let whole: unknown;
  let isWhole = true;
  try {
    whole = parseJson(text);
  } catch {
    isWhole = false;
  }
  if (isWhole) {
    fromValue(whole, 'the file', out);
    return out;
  }
  const lines = text.split('\n');
  lines.forEach((line, i) => {
    if (line.trim() === '') return;
    let v: unknown;
    try {
      v = parseJson(line);
    } catch (err) {
      out.problems.push(`line ${i + 1}: invalid JSON (${(err as Error).message.split('\n')[0]})`);
      return;
    }
    fromValue(v, `line ${i + 1}`, out);
  });
  return out;
}

/** True when the text holds at least one token-logprob object (cheap check on the parsed file). */
export function holdsTokenSequences(file: SequenceFile): boolean {
  return file.kind === 'tokens';
}

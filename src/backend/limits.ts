import type { CappedField } from '../metrics/labels.js';
import type { BackendResult } from './dispatch.js';
import type { Backend } from '../core/types.js';

/**
 * Engines cap how many logprobs a request may ask for (vLLM's `--max-logprobs`, OpenAI's 20 for
 * chat and 5 for completions, hosted providers' own caps) and answer a larger request with a 400.
 * The mirror's copy asks for `mirror.topLogprobs`, so a backend with a smaller cap would refuse
 * every copy. This module reads the cap out of such an error, remembers it per backend and lowers
 * the copy to it: pure parsing, a small memory, and {@link sendWithinLimits}, the mirror's wrapper.
 */

/** The two backends a copy goes to. */

/** Statuses a server uses to refuse a parameter (400; 422 from FastAPI/pydantic validation). */
const REFUSAL = new Set([400, 422]);

/**
 * The ways servers state the cap, in the order they are tried. Each captures the cap:
 * - vLLM: `Requested sample logprobs of 21, which is greater than max allowed: 20`, older
 *   `… greater than max of 5`; Together: `5 is greater than the maximum of 1 - 'logprobs'`;
 *   `logprobs=25 exceeds max_logprobs=20`.
 * - OpenAI: `Invalid 'top_logprobs': integer above maximum value. Expected a value <= 20, but got
 *   25 instead.`; `… must be ≤ 20`; TensorRT-LLM/pydantic: `… less than or equal to 20`.
 * - Fireworks: `logprobs must be between 0 and 5: 20`; `… must be in [0, 20]` / `in range 0-20`.
 * - `at most 20`, `cannot exceed 20`, `up to 20`.
 */
const CAP_PATTERNS: readonly RegExp[] = [
  /\bmax(?:imum)?(?:[_ ](?:top[_ ])?logprobs)?(?:\s*(?:allowed|value|is|of|=|:))*\s*(\d+)/i,
  /(?:<=|≤|=<)\s*(\d+)/,
  /less than or equal to\s*(\d+)/i,
  /between\s*-?\d+\s*and\s*(\d+)/i,
  /\bin\s*(?:the\s*)?(?:range\s*)?[[(]\s*-?\d+\s*(?:,|\.\.)\s*(\d+)\s*[\])]/i,
  /\brange\s*-?\d+\s*(?:-|to|\.\.)\s*(\d+)/i,
  /\b(?:at most|cannot exceed|can't exceed|must not exceed|up to)\s*(\d+)/i,
];

/** Errors about prompt logprobs: lowering the sample logprobs would not help. */
const PROMPT_LOGPROBS = /prompt[_ ]logprobs/i;

/** The text of an error body: a string as is, an object as its JSON (every envelope's fields in one place). */
function errorText(body: unknown): string {
  if (typeof body === 'string') return body;
  if (body === null || body === undefined) return '';
  try {
    return JSON.stringify(body) ?? '';
  } catch {
    return '';
  }
}

/**
 * The logprobs cap a backend stated when it refused a request for asking too many, or `null`
 * when the answer is not such a refusal (another status, another error, no number found).
 * Tolerant by design: any 400/422 whose text mentions logprobs and states a maximum in one of the
 * known phrasings counts. The caller still checks the cap is below what it asked for. With
 * `prompt`, only a refusal of prompt logprobs counts.
 */
export function parseLogprobLimit(status: number, body: unknown, options: { prompt?: boolean } = {}): number | null {
  if (!REFUSAL.has(status)) return null;
  const text = errorText(body);
  // `prompt`: the cap of prompt logprobs instead (what `logprobe probe` asks of vLLM's scoring).
  if (
    text.length === 0 ||
    text.length > 64 * 1024 ||
    !/logprob/i.test(text) ||
    PROMPT_LOGPROBS.test(text) !== (options.prompt ?? false)
  )
    return null;
  for (const pattern of CAP_PATTERNS) {
    const m = pattern.exec(text);
    if (!m) continue;
    const n = Number(m[1]);
    if (Number.isSafeInteger(n) && n >= 0) return n;
  }
  return null;
}

/**
 * The logprobs cap of a scoring request (vLLM's `prompt_logprobs`: `Requested prompt logprobs of
 * 25, which is greater than max allowed: 20`, `sampling_params.py` `_validate_logprobs`), or
 * `null` when the answer is no such refusal. The prompt-logprob counterpart of
 * {@link parseLogprobLimit}, which leaves these out on purpose (a copy's sample logprobs are not
 * what was refused).
 */
export function parsePromptLogprobLimit(status: number, body: unknown): number | null {
  return parseLogprobLimit(status, body, { prompt: true });
}

/** The cap a refusal states for `field`: prompt logprobs by {@link parsePromptLogprobLimit}, any other by {@link parseLogprobLimit}. */
export function parseCapFor(field: CappedField, status: number, body: unknown): number | null {
  return field === 'prompt_logprobs' ? parsePromptLogprobLimit(status, body) : parseLogprobLimit(status, body);
}

/** The field that carries the count: chat's `top_logprobs`, completions' integer `logprobs`. */
export type LogprobsField = 'top_logprobs' | 'logprobs';

/**
 * How many top logprobs a mirrored body asks for, and in which field; `null` when it asks for
 * none that a cap applies to.
 */
export function requestedLogprobs(body: Readonly<Record<string, unknown>>): { field: LogprobsField; k: number } | null {
  if (typeof body.top_logprobs === 'number' && Number.isFinite(body.top_logprobs))
    return { field: 'top_logprobs', k: body.top_logprobs };
  if (typeof body.logprobs === 'number' && Number.isFinite(body.logprobs))
    return { field: 'logprobs', k: body.logprobs };
  return null;
}

/** A copy of `body` asking for at most `k` top logprobs (chat: `top_logprobs`; completions: `logprobs`). */
export function withinLogprobs(body: Readonly<Record<string, unknown>>, k: number): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body };
  if (typeof out.top_logprobs === 'number' && out.top_logprobs > k) out.top_logprobs = k;
  if (typeof out.logprobs === 'number' && out.logprobs > k) out.logprobs = k;
  return out;
}

/**
 * The caps learned so far, per backend and per field (OpenAI caps chat's `top_logprobs` at 20
 * but completions' `logprobs` at 5; vLLM's one cap is simply learned for each). A cap only ever
 * goes down.
 */
export class LogprobLimits {
  private readonly caps = new Map<string, number>();

  /** The cap learned for a backend's field, if any. */
  get(backend: Backend, field: CappedField): number | undefined {
    return this.caps.get(`${backend} ${field}`);
  }

  /** Records a cap; true when it is new or lower than the one known (worth a log line). */
  learn(backend: Backend, field: CappedField, cap: number): boolean {
    const known = this.get(backend, field);
    if (known !== undefined && known <= cap) return false;
    this.caps.set(`${backend} ${field}`, cap);
    return true;
  }

  /** The most both backends accept for `requested` in `field`: the request capped by both backends' caps. */
  effective(field: CappedField, requested: number): number {
    const c = this.get('candidate', field) ?? Infinity;
    const b = this.get('baseline', field) ?? Infinity;
    return Math.min(requested, c, b);
  }
}

/** What {@link sendWithinLimits} needs. */
export interface LimitedSend {
  /** The mirrored body. */
  body: Record<string, unknown>;
  /** `JSON.stringify(body)`, when the caller already has it. */
  payload?: string;
  limits: LogprobLimits;
  /** Sends a payload to one backend. */
  send(backend: Backend, payload: string): Promise<BackendResult>;
  /** Called when a cap is learned or lowered (once per new cap, however many copies raced). */
  onLearned?(backend: Backend, field: LogprobsField, cap: number, requested: number): void;
  /** Called for every refusal resent within the cap (`logprobe_logprobs_capped_total`). */
  onRefused?(backend: Backend, field: LogprobsField): void;
}

/** Both answers, and the body both backends finally got (the one the pair should record). */
export interface LimitedPair {
  candidate: BackendResult;
  baseline: BackendResult;
  body: Record<string, unknown>;
}

function succeeded(r: BackendResult): boolean {
  return r.error === null && r.status < 400;
}

/**
 * Sends a mirrored copy to one backend within its cap (baseline-free mode, repeat probes): a
 * refusal for asking too many logprobs is learned and retried once within the cap.
 */
export async function sendOneWithinLimits(
  opts: LimitedSend,
  backend: Backend,
): Promise<{ result: BackendResult; body: Record<string, unknown> }> {
  const asked = requestedLogprobs(opts.body);
  if (asked === null)
    return { result: await opts.send(backend, opts.payload ?? JSON.stringify(opts.body)), body: opts.body };
  const known = opts.limits.get(backend, asked.field) ?? Infinity;
  const k = Math.min(asked.k, known);
  const body = k < asked.k ? withinLogprobs(opts.body, k) : opts.body;
  const result = await opts.send(
    backend,
    k < asked.k || opts.payload === undefined ? JSON.stringify(body) : opts.payload,
  );
  const cap = parseLogprobLimit(result.status, result.body);
  if (cap === null || cap >= k) return { result, body };
  opts.onRefused?.(backend, asked.field);
  if (opts.limits.learn(backend, asked.field, cap)) opts.onLearned?.(backend, asked.field, cap, k);
  const lowered = withinLogprobs(body, cap);
  return { result: await opts.send(backend, JSON.stringify(lowered)), body: lowered };
}

/**
 * Sends a mirrored copy to both backends within the caps learned so far. A backend that refuses
 * it for asking too many logprobs has its cap learned and gets the copy once more, lowered to the
 * cap. Both sides are compared over the same top-k: when one side was lowered during this call,
 * the other (if it answered) is sent the lowered copy too, so a pair never mixes widths. Later
 * copies go out within the cap from the start.
 */
export async function sendWithinLimits(opts: LimitedSend): Promise<LimitedPair> {
  const { body, limits } = opts;
  const asked = requestedLogprobs(body);
  if (asked === null) {
    const payload = opts.payload ?? JSON.stringify(body);
    const [candidate, baseline] = await Promise.all([opts.send('candidate', payload), opts.send('baseline', payload)]);
    return { candidate, baseline, body };
  }
  const { field, k: requested } = asked;
  const k = limits.effective(field, requested);
  const first = k < requested ? withinLogprobs(body, k) : body;
  const firstPayload = k < requested || opts.payload === undefined ? JSON.stringify(first) : opts.payload;

  const attempt = async (backend: Backend): Promise<{ result: BackendResult; k: number }> => {
    const result = await opts.send(backend, firstPayload);
    const cap = parseLogprobLimit(result.status, result.body);
    if (cap === null || cap >= k) return { result, k };
    opts.onRefused?.(backend, field);
    if (limits.learn(backend, field, cap)) opts.onLearned?.(backend, field, cap, k);
    return { result: await opts.send(backend, JSON.stringify(withinLogprobs(first, cap))), k: cap };
  };
  const [c, b] = await Promise.all([attempt('candidate'), attempt('baseline')]);
  if (c.k === b.k)
    return { candidate: c.result, baseline: b.result, body: c.k === k ? first : withinLogprobs(first, c.k) };
  // One side was lowered here: send the other the same lowered copy (once), so both match.
  const low = Math.min(c.k, b.k);
  const lowered = withinLogprobs(first, low);
  const wider = c.k > b.k ? c : b;
  if (succeeded(wider.result)) {
    wider.result = await opts.send(c.k > b.k ? 'candidate' : 'baseline', JSON.stringify(lowered));
    wider.k = low;
  }
  return { candidate: c.result, baseline: b.result, body: lowered };
}

import { compare } from './compare.js';
import { parseResponse } from './parse/index.js';
import type { Comparison, ParsedResponse, PromptMismatch, Thresholds } from './types.js';
import type { Backend } from './types.js';

/** What a backend answered, as far as the classification is concerned (a live result or a capture's side). */
export interface SideAnswer {
  status: number;
  body: unknown;
  error?: string | null;
}

/** A pair's outcome once both answers are in (the mirror adds `dropped` and `skipped` before that). */
export type PairOutcome = 'ok' | 'candidate_error' | 'baseline_error' | 'unparseable' | 'incomparable';

/** A pair classified: its outcome, the side it blames, and the comparison when there is one. */
export interface PairClass {
  outcome: PairOutcome;
  /** The side whose answer failed or could not be read (errors and `unparseable` only). */
  side?: Backend;
  /** The free-running comparison (rescored by `score`, when given): `ok` and `incomparable` with a baseline. */
  comparison: Comparison | null;
  candidate: ParsedResponse | null;
  baseline: ParsedResponse | null;
}

/** A transport error or an HTTP error status. */
export function failedAnswer(s: SideAnswer): boolean {
  return (s.error !== undefined && s.error !== null) || s.status >= 400;
}

function unreadable(p: ParsedResponse): boolean {
  return p.format === 'unknown' || p.format === 'error';
}

/**
 * The one classification of a mirrored pair, online (src/mirror/mirror.ts), in `analyze` and in
 * `replay` (src/report/pair.ts): an error on the candidate, then on the baseline, then a body that
 * does not parse (the candidate's first), then `compare`, whose `incomparable` verdict is an
 * outcome of its own. Without a baseline (`null`: baseline-free mode) a candidate that answered is
 * `ok` with nothing compared. `score` folds scoring into the comparison before the verdict is read
 * (offline: the captured scoring re-counted). Pure.
 */
export function classifyPair(
  candidate: SideAnswer,
  baseline: SideAnswer | null,
  t: Thresholds,
  score?: (free: Comparison) => Comparison,
): PairClass {
  const none = { comparison: null, candidate: null, baseline: null };
  if (failedAnswer(candidate)) return { outcome: 'candidate_error', side: 'candidate', ...none };
  if (baseline === null) return { outcome: 'ok', ...none };
  if (failedAnswer(baseline)) return { outcome: 'baseline_error', side: 'baseline', ...none };
  const pc = parseResponse(candidate.body);
  const pb = parseResponse(baseline.body);
  if (unreadable(pc) || unreadable(pb))
    return {
      outcome: 'unparseable',
      side: unreadable(pc) ? 'candidate' : 'baseline',
      comparison: null,
      candidate: pc,
      baseline: pb,
    };
  const free = compare(pc, pb, t);
  // Different prompt token counts: the two sides read different prompts (a template or a
  // tokenizer). A tokenizer_mismatch already says which (the same text in other tokens), and an
  // incomparable pair has nothing to compare: both keep their verdict.
  const mismatch =
    free.verdict === 'tokenizer_mismatch' || free.verdict === 'incomparable'
      ? null
      : promptMismatch(candidate.body, baseline.body);
  // A prompt mismatch is settled before scoring; `score` still folds in what the scoring said of it
  // (online: skipped, not needed), so that offline the captured block is read back as online.
  const judged = mismatch === null ? free : asPromptMismatch(free, mismatch);
  const comparison = score ? score(judged) : judged;
  return {
    outcome: comparison.verdict === 'incomparable' ? 'incomparable' : 'ok',
    comparison,
    candidate: pc,
    baseline: pb,
  };
}

/**
 * The prompt tokens a server says it read: `usage.prompt_tokens` (chat, completions),
 * `usage.input_tokens` (the Responses API), SGLang's `meta_info.prompt_tokens`; null when it does not say.
 */
export function promptTokens(body: unknown): number | null {
  if (typeof body !== 'object' || body === null) return null;
  const b = body as {
    usage?: { prompt_tokens?: unknown; input_tokens?: unknown };
    meta_info?: { prompt_tokens?: unknown };
  };
  for (const v of [b.usage?.prompt_tokens, b.usage?.input_tokens, b.meta_info?.prompt_tokens])
    if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
  return null;
}

/** Both sides said how many prompt tokens they read, and the counts differ: they did not read the same prompt. */
export function promptMismatch(candidate: unknown, baseline: unknown): PromptMismatch | null {
  const c = promptTokens(candidate);
  const b = promptTokens(baseline);
  return c !== null && b !== null && c !== b ? { candidateTokens: c, baselineTokens: b } : null;
}

/**
 * A comparison made a `prompt_mismatch`: the two sides answered different prompts, so their
 * logprobs are not a measure of the server — the free-running figures are kept for the record,
 * the verdict and explanation say what differs, nothing is scored and no detector counts a shift.
 */
export function asPromptMismatch(free: Comparison, m: PromptMismatch): Comparison {
  return { ...free, verdict: 'prompt_mismatch', explanation: promptMismatchText(m), promptMismatch: m };
}

/** The verdict in words: the counts, and the first differing token where known. */
export function promptMismatchText(m: PromptMismatch): string {
  const where =
    m.at !== undefined && m.candidate && m.baseline
      ? ` They first differ at prompt token ${m.at}: the candidate read ${tokenText(m.candidate)}, the baseline ${tokenText(m.baseline)}.`
      : '';
  return `Prompt mismatch: the two sides read different prompts for the same request (the candidate ${m.candidateTokens} prompt tokens, the baseline ${m.baselineTokens}): a chat template or a tokenizer differs, so their logprobs are not compared.${where}`;
}

function tokenText(t: { id: number | null; text: string | null }): string {
  const text = t.text === null ? '' : `${JSON.stringify(t.text)} `;
  return t.id === null ? text.trim() || 'nothing (its prompt ends there)' : `${text}(id ${t.id})`;
}

import { compare } from './compare.js';
import { parseResponse } from './parse/index.js';
import type { Comparison, ParsedResponse, Thresholds } from './types.js';
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
  const comparison = score ? score(free) : free;
  return {
    outcome: comparison.verdict === 'incomparable' ? 'incomparable' : 'ok',
    comparison,
    candidate: pc,
    baseline: pb,
  };
}

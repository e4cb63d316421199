import { compare, parseResponse, type Comparison, type ParsedResponse, type Thresholds } from '../core/index.js';
import type { MirrorOutcome } from '../mirror/types.js';

/** What a backend answered, as far as the comparison is concerned (a capture side or a live result). */
export interface SideAnswer {
  status: number;
  body: unknown;
  error?: string | null;
}

/** One pair analysed: the mirror's outcome and, when both sides were usable, the comparison and the parsed bodies. */
export interface PairResult {
  outcome: MirrorOutcome;
  comparison: Comparison | null;
  candidate: ParsedResponse | null;
  baseline: ParsedResponse | null;
}

function failed(s: SideAnswer): boolean {
  return (s.error !== undefined && s.error !== null) || s.status >= 400;
}

/**
 * The mirror's own classification and comparison of a pair (src/mirror/mirror.ts `process`),
 * for `analyze` and `replay`: an error on a side, then an unparseable body, then `compare`, whose
 * `incomparable` verdict is an outcome of its own. Pure; the same inputs and thresholds give the
 * online result exactly.
 */
export function analyzePair(candidate: SideAnswer, baseline: SideAnswer, thresholds: Thresholds): PairResult {
  if (failed(candidate)) return { outcome: 'candidate_error', comparison: null, candidate: null, baseline: null };
  if (failed(baseline)) return { outcome: 'baseline_error', comparison: null, candidate: null, baseline: null };
  const pc = parseResponse(candidate.body);
  const pb = parseResponse(baseline.body);
  if (pc.format === 'unknown' || pb.format === 'unknown' || pc.format === 'error' || pb.format === 'error') {
    return { outcome: 'unparseable', comparison: null, candidate: pc, baseline: pb };
  }
  const comparison = compare(pc, pb, thresholds);
  return { outcome: comparison.verdict === 'incomparable' ? 'incomparable' : 'ok', comparison, candidate: pc, baseline: pb };
}

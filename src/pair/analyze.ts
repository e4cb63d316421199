import {
  compare,
  parseResponse,
  recount,
  withScoring,
  type Comparison,
  type Health,
  type ParsedResponse,
  type PromptBlock,
  type PromptMismatch,
  type ScoredBlock,
  type Thresholds,
} from '../core/index.js';
import { asPromptMismatch, classifyPair, failedAnswer, type SideAnswer } from '../core/pair.js';
import { clip, failureReason } from '../backend/failure.js';
import type { MirrorOutcome } from './types.js';
import { PROBE_SHAPES, probeShape, repeatCache, selfVerdict, type ProbeShape, type SelfVerdict } from '../core/self.js';
import type { Backend } from '../core/types.js';

/** One pair analysed: the mirror's outcome and, when both sides were usable, the comparison and the parsed bodies. */
export interface PairResult {
  outcome: MirrorOutcome;
  /** Why a pair was not compared (a transport error, an HTTP status, an unusable body), in a few words. */
  reason?: string;
  comparison: Comparison | null;
  candidate: ParsedResponse | null;
  baseline: ParsedResponse | null;
  /** No baseline (baseline-free mode): nothing to compare but the repeats. */
  baselineFree?: true;
}

/**
 * A pair classified as the mirror classifies it ({@link classifyPair}, src/core/pair.ts), for
 * `analyze` and `replay`, with the reason a pair was not compared; captured scoring is re-counted
 * against `thresholds` before the verdict is read. Pure; the same inputs and thresholds give the
 * online result exactly.
 */
export function analyzePair(
  candidate: SideAnswer,
  baseline: SideAnswer | null,
  thresholds: Thresholds,
  scoring?: CapturedScoring,
): PairResult {
  const c = classifyPair(
    candidate,
    baseline,
    thresholds,
    scoring?.scored ? (free) => rescored(free, scoring, thresholds) : undefined,
  );
  const { outcome } = c;
  const comparison = located(c.comparison, scoring?.promptMismatch);
  if (outcome === 'candidate_error' || outcome === 'baseline_error')
    return {
      outcome,
      reason: failureReason(outcome === 'candidate_error' || baseline === null ? candidate : baseline),
      comparison,
      candidate: null,
      baseline: null,
    };
  if (outcome === 'unparseable') {
    const p = (c.side === 'candidate' ? c.candidate : c.baseline)!;
    return {
      outcome,
      reason: clip(`${c.side}: ${p.error ?? `a ${p.format} body`}`),
      comparison,
      candidate: c.candidate,
      baseline: c.baseline,
    };
  }
  return { outcome, comparison, candidate: c.candidate, baseline: c.baseline };
}

/** A repeat probe analysed offline: the two runs of one backend compared again, its captured scoring re-counted. */
export interface RepeatResult {
  backend: Backend;
  flushed: boolean;
  /** What the pair probed, as the engine reported its cache hits (only cold_warm is seen by the self alert). */
  probe: ProbeShape;
  comparison: Comparison | null;
  verdict: SelfVerdict | null;
}

/** Re-analyses a captured repeat probe: second run vs first (the record's side of that backend). */
export function analyzeRepeat(
  first: SideAnswer | null,
  r: {
    backend: Backend;
    flushed: boolean;
    probe?: unknown;
    second: SideAnswer & { body?: unknown };
    analysis?: CapturedScoring | null;
  },
  t: Thresholds,
): RepeatResult {
  // As judged online (the counts as the backend was known to report them, the flush confirmed or
  // not); a record without `probe` (written before captures carried it): from its own counts, a
  // flush taken as confirmed.
  const probe = PROBE_SHAPES.includes(r.probe as ProbeShape)
    ? (r.probe as ProbeShape)
    : probeShape(repeatCache(first?.body, r.second.body), r.flushed);
  const base = { backend: r.backend, flushed: r.flushed, probe };
  if (first === null || failedAnswer(first) || failedAnswer(r.second))
    return { ...base, comparison: null, verdict: null };
  const free = compare(parseResponse(r.second.body), parseResponse(first.body), t);
  const comparison =
    r.analysis?.scored && free.verdict !== 'incomparable'
      ? rescored(free, { scored: r.analysis.scored, prompt: null }, t)
      : free;
  return { ...base, comparison, verdict: selfVerdict(comparison) };
}

/** The scoring a pair carried when it was compared live (a capture's `analysis.scored`/`prompt`). */
export interface CapturedScoring {
  scored?: ScoredBlock | undefined;
  prompt?: PromptBlock | null | undefined;
  /** The health measured live: over the scored positions it cannot be recomputed offline. */
  health?: Health | undefined;
  /** Where the two sides' prompts first differed, as the engines said live (a `prompt_mismatch`). */
  promptMismatch?: PromptMismatch | undefined;
}

/** A `prompt_mismatch` re-classified offline keeps where the engines said live the prompts differ (nothing is tokenized again). */
function located(c: Comparison | null, live: PromptMismatch | undefined): Comparison | null {
  const m = c?.promptMismatch;
  if (!c || !m || live?.at === undefined) return c;
  if (live.candidateTokens !== m.candidateTokens || live.baselineTokens !== m.baselineTokens) return c;
  return asPromptMismatch(c, live);
}

/**
 * Folds captured scoring into a comparison re-run offline: nothing is scored again (there is no
 * engine), but the captured per-position shifts are counted against the thresholds in force, so a
 * new floor re-judges the scored positions too.
 */
function rescored(free: Comparison, s: CapturedScoring, t: Thresholds): Comparison {
  const scored = s.scored!;
  const block: ScoredBlock =
    scored.outcome === 'ok' && Array.isArray(scored.shifts) ? { ...scored, ...recount(scored.shifts, t) } : scored;
  const prompt: PromptBlock | null =
    s.prompt && Array.isArray(s.prompt.shifts) ? { ...recount(s.prompt.shifts, t), start: s.prompt.start } : null;
  const c = withScoring(free, block, prompt, t);
  // Health over teacher-forced positions was measured live (nothing is scored again): the captured figures stand.
  return s.health?.over === 'scored' && block.outcome === 'ok' ? { ...c, health: s.health } : c;
}

export { failureReason, type SideAnswer };

import { compare } from './compare.js';
import type { DefinitionWarning } from './definition.js';
import { recount, type ForcedStats } from './scored.js';
import type { Backend, ParsedResponse, Thresholds, TokenStep } from './types.js';

/**
 * The path check (docs/detection.md "Decode vs prefill"): one backend's logprobs of the tokens it
 * generated, as it reported them while decoding, against the same tokens scored in one prefill
 * pass on the same backend. The tokens are the same on both sides by construction; what moves is
 * the path: speculative or MTP decoding, prompt logprobs computed without an adapter's head,
 * stale prefill buffers, decode-only kernels. A wrong weight moves both paths alike and is silent
 * here (the pair check sees it); a prefill-only bug is the reverse.
 */
export const PATH_VERDICTS = ['incomparable', 'identical', 'noise', 'path_inconsistent'] as const;
export type PathVerdict = (typeof PATH_VERDICTS)[number];

/** The decode and prefill positions compared: the forced-position statistics and the verdict. */
export interface PathComparison extends ForcedStats {
  verdict: PathVerdict;
  /** The floor the positions were counted against, nats. */
  noiseFloor: number;
  /**
   * What the definition checks saw (src/core/definition.ts; `candidate` is the decode side,
   * `baseline` the prefill): a decode path that reports every logprob as 0.0 is no distribution
   * (`single_survivor`, `renormalised_subset`), whatever it is compared with.
   */
  definition?: DefinitionWarning[];
}

/** Why a backend's path was not checked, or the check's outcome. */
export type PathOutcome = 'ok' | 'unsupported' | 'skipped' | 'failed';

/** One backend's path check of one mirrored copy. */
export interface PathPair {
  backend: Backend;
  outcome: PathOutcome;
  /** Why not `ok` (unsupported engine, skipped to keep up, failed call). */
  reason?: string;
  /** The engine API the prefill used (e.g. `vllm /v1/completions prompt_logprobs`). */
  method?: string;
  /** The comparison; null unless `outcome` is `ok`. */
  analysis: PathComparison | null;
  verdict: PathVerdict | null;
}

/**
 * Compares decode-time steps with the prefill's steps of the same tokens: `incomparable` when no
 * position has a known shift on both, `identical` when every shift is 0, `noise` when none is
 * above the floor, else `path_inconsistent`. A decode step the server reported as all zeros (or
 * with a chosen logprob above 0) is not a distribution: the definition check flags it where the
 * answer is parsed, and here it simply moves far from the prefill's.
 */
export function comparePaths(
  decode: readonly TokenStep[],
  prefill: readonly TokenStep[],
  t: Thresholds,
): PathComparison {
  const n = Math.min(decode.length, prefill.length);
  const c = compare(steps(decode.slice(0, n)), steps(prefill.slice(0, n)), t);
  const stats = recount(
    c.positions.map((p) => p.shift),
    t,
  );
  return {
    ...stats,
    verdict: pathVerdict(stats),
    noiseFloor: t.noiseFloor,
    ...(c.definition && c.definition.length > 0 ? { definition: c.definition } : {}),
  };
}

/** The path verdict of counted positions: none comparable, all exactly equal, none above the floor, or some above it. */
export function pathVerdict(stats: Pick<ForcedStats, 'comparable' | 'maxShift' | 'shifted'>): PathVerdict {
  if (stats.comparable === 0) return 'incomparable';
  if (stats.maxShift === 0) return 'identical';
  if (stats.shifted === 0) return 'noise';
  return 'path_inconsistent';
}

/**
 * A captured path pair judged again offline (`analyze`): its stored shifts re-counted against
 * `noiseFloor` (default: the floor it was counted against online, so the online verdict is
 * reproduced exactly). A pair without an analysis (not `ok`) is returned as it was.
 */
export function rejudgePath(p: PathPair, noiseFloor?: number): PathPair {
  const a = p.analysis;
  if (a === null || !Array.isArray(a.shifts)) return p;
  const floor = noiseFloor ?? a.noiseFloor;
  const stats = recount(a.shifts, { noiseFloor: floor });
  const verdict = pathVerdict(stats);
  return { ...p, analysis: { ...a, ...stats, verdict, noiseFloor: floor }, verdict };
}

function steps(s: TokenStep[]): ParsedResponse {
  return { format: 'completions', stream: false, steps: s, text: s.map((x) => x.token).join(''), flags: [] };
}

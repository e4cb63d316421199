/**
 * The analysis core: parse response bodies into token steps, compare a candidate with a baseline,
 * and explain the verdict. Pure TypeScript with no I/O, shared by the proxy, `compare`,
 * `analyze`, `replay` and the tests.
 */
export { compare } from './compare.js';
export { parseResponse } from './parse/index.js';
export { flipClass, chooseVerdict, boundariesDiffer, type VerdictInput } from './verdict.js';
export { formatNats } from './explain.js';
export {
  DEFAULT_THRESHOLDS,
  VERDICTS,
  pickThresholds,
  type Comparison,
  type Flip,
  type FlipClass,
  type ParsedResponse,
  type PositionRow,
  type ResponseFormat,
  type StepFlag,
  type Thresholds,
  type TokenStep,
  type TopEntry,
  type Verdict,
} from './types.js';
export {
  withScoring,
  detectorEvidence,
  scoredBlocks,
  notScored,
  forcedStats,
  recount,
  type ForcedStats,
  type Locus,
  type PromptBlock,
  type ScoredBlock,
  type ScoredComparison,
  type ScoredPair,
  type ScoredSide,
  type ScoringMode,
  type ScoringOutcome,
} from './scored.js';

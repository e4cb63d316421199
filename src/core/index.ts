/**
 * The analysis core: parse response bodies into token steps, compare a candidate with a baseline,
 * and explain the verdict. Pure TypeScript with no I/O, shared by the proxy, `compare`,
 * `analyze`, `replay` and the tests.
 */
export type { Backend } from './types.js';
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
  type PromptMismatch,
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
export {
  HEALTH_LIMITS,
  LOGITS_TOP,
  FigureSum,
  healthMarks,
  healthOf,
  logitsFigure,
  maxLogits,
  relativeError,
  type Figure,
  type Health,
  type LogitsFigure,
  type PositionBlock,
} from './health.js';
export {
  DEFINITION_CHECKS,
  definitionChecks,
  sideChecks,
  temperatureCheck,
  type DefinitionCheck,
  type DefinitionWarning,
} from './definition.js';
export { asForced, withScoredHealth } from './forced.js';
export {
  GATE_DEFAULTS,
  GATE_KINDS,
  GateAccumulator,
  HealthAccumulator,
  judge,
  parseGates,
  type GateCase,
  type GateKind,
  type GatePair,
  type GateResult,
  type GateSpec,
  type GateWorst,
  type RunDefinition,
  type RunHealth,
} from './gates.js';
export {
  engineSequence,
  isTokenSequence,
  readSequences,
  type SequenceFile,
  type TokenSequence,
} from './parse/tokenfile.js';
export {
  alignSequences,
  compareTraining,
  pairSequences,
  trainingPair,
  RATIO_BOUNDS,
  type TrainingBlock,
  type TrainingComparison,
} from './training.js';

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

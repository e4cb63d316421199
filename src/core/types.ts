import type { DefinitionWarning } from './definition.js';
import type { Health } from './health.js';
import type { Locus, PromptBlock, ScoredBlock } from './scored.js';

/**
 * Shared types of the analysis core: what a parsed response looks like, the thresholds that turn
 * numbers into a verdict, and the comparison object whose field names are a contract
 * (docs/format.md, "The comparison" and the `--json` field list).
 */

/** One side of a comparison: the build under test, or the trusted one. */
export type Backend = 'candidate' | 'baseline';

/** The thresholds of the documented `analysis` section, all in nats except the fraction and count. */
export interface Thresholds {
  /** A position whose shift is strictly above this is *shifted* (not float noise). */
  noiseFloor: number;
  /** Flips whose gap is below this are near-ties that cannot be attributed. */
  gapAmbiguous: number;
  /** Flips whose gap is above this need a systematic shift. */
  gapSystematic: number;
  /** Shifted share of comparable positions at or above which a shift is global. */
  globalFraction: number;
  /** Fewer comparable positions than this make a shift an `early_shift`. */
  minAligned: number;
}

/** the documented defaults: floor 0.1, gaps 0.3 / 0.4, global share 0.8, at least 3 positions. */
export const DEFAULT_THRESHOLDS: Readonly<Thresholds> = Object.freeze({
  noiseFloor: 0.1,
  gapAmbiguous: 0.3,
  gapSystematic: 0.4,
  globalFraction: 0.8,
  minAligned: 3,
});

/** The five thresholds out of a wider object (a config's `analysis`, which also holds `scoring`). */
export function pickThresholds(
  a: Readonly<Omit<Thresholds, 'noiseFloor'> & { noiseFloor: unknown }>,
  noiseFloor?: number,
): Thresholds {
  const floor = noiseFloor ?? a.noiseFloor;
  if (typeof floor !== 'number') throw new TypeError('pickThresholds: a numeric noise floor is needed');
  return {
    noiseFloor: floor,
    gapAmbiguous: a.gapAmbiguous,
    gapSystematic: a.gapSystematic,
    globalFraction: a.globalFraction,
    minAligned: a.minAligned,
  };
}

/**
 * Why a value of a step could not be taken at face value. The numbers concerned are kept out of
 * every statistic; the step itself stays aligned.
 *
 * - `sentinel`: the chosen logprob was −9999 (vLLM/OpenAI) or ≤ −3.4e38 (llama.cpp, SGLang).
 * - `nullLogprob`: the chosen logprob was `null`, missing, not a number (NaN in a stream) or
 *   above 1 (not a logprob).
 * - `missingTop`: the step has no top list (`null` or absent).
 * - `sentinelInTop`: a top entry carried a sentinel, null, NaN or a value above 1 (kept as
 *   `-Infinity`).
 * - `collapsedTopK`: a completions top dict lost keys (the chosen token is absent from its own
 *   dict, or it has fewer entries than the response asked for): two token ids decoded to one string.
 * - `duplicateTopKeys`: a top list names the same token twice (the first, larger, value is used).
 * - `tokenIdPlaceholder`: the token came as vLLM's `token_id:N`; its text is unknown.
 * - `probability`: the value came as a probability (llama.cpp `post_sampling_probs`) and was logged.
 */
export type StepFlag =
  | 'sentinel'
  | 'nullLogprob'
  | 'missingTop'
  | 'sentinelInTop'
  | 'collapsedTopK'
  | 'duplicateTopKeys'
  | 'tokenIdPlaceholder'
  | 'probability';

/** One top-k alternative: `[token, logprob]`, the logprob finite or `-Infinity` for a sentinel. */
export type TopEntry = [token: string, logprob: number];

/** One generated token with its log-probability and the alternatives the server reported. */
export interface TokenStep {
  /** The chosen token's text (vLLM's `token_id:N` placeholder kept as sent). */
  token: string;
  /** The chosen token's logprob; `null` when the server sent a sentinel, null, NaN or nothing. */
  logprob: number | null;
  /** Top-k alternatives sorted by logprob, largest first (sentinels last, as `-Infinity`). */
  top: TopEntry[];
  /** Token ids of `top`, index for index, present only when every entry carried one. */
  topIds?: number[];
  /** The chosen token's id, when the format carries it (llama.cpp, SGLang native, `token_id:N`). */
  id?: number;
  /** The chosen token's bytes, when the format carries them. */
  bytes?: number[];
  /** What was unusual about this step; absent when nothing was. */
  flags?: StepFlag[];
}

/**
 * The wire format a body was recognised as. `error` is an error envelope from the server,
 * `unknown` anything that is not a completion response.
 */
export type ResponseFormat =
  | 'completions'
  | 'chat'
  | 'responses'
  | 'llamacpp-completions'
  | 'llamacpp-native'
  | 'sglang-native'
  | 'error'
  | 'unknown';

/** A response body reduced to its token steps. */
export interface ParsedResponse {
  /** The recognised wire format. */
  format: ResponseFormat;
  /** Whether the body was a stream of chunks (SSE, or saved chunk objects). */
  stream: boolean;
  /** The generated tokens, in order; empty when the body carries no logprobs. */
  steps: TokenStep[];
  /** The generated text as the server reported it (or the tokens joined when it did not). */
  text: string;
  /** Response-level flags: every distinct step flag, plus notes such as `multipleChoices`. */
  flags: string[];
  /** `model` of the response, when present. */
  model?: string;
  /** `system_fingerprint` of the response, when present. */
  systemFingerprint?: string;
  /** Why `steps` is empty (not a response, an error body, no logprobs); absent when usable. */
  error?: string;
}

/**
 * The seven verdicts, in the documented order of precedence (the first that matches wins): the one
 * list every other place (metrics' zero-initialised series, reports, `--fail-on`) uses.
 */
export const VERDICTS = [
  'incomparable',
  'prompt_mismatch',
  'tokenizer_mismatch',
  'identical',
  'noise',
  'early_shift',
  'global_shift',
  'local_shift',
] as const;

/** A verdict: one of {@link VERDICTS}. */
export type Verdict = (typeof VERDICTS)[number];

/** How much force a flip needed: below gapAmbiguous, between, above gapSystematic. */
export type FlipClass = 'ambiguous' | 'gray' | 'systematic';

/** The first divergence, seen from the baseline's distribution. */
export interface Flip {
  /** Position of the divergence (= `firstDivergence`). */
  index: number;
  /** A: the token the baseline chose. */
  baselineToken: string;
  /** B: the token the candidate chose. */
  candidateToken: string;
  /** lp_b(A) − lp_b(B); `null` when the baseline's own logprob is unknown. */
  gap: number | null;
  /** True when B is outside the baseline's top-k, so `gap` is only a lower bound. */
  lowerBound: boolean;
  /** The gap's class against the thresholds. */
  class: FlipClass;
  /** lp_c(A) − lp_b(A) when A is in the candidate's top-k, else `null`. */
  crossPathDiff: number | null;
}

/** One comparable position of the `positions[]` table. */
export interface PositionRow {
  /** Position index. */
  i: number;
  /** The shared token (at the divergence: the baseline's token). */
  token: string;
  /** At the divergence only: the candidate's token. */
  candidateToken?: string;
  /** The candidate's logprob of its chosen token. */
  candidate: number | null;
  /** The baseline's logprob of its chosen token. */
  baseline: number | null;
  /** lp_c(t_i) − lp_b(t_i) before the divergence; `null` at it or when a side is unknown. */
  diff: number | null;
  /** max |lp_c(t) − lp_b(t)| over tokens both sides report; `null` when none is known to both. */
  shift: number | null;
  /** The baseline's top-1 − top-2 gap at this position; `null` with fewer than two entries. */
  gap: number | null;
  /** KL(baseline ‖ candidate) estimated over the union of both top-k lists plus a tail bucket. */
  kl: number | null;
}

/**
 * The result of comparing a candidate's response with a baseline's. Field names are the
 * `compare --json` contract; every number is finite or `null`.
 */
export interface Comparison {
  /** The verdict (first match in the documented order). */
  verdict: Verdict;
  /** Positions where both sides chose the same token (before the first divergence). */
  aligned: number;
  /** Positions whose distributions are compared: 0..d, or the common length without divergence. */
  comparable: number;
  /** Comparable positions whose shift is above the noise floor. */
  shifted: number;
  /** The first position where the chosen tokens differ, or `null`. */
  firstDivergence: number | null;
  /** Largest |diff_i| over aligned positions. */
  maxAbsDiff: number | null;
  /** Mean |diff_i| over aligned positions. */
  meanAbsDiff: number | null;
  /** Largest shift_i over comparable positions. */
  maxShift: number | null;
  /** Mean shift_i over comparable positions where it is known. */
  meanShift: number | null;
  /** shifted / comparable. */
  shiftedFraction: number | null;
  /** The flip at the first divergence, or `null`. */
  flip: Flip | null;
  /** The verdict as a sentence: its likely cause and what to do next (src/core/explain.ts). */
  explanation: string;
  /** Notes on the inputs (length mismatch, flagged values), for reports; never used by the verdict. */
  notes: string[];
  /** One row per comparable position. */
  positions: PositionRow[];
  /**
   * Teacher-forced scoring of the baseline's tokens on both backends (docs/engines.md), when the
   * comparison was made live; absent for a pair compared from two saved bodies alone.
   */
  scored?: ScoredBlock;
  /** The prompt's own positions compared, where the engines return prompt-token logprobs. */
  prompt?: PromptBlock | null;
  /** Where the difference lives (`compute`, `decode_state`, `unknown`), or null when nothing moved. */
  locus?: Locus | null;
  /** The health figures (KL, relative error of the chosen token, top-10 logits difference): docs/format.md. */
  health?: Health;
  /** Why a side's numbers cannot be raw full-vocabulary logprobs (empty when nothing says so): docs/format.md. */
  definition?: DefinitionWarning[];
  /** `prompt_mismatch`: the prompt tokens each side read, and where they first differ when the engines could say. */
  promptMismatch?: PromptMismatch;
}

/**
 * The two sides of a pair read different prompt tokens for the same request (a chat template or a
 * tokenizer differs): how many each read and, where the engines tokenize on request, the first
 * position at which their prompt ids differ with each side's token there.
 */
export interface PromptMismatch {
  candidateTokens: number;
  baselineTokens: number;
  /** First differing prompt position, with each side's token id and text there (absent: not asked, or the engines cannot say). */
  at?: number;
  candidate?: { id: number | null; text: string | null };
  baseline?: { id: number | null; text: string | null };
}

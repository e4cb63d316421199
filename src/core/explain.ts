import type { Locus } from './scored.js';
import type { Flip, Thresholds, Verdict } from './types.js';

/** What {@link explain} needs: the verdict and the numbers it quotes. */
export interface ExplainInput {
  verdict: Verdict;
  comparable: number;
  shifted: number;
  maxShift: number | null;
  flip: Flip | null;
  /** Why the pair is incomparable, when it is. */
  reason?: string;
  /** Comparable positions whose shift is above the floor (local shifts quote a few). */
  shiftedAt: readonly number[];
  /** Where the shift lives, when the pair was scored with its prompt (src/core/scored.ts): the
   * global sentence then names that place only, never the cache for a compute locus. */
  locus?: Locus | null;
  /** Which positions the counts cover: the free-running ones (`compare`, the default) or the
   * teacher-forced ones (the scoring past the divergence, src/core/scored.ts). Said in the text,
   * so that a figure beside another over other positions is not read as a contradiction. */
  over?: PositionSet;
}

/** The two sets of positions a pair's figures are taken over. */
export type PositionSet = 'free-running' | 'teacher-forced';

/**
 * A number of nats as every surface prints it (compare, analyze text and HTML, the demo, the
 * alerts, /ui): three decimals, or two significant digits when tiny — the one rounding, so that
 * the same figure reads the same everywhere (the pages carry this function's source).
 */
export function formatNats(x: number | null | undefined): string {
  if (x === null || x === undefined) return 'n/a';
  if (x === 0 || Math.abs(x) >= 0.001) return x.toFixed(3);
  return x.toExponential(1);
}

const NOISE_CAVEAT =
  'A noise verdict does not prove there is no bug: a large-gap flip proves presence; small diffs do not prove absence.';

/**
 * The verdict as a sentence a reader can act on (docs/format.md): global → suspect the shared prefill input
 * (KV cache / state); local → a token-specific path; early → too few positions for one pair,
 * pool them over many (worded for online and offline alike); ambiguous flip → near-tie, cannot be
 * attributed; noise carries the caveat that it proves no absence of a bug.
 */
export function explain(e: ExplainInput, t: Thresholds): string {
  // A floor of 0 is `noiseFloor: exact` (a deterministic engine): any difference at all is a shift.
  const floor =
    t.noiseFloor === 0 ? 'a floor of 0 (noiseFloor: exact)' : `the ${formatNats(t.noiseFloor)}-nat noise floor`;
  const over = e.over ?? 'free-running';
  const moved = `${e.shifted} of ${e.comparable} ${over} positions moved more than ${floor} (${over} max shift ${formatNats(e.maxShift)})`;
  const parts: string[] = [];
  switch (e.verdict) {
    case 'incomparable':
      parts.push(`Incomparable: ${e.reason ?? 'a side has no logprobs'}.`);
      break;
    case 'prompt_mismatch':
      return 'Prompt mismatch: the two sides read different prompt tokens for the same request (a chat template or a tokenizer differs), so their logprobs are not compared.';
    case 'tokenizer_mismatch':
      parts.push(
        `Tokenizer mismatch: both sides spell the same text with different token boundaries from position ${e.flip?.index ?? '?'} ` +
          `(${quote(e.flip?.baselineToken)} vs ${quote(e.flip?.candidateToken)}); the servers tokenize or detokenize differently, so their logprobs cannot be compared token by token.`,
      );
      return parts.join(' ');
    case 'identical':
      parts.push(
        `Identical: every chosen token, logprob and top-k entry is exactly equal over ${e.comparable} positions.`,
      );
      break;
    case 'noise':
      parts.push(
        `Noise: no ${over} position moved more than ${floor} (max shift ${formatNats(e.maxShift)} over ${e.comparable} ${over} positions).`,
      );
      break;
    case 'early_shift':
      parts.push(
        `Early shift: diverged at once with a large shift (${moved}; fewer than ${t.minAligned} comparable free-running positions): too few positions to localise from this pair alone — pool them over many pairs (the alert window does so over requests, analyze over a capture).`,
      );
      break;
    case 'global_shift':
      parts.push(`Global shift: ${moved}. ${globalCause(e.locus ?? null)}`);
      break;
    case 'local_shift':
      parts.push(
        `Local shift: ${moved}, at ${positionList(e.shiftedAt)}. Specific positions: suspect a token-specific path.`,
      );
      break;
  }
  if (e.flip) parts.push(flipSentence(e.flip));
  if (e.verdict === 'noise') parts.push(NOISE_CAVEAT);
  return parts.join(' ');
}

/** The global verdict's cause: the locus's place when scoring found one, else the shared prefill input (KV cache / state) to suspect. */
function globalCause(locus: Locus | null): string {
  switch (locus) {
    case 'compute':
      return 'Every decode step moved, and the prompt with it: not decode-time noise, and not only the state carried into decode.';
    case 'decode_state':
      return 'Every decode step moved while the prompt agrees: not decode-time noise — suspect the state carried into decode (KV cache / state).';
    default:
      return 'Every decode step moved: suspect the shared prefill input (KV cache / state), not decode-time noise — next, compare the state where it is written, in the cache medium and where it is read back.';
  }
}

function flipSentence(f: Flip): string {
  const gap = f.gap === null ? 'unknown' : `${f.lowerBound ? '≥ ' : ''}${formatNats(f.gap)} nats`;
  const meaning =
    f.class === 'ambiguous'
      ? 'ambiguous: near-tie, cannot be attributed'
      : f.class === 'systematic'
        ? 'systematic: more force than float noise supplies, so the distributions themselves moved'
        : 'gray: between the thresholds, not attributable on its own';
  const cross =
    f.crossPathDiff === null
      ? ''
      : ` The baseline's token moved by ${formatNats(f.crossPathDiff)} nats on the candidate's path.`;
  return `Flip at position ${f.index}: the baseline chose ${quote(f.baselineToken)}, the candidate ${quote(f.candidateToken)}; gap ${gap} (${meaning}).${cross}`;
}

function quote(s: string | undefined): string {
  return s === undefined ? '?' : JSON.stringify(s);
}

function positionList(at: readonly number[]): string {
  if (at.length === 0) return 'the flip only';
  const shown = at.slice(0, 8).join(', ');
  return `position${at.length > 1 ? 's' : ''} ${shown}${at.length > 8 ? `, … (${at.length} in all)` : ''}`;
}

import { compare } from './compare.js';
import { maxLogits, type Health, type LogitsFigure, type PositionBlock } from './health.js';
import type { ScoredPair } from './scored.js';
import type { Comparison, ParsedResponse, Thresholds, TokenStep } from './types.js';

/**
 * Teacher-forced sequences (the same tokens on both sides by construction: a scored
 * continuation, a trainer's token-logprob file against an engine's) compared position by
 * position, and the health figures of a scored pair. Pure.
 */

/** Steps as a parsed response (for `compare`). */
export function asForced(steps: readonly TokenStep[]): ParsedResponse {
  return {
    format: 'completions',
    stream: false,
    steps: [...steps],
    text: steps.map((s) => s.token).join(''),
    flags: [],
  };
}

function relabel(l: LogitsFigure, block: PositionBlock, offset = 0): LogitsFigure {
  return l.at ? { ...l, at: { block, i: l.at.i + offset } } : l;
}

/**
 * The health of a scored pair: KL and relative error over the teacher-forced continuation (every
 * position comparable), the logits figure over the free-running positions, the continuation and
 * the prompt's own positions. A pair without scored positions keeps its free-running health.
 */
export function withScoredHealth<C extends Comparison>(c: C, pair: ScoredPair | null, t: Thresholds): C {
  if (!pair) return c;
  const n = Math.min(pair.candidate.continuation.length, pair.baseline.continuation.length);
  if (n === 0) return c;
  const cont = compare(
    asForced(pair.candidate.continuation.slice(0, n)),
    asForced(pair.baseline.continuation.slice(0, n)),
    t,
  ).health;
  if (!cont) return c;
  let logits = relabel(cont.logits, 'scored');
  if (c.health) logits = maxLogits(c.health.logits, logits);
  const m = Math.min(pair.candidate.prompt.length, pair.baseline.prompt.length);
  if (m > 0) {
    const p = compare(
      asForced(pair.candidate.prompt.slice(0, m)),
      asForced(pair.baseline.prompt.slice(0, m)),
      t,
    ).health;
    if (p) logits = maxLogits(logits, relabel(p.logits, 'prompt', pair.promptStart));
  }
  const health: Health = { over: 'scored', positions: n, kl: cont.kl, relErr: cont.relErr, logits };
  return { ...c, health };
}

import type { Backend, Comparison, ParsedResponse, Thresholds } from '../core/types.js';
import {
  notScored,
  scoredBlocks,
  withScoring,
  type PromptBlock,
  type ScoredBlock,
  type ScoredPair,
} from '../core/scored.js';
import type { Backends } from '../backend/client.js';
import { ScoringError, UnsupportedError, type ScoringTarget } from '../backend/http.js';
import type { EngineProfile, ProfileScore, PromptSource } from '../backend/engines/profile.js';

/** What scoring needs to know of one mirrored pair. */
export interface PairToScore {
  source: PromptSource;
  free: Comparison;
  baseline: { parsed: ParsedResponse; body: unknown };
  targets: Readonly<Record<Backend, ScoringTarget>>;
  thresholds: Thresholds;
  /** The mirror is behind: expensive work is skipped to keep up. */
  busy: boolean;
}

/** The outcome of scoring a pair: the blocks, the raw scored steps (for the capture), and whether it counts. */
export interface ScoringResult {
  scored: ScoredBlock;
  prompt: PromptBlock | null;
  pair: ScoredPair | null;
  /** False when nothing was attempted because nothing was needed (no divergence under `when: diverged`). */
  counted: boolean;
}

/**
 * Scores a compared pair through each backend's engine profile (docs/engines.md): both sides
 * force the baseline's generation over the same prompt, at the same width. Never throws: an
 * engine that cannot score gives an `unsupported` block, an engine that fails a `failed` one,
 * both with the reason.
 */
export async function scorePair(backends: Backends, p: PairToScore): Promise<ScoringResult> {
  const o = backends.scoring;
  const free = p.free;
  const settled =
    free.verdict === 'incomparable' ||
    free.verdict === 'prompt_mismatch' ||
    free.verdict === 'tokenizer_mismatch' ||
    free.verdict === 'identical';
  if (o.when === 'never')
    return {
      scored: notScored('skipped', 'scoring is off (analysis.scoring.when: never)'),
      prompt: null,
      pair: null,
      counted: false,
    };
  if (settled || (o.when === 'diverged' && free.firstDivergence === null)) {
    const why = settled
      ? `not needed: the pair is ${free.verdict}`
      : 'not needed: no divergence, every position is comparable (analysis.scoring.when: diverged)';
    return { scored: notScored('skipped', why), prompt: null, pair: null, counted: false };
  }
  if (p.busy)
    return {
      scored: notScored('skipped', 'the mirror is behind (its queue is half full): scoring skipped to keep up'),
      prompt: null,
      pair: null,
      counted: true,
    };
  try {
    const pair = await forceBoth(backends, p);
    return { ...scoredBlocks(pair, p.thresholds), pair, counted: true };
  } catch (err) {
    const outcome = err instanceof UnsupportedError ? 'unsupported' : 'failed';
    return { scored: notScored(outcome, reason(err)), prompt: null, pair: null, counted: true };
  }
}

/** Both sides scored on the baseline's generation; a side lowered to its cap has the other scored as narrow. */
async function forceBoth(backends: Backends, p: PairToScore): Promise<ScoredPair> {
  const cand = backends.candidate;
  const base = backends.side('baseline');
  const [cp, { profile: bp, spec }] = await Promise.all([
    cand.profile(p.targets.candidate),
    base.prepare(p.targets.baseline, p.source, p.baseline),
  ]);
  const cPrompt = await cp.promptIds(p.targets.candidate, p.source);
  if (!sameIds(cPrompt, spec.prompt)) {
    throw new ScoringError(
      `the backends tokenize the prompt differently (${cPrompt.length} and ${spec.prompt.length} tokens): tokenizers or chat templates differ`,
    );
  }
  const within = {
    ...spec,
    topK: Math.min(spec.topK, cand.scoringCap(cp.capField) ?? Infinity, base.scoringCap(bp.capField) ?? Infinity),
  };
  let [c, b] = await Promise.all([
    cand.score(p.targets.candidate, cp, within),
    base.score(p.targets.baseline, bp, within),
  ]);
  // One side was lowered to its cap here: the other is scored again as wide, so both sides
  // are compared over the same number of alternatives (as the mirrored copies are).
  if (c.topK < b.topK) b = await base.score(p.targets.baseline, bp, { ...spec, topK: c.topK });
  else if (b.topK < c.topK) c = await cand.score(p.targets.candidate, cp, { ...spec, topK: b.topK });
  return pairOf(c, b, cp, bp);
}

/** Two sides' scorings as a pair: the prompt blocks line up only from the later of the two starts. */
export function pairOf(
  c: ProfileScore,
  b: ProfileScore,
  cp: Pick<EngineProfile, 'name' | 'method' | 'mode'>,
  bp: Pick<EngineProfile, 'name' | 'method' | 'mode'>,
): ScoredPair {
  const method = withTopless(
    cp.name === bp.name ? bp.method : `${cp.method} vs ${bp.method}`,
    c.topless === true || b.topless === true,
  );
  const mode = cp.mode === 'incremental' && bp.mode === 'incremental' ? 'incremental' : 'prefill';
  const start = Math.max(c.promptStart, b.promptStart);
  const trim = (side: ProfileScore) => side.prompt.slice(start - side.promptStart);
  return {
    candidate: { prompt: trim(c), continuation: c.continuation },
    baseline: { prompt: trim(b), continuation: b.continuation },
    method,
    mode,
    promptStart: start,
  };
}

/** The method's name, saying so when a side returned no alternatives (vLLM's V2 model runner: the prompt token only). */
export function withTopless(method: string, topless: boolean): string {
  return topless ? `${method} (chosen tokens only: the engine returned no top-k, gaps and flips unknown)` : method;
}

/**
 * Scores a compared pair and folds the result into its comparison (the live mirror's and
 * replay's one path): `counted` says whether `logprobe_scoring_total` should count it.
 */
export async function scoreComparison(
  backends: Backends,
  p: PairToScore,
): Promise<{
  comparison: Comparison;
  outcome: ScoringResult['scored']['outcome'];
  counted: boolean;
  reason: string | undefined;
}> {
  const r = await scorePair(backends, p);
  return {
    comparison: withScoring(p.free, r.scored, r.prompt, p.thresholds),
    outcome: r.scored.outcome,
    counted: r.counted,
    reason: r.scored.reason,
  };
}

function sameIds(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function reason(err: unknown): string {
  const e = err as { code?: string; message?: string };
  const msg = e?.message ?? String(err);
  return e?.code && !msg.includes(e.code) ? `${e.code}: ${msg}` : msg;
}

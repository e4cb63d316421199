import type { Comparison, ParsedResponse, Thresholds } from '../core/types.js';
import {
  notScored,
  scoredBlocks,
  withScoring,
  type PromptBlock,
  type ScoredBlock,
  type ScoredPair,
} from '../core/scored.js';
import { detectEngine } from '../backend/engines/detect.js';
import type { CappedField, EngineName, EngineSetting } from '../metrics/labels.js';
import { ScoringError, UnsupportedError, type ScoringTarget } from '../backend/http.js';
import { LogprobLimits, parseCapFor } from '../backend/limits.js';
import { modelOf, type EngineProfile, type ProfileScore, type PromptSource, type ScoreSpec } from '../backend/engines/profile.js';
import { vllmProfile } from '../backend/engines/vllm.js';
import { sglangProfile } from '../backend/engines/sglang.js';
import { llamacppProfile } from '../backend/engines/llamacpp.js';
import { openaiProfile } from '../backend/engines/openai.js';

export const PROFILES: Readonly<Record<EngineName, EngineProfile>> = {
  vllm: vllmProfile,
  sglang: sglangProfile,
  llamacpp: llamacppProfile,
  openai: openaiProfile,
};

/** Which backend a scoring call is for. */
export type Backend = 'candidate' | 'baseline';

/** `analysis.scoring`: when to score and how many positions at most. */
export interface ScoringOptions {
  when: 'diverged' | 'always' | 'never';
  maxPositions: number;
  /** Alternatives per position (the mirror's `topLogprobs`). */
  topK: number;
  engines: Readonly<Record<Backend, EngineSetting>>;
}

/** The scoring options of a config: `analysis.scoring`, the mirror's top-k, each backend's `engine`. */
export function scoringOptions(config: {
  analysis: { scoring: { when: ScoringOptions['when']; maxPositions: number } };
  mirror: { topLogprobs: number };
  candidate: { engine: EngineSetting };
  baseline: { engine: EngineSetting };
}): ScoringOptions {
  return {
    ...config.analysis.scoring,
    topK: config.mirror.topLogprobs,
    engines: { candidate: config.candidate.engine, baseline: config.baseline.engine },
  };
}

/**
 * Prompt positions compared where each costs a call (llama.cpp): the last ones, nearest the
 * continuation. Engines that return prompt logprobs in one pass return all of them.
 */
export const PROMPT_POSITIONS = 16;

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
 * Scores mirrored pairs through each backend's engine profile (docs/engines.md), detecting the
 * engine once per backend when the setting is `auto`. Never throws: an engine that cannot score
 * gives an `unsupported` block, an engine that fails a `failed` one, both with the reason.
 */
export class Scorer {
  private readonly detected = new Map<Backend, Promise<EngineProfile>>();
  /**
   * One incremental scoring at a time per backend: each of its calls extends the previous one's
   * cached prefix, and another pair's calls in between would take the engine's slot (llama-server
   * `-np 1`) and turn them into cold prefills.
   */
  private readonly turns = new Map<Backend, Promise<unknown>>();
  /** The scoring calls' logprobs caps each backend stated (vLLM's `--max-logprobs` on `prompt_logprobs`). */
  private readonly caps = new LogprobLimits();

  constructor(
    private readonly options: ScoringOptions,
    private readonly hooks: {
      onProfile?: (backend: Backend, profile: EngineName, evidence: string) => void;
      /** A scoring call was refused for asking more than the backend's cap and resent within it (`learned`: the cap is new or lower). */
      onCap?: (backend: Backend, field: CappedField, cap: number, requested: number, learned: boolean) => void;
    } = {},
  ) {}

  /** The cap learned for a backend's scoring field, if any. */
  cap(backend: Backend, field: CappedField): number | undefined {
    return this.caps.get(backend, field);
  }

  /** The profile of a backend: configured, or detected once (a failed detection is retried on the next pair). */
  profile(backend: Backend, target: ScoringTarget): Promise<EngineProfile> {
    let p = this.detected.get(backend);
    if (!p) {
      const setting = this.options.engines[backend];
      p =
        setting === 'auto'
          ? detectEngine(target).then(({ engine, evidence }) => {
              this.hooks.onProfile?.(backend, engine, evidence);
              return PROFILES[engine];
            })
          : Promise.resolve(PROFILES[setting]).then((profile) => {
              this.hooks.onProfile?.(backend, setting, 'configured');
              return profile;
            });
      p.catch(() => this.detected.delete(backend));
      this.detected.set(backend, p);
    }
    return p;
  }

  /**
   * Fields to add to a mirrored copy for this backend's engine. Only once the profile is known:
   * an `auto` backend is detected when a pair first needs scoring, not before (a backend that is
   * never scored is never probed); until then copies go as they are and the continuation's ids
   * come from the answer's own ids or its re-tokenised text.
   */
  async copyParams(backend: Backend, target: ScoringTarget): Promise<Readonly<Record<string, unknown>>> {
    // `candidate.model` / `baseline.model`: the copy names the backend's own served model.
    const named = target.model ? { model: target.model } : {};
    if (this.options.when === 'never') return named;
    const setting = this.options.engines[backend];
    if (setting === 'auto' && !this.detected.has(backend)) return named;
    try {
      return { ...(await this.profile(backend, target)).copyParams, ...named };
    } catch {
      return named;
    }
  }

  async score(p: PairToScore): Promise<ScoringResult> {
    const o = this.options;
    const free = p.free;
    const settled =
      free.verdict === 'incomparable' || free.verdict === 'tokenizer_mismatch' || free.verdict === 'identical';
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
      const pair = await this.scorePair(p);
      return { ...scoredBlocks(pair, p.thresholds), pair, counted: true };
    } catch (err) {
      const outcome = err instanceof UnsupportedError ? 'unsupported' : 'failed';
      return { scored: notScored(outcome, reason(err)), prompt: null, pair: null, counted: true };
    }
  }

  /** Runs `work` after the backend's previous incremental scoring (prefill profiles run at once). */
  private inTurn<T>(backend: Backend, profile: EngineProfile, work: () => Promise<T>): Promise<T> {
    if (profile.mode !== 'incremental') return work();
    const before = this.turns.get(backend) ?? Promise.resolve();
    const run = before.then(work, work);
    const settled = run.catch(() => undefined);
    this.turns.set(backend, settled);
    void settled.then(() => {
      if (this.turns.get(backend) === settled) this.turns.delete(backend);
    });
    return run;
  }

  /**
   * What to force on a backend: the request's prompt as its engine tokenizes it and the given
   * generation's token ids (at most `maxPositions`). Throws Unsupported/ScoringError.
   */
  async prepare(
    backend: Backend,
    target: ScoringTarget,
    source: PromptSource,
    generation: { parsed: ParsedResponse; body: unknown },
  ): Promise<{ profile: EngineProfile; spec: ScoreSpec }> {
    const profile = await this.profile(backend, target);
    const prompt = await profile.promptIds(target, source);
    const continuation = (await continuationIds(profile, target, source, generation)).slice(
      0,
      this.options.maxPositions,
    );
    if (continuation.length === 0) throw new ScoringError('the answer to force has no generated tokens');
    return {
      profile,
      spec: {
        model: modelOf(source.body),
        prompt,
        continuation,
        topK: this.options.topK,
        promptPositions: PROMPT_POSITIONS,
      },
    };
  }

  /** Empties a backend's prefix cache through its profile (after that backend's scoring in progress). */
  async flush(backend: Backend, target: ScoringTarget): Promise<void> {
    const profile = await this.profile(backend, target);
    await this.inTurn(backend, { ...profile, mode: 'incremental' }, () => profile.flush(target));
  }

  /**
   * Scores a prepared sequence on one backend (in its turn, for incremental profiles), within the
   * cap it stated: asked for more alternatives than it allows (vLLM: `Requested prompt logprobs of
   * N, which is greater than max allowed: M`), the cap is learned for that backend and field, and
   * the call is made once more within it; later calls ask within it from the start. `topK`: the
   * alternatives it was scored with.
   */
  scoreSide(
    backend: Backend,
    target: ScoringTarget,
    profile: EngineProfile,
    spec: ScoreSpec,
  ): Promise<ProfileScore & { topK: number }> {
    return this.inTurn(backend, profile, async () => {
      const known = this.caps.get(backend, profile.capField);
      const k = known !== undefined ? Math.min(spec.topK, known) : spec.topK;
      try {
        return { ...(await profile.score(target, { ...spec, topK: k })), topK: k };
      } catch (err) {
        const cap =
          err instanceof ScoringError && err.answer
            ? parseCapFor(profile.capField, err.answer.status, err.answer.body)
            : null;
        if (cap === null || cap >= k) throw err;
        const learned = this.caps.learn(backend, profile.capField, cap);
        this.hooks.onCap?.(backend, profile.capField, cap, k, learned);
        return { ...(await profile.score(target, { ...spec, topK: cap })), topK: cap };
      }
    });
  }

  private async scorePair(p: PairToScore): Promise<ScoredPair> {
    const [cp, { profile: bp, spec }] = await Promise.all([
      this.profile('candidate', p.targets.candidate),
      this.prepare('baseline', p.targets.baseline, p.source, p.baseline),
    ]);
    const cPrompt = await cp.promptIds(p.targets.candidate, p.source);
    if (!sameIds(cPrompt, spec.prompt)) {
      throw new ScoringError(
        `the backends tokenize the prompt differently (${cPrompt.length} and ${spec.prompt.length} tokens): tokenizers or chat templates differ`,
      );
    }
    const within = {
      ...spec,
      topK: Math.min(
        spec.topK,
        this.caps.get('candidate', cp.capField) ?? Infinity,
        this.caps.get('baseline', bp.capField) ?? Infinity,
      ),
    };
    let [c, b] = await Promise.all([
      this.scoreSide('candidate', p.targets.candidate, cp, within),
      this.scoreSide('baseline', p.targets.baseline, bp, within),
    ]);
    // One side was lowered to its cap here: the other is scored again as wide, so both sides
    // are compared over the same number of alternatives (as the mirrored copies are).
    if (c.topK < b.topK) b = await this.scoreSide('baseline', p.targets.baseline, bp, { ...spec, topK: c.topK });
    else if (b.topK < c.topK) c = await this.scoreSide('candidate', p.targets.candidate, cp, { ...spec, topK: b.topK });
    return pairOf(c, b, cp, bp);
  }
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

/** A mirrored payload with an engine profile's extra fields merged in (none: the payload as it is). */
export function withCopyParams(payload: string, extra: Readonly<Record<string, unknown>>): string {
  return Object.keys(extra).length === 0 ? payload : JSON.stringify({ ...(JSON.parse(payload) as object), ...extra });
}

/**
 * Scores a compared pair and folds the result into its comparison (the live mirror's and
 * replay's one path): `counted` says whether `logprobe_scoring_total` should count it.
 */
export async function scoreComparison(
  scorer: Scorer,
  p: PairToScore,
): Promise<{
  comparison: Comparison;
  outcome: ScoringResult['scored']['outcome'];
  counted: boolean;
  reason: string | undefined;
}> {
  const r = await scorer.score(p);
  return {
    comparison: withScoring(p.free, r.scored, r.prompt, p.thresholds),
    outcome: r.scored.outcome,
    counted: r.counted,
    reason: r.scored.reason,
  };
}

/**
 * The baseline's generated token ids: from its steps (llama.cpp and SGLang name them, vLLM's
 * `token_id:N`), from `choices[0].token_ids` (vLLM/SGLang `return_token_ids`), else by
 * tokenizing its text, accepted only when that gives one id per generated token.
 */
async function continuationIds(
  profile: EngineProfile,
  target: ScoringTarget,
  source: PromptSource,
  generation: { parsed: ParsedResponse; body: unknown },
): Promise<number[]> {
  const steps = generation.parsed.steps;
  if (steps.length > 0 && steps.every((s) => s.id !== undefined)) return steps.map((s) => s.id!);
  const listed = (generation.body as { choices?: Array<{ token_ids?: unknown }> } | null)?.choices?.[0]?.token_ids;
  if (
    Array.isArray(listed) &&
    listed.length === steps.length &&
    listed.every((x) => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0)
  )
    return listed as number[];
  const text = steps.map((s) => s.token).join('');
  const ids = await profile.tokenize(target, text, modelOf(source.body));
  if (ids.length !== steps.length) {
    throw new UnsupportedError(
      `the answer names no token ids, and its text re-tokenises to ${ids.length} ids for ${steps.length} generated tokens`,
    );
  }
  return ids;
}

function sameIds(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function reason(err: unknown): string {
  const e = err as { code?: string; message?: string };
  const msg = e?.message ?? String(err);
  return e?.code && !msg.includes(e.code) ? `${e.code}: ${msg}` : msg;
}

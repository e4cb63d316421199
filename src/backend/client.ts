import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Backend, ParsedResponse } from '../core/types.js';
import type { CappedField, EngineName, EngineSetting } from '../metrics/labels.js';
import { callBackend, mirrorHeaders, type BackendResult, type MirrorTarget } from './dispatch.js';
import { ScoringError, UnsupportedError, type ScoringTarget } from './http.js';
import { requestKind, type RequestKind } from './rewrite.js';
import {
  LogprobLimits,
  parseCapFor,
  sendOneWithinLimits,
  sendWithinLimits,
  type LimitedPair,
  type LimitedSend,
  type LogprobsField,
} from './limits.js';
import { detectEngine } from './engines/detect.js';
import { PROFILES } from './engines/index.js';
import {
  modelOf,
  type EngineProfile,
  type ProfileScore,
  type PromptSource,
  type ScoreSpec,
} from './engines/profile.js';

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

/** How one backend is reached: its pool, URL, timeouts, served name, and what its copies carry. */
export interface BackendOptions {
  pool: Dispatcher & { close(): Promise<void> };
  /** Whether {@link BackendClient.close} closes the pool (false: the caller shares and closes it). */
  ownsPool: boolean;
  url: string;
  timeoutMs: number;
  idleTimeoutMs: number;
  /** `candidate.model` / `baseline.model`: the name every copy and scoring call carries (null: the request's). */
  model?: string | null;
  /** Sent instead of the API key to the cache flush (SGLang's `--admin-api-key`). */
  adminApiKey?: string | null;
  /** Who the copies are for: the candidate gets the client's headers, the baseline an allow-list (dispatch.ts). */
  headers: MirrorTarget;
  /** The credential values this backend is always sent (its API key), scrubbed from what it answers. */
  secrets?: readonly string[];
}

/** What the backends tell the process as they go: metrics and log lines (none by default). */
export interface BackendHooks {
  /** A backend's engine profile became known (configured, or detected from its answers). */
  onProfile?(backend: Backend, profile: EngineName, evidence: string): void;
  /** A scoring call was refused for asking more than the backend's cap and resent within it (`learned`: the cap is new or lower). */
  onScoringCap?(backend: Backend, field: CappedField, cap: number, requested: number, learned: boolean): void;
  /** A copy's logprobs cap was learned or lowered (once per new cap, however many copies raced). */
  onCopyCapLearned?(backend: Backend, field: LogprobsField, cap: number, requested: number): void;
  /** A copy was refused for asking too many logprobs and resent within the cap. */
  onCopyRefused?(backend: Backend, field: LogprobsField): void;
}

/** One mirrored copy: the path it goes to, the body, and the client request it was made from. */
export interface Copy {
  path: string;
  body: Record<string, unknown>;
  /** `JSON.stringify(body)`, when the caller already has it. */
  payload?: string;
  /** The client's request headers (the candidate's copy carries them; the baseline's an allow-list). */
  clientHeaders?: IncomingHttpHeaders;
  /** Credential values of the client's request, scrubbed from what a backend answers. */
  secrets?: readonly string[];
}

/** One backend's answer to a copy, and the body it finally got (lowered to its logprobs cap, if it stated one). */
export interface Sent {
  result: BackendResult;
  body: Record<string, unknown>;
}

/** Caps the two sides share the bookkeeping of: a pair is sent at the width both accept. */
interface Shared {
  copies: LogprobLimits;
  scoring: LogprobLimits;
  options: ScoringOptions;
  hooks: BackendHooks;
}

/**
 * One backend as logprobe talks to it: its pool, URL, headers and secrets, timeouts, the logprobs
 * caps it stated, its engine profile (configured, or detected once), its cache flush, and the
 * teacher-forced scoring of a fixed sequence. Every copy, scoring call and flush goes through it.
 */
export class BackendClient {
  private detected: Promise<EngineProfile> | null = null;
  /**
   * One incremental scoring at a time: each of its calls extends the previous one's cached
   * prefix, and another pair's calls in between would take the engine's slot (llama-server
   * `-np 1`) and turn them into cold prefills.
   */
  private turn: Promise<unknown> | null = null;

  constructor(
    readonly side: Backend,
    readonly options: BackendOptions,
    private readonly shared: Shared,
  ) {}

  /** Where scoring calls go for a copy of this client request: the URL, the copy's headers, the secrets to scrub. */
  target(clientHeaders: IncomingHttpHeaders = {}, secrets?: readonly string[]): ScoringTarget {
    const o = this.options;
    return {
      pool: o.pool,
      url: o.url,
      headers: mirrorHeaders(clientHeaders, o.headers),
      timeoutMs: o.timeoutMs,
      model: o.model ?? null,
      adminApiKey: o.adminApiKey ?? null,
      secrets: secrets ?? o.secrets ?? [],
    };
  }

  /** The engine profile: configured, or detected once (a failed detection is tried again on the next call). */
  profile(target: ScoringTarget = this.target()): Promise<EngineProfile> {
    if (this.detected) return this.detected;
    const setting = this.shared.options.engines[this.side];
    const hooks = this.shared.hooks;
    const p =
      setting === 'auto'
        ? detectEngine(target).then(({ engine, evidence }) => {
            hooks.onProfile?.(this.side, engine, evidence);
            return PROFILES[engine];
          })
        : Promise.resolve(PROFILES[setting]).then((profile) => {
            hooks.onProfile?.(this.side, setting, 'configured');
            return profile;
          });
    p.catch(() => {
      if (this.detected === p) this.detected = null;
    });
    this.detected = p;
    return p;
  }

  /**
   * Takes an engine told elsewhere (the start-up probe's detection) when none is configured and
   * none was detected yet, so that the first pair to need it does not ask the server again.
   */
  adopt(engine: EngineName, evidence: string): void {
    if (this.detected || this.shared.options.engines[this.side] !== 'auto') return;
    this.detected = Promise.resolve(PROFILES[engine]);
    this.shared.hooks.onProfile?.(this.side, engine, evidence);
  }

  /**
   * Fields to add to a copy for this backend's engine. Only once the profile is known: an `auto`
   * backend is detected when a pair first needs scoring, not before (a backend that is never
   * scored is never probed); until then copies go as they are and the continuation's ids come
   * from the answer's own ids or its re-tokenised text.
   */
  async copyParams(target: ScoringTarget, kind: RequestKind | null = null): Promise<Readonly<Record<string, unknown>>> {
    // `candidate.model` / `baseline.model`: the copy names the backend's own served model
    // (SGLang's `/generate` has no `model`: it serves one, adapters by `lora_path`).
    const named = target.model && kind !== 'generate' ? { model: target.model } : {};
    if (this.shared.options.when === 'never') return named;
    // The profiles' fields are those of the OpenAI chat and completions routes (`return_token_ids`):
    // the Responses route and `/generate` would refuse them or carry ids already.
    if (kind === 'responses' || kind === 'generate') return named;
    if (this.shared.options.engines[this.side] === 'auto' && !this.detected) return named;
    try {
      return { ...(await this.profile(target)).copyParams, ...named };
    } catch {
      return named;
    }
  }

  /** Posts one payload to a path of this backend and reads the whole answer. */
  post(path: string, target: ScoringTarget, payload: string): Promise<BackendResult> {
    return callBackend(this.options.pool, this.options, path, target.headers as Record<string, string>, payload);
  }

  /** The sender {@link sendWithinLimits} and {@link sendOneWithinLimits} drive, for one copy. */
  async sender(copy: Copy): Promise<(payload: string) => Promise<BackendResult>> {
    const target = this.target(copy.clientHeaders, copy.secrets);
    const extra = await this.copyParams(target, requestKind(copy.path));
    return (payload) => this.post(copy.path, target, withCopyParams(payload, extra));
  }

  /** Sends a copy within this backend's logprobs cap: a refusal for asking too many is learned and retried once within it. */
  async send(copy: Copy): Promise<Sent> {
    const post = await this.sender(copy);
    return sendOneWithinLimits({ ...this.limited(copy), send: (_b, payload) => post(payload) }, this.side);
  }

  /** The caps and hooks of a copy's send. */
  limited(copy: Copy): Omit<LimitedSend, 'send'> {
    const hooks = this.shared.hooks;
    return {
      body: copy.body,
      ...(copy.payload !== undefined ? { payload: copy.payload } : {}),
      limits: this.shared.copies,
      onLearned: (b, field, cap, requested) => hooks.onCopyCapLearned?.(b, field, cap, requested),
      onRefused: (b, field) => hooks.onCopyRefused?.(b, field),
    };
  }

  /** Runs `work` after this backend's previous incremental scoring (prefill profiles run at once). */
  private inTurn<T>(profile: Pick<EngineProfile, 'mode'>, work: () => Promise<T>): Promise<T> {
    if (profile.mode !== 'incremental') return work();
    const run = (this.turn ?? Promise.resolve()).then(work, work);
    const settled = run.catch(() => undefined);
    this.turn = settled;
    void settled.then(() => {
      if (this.turn === settled) this.turn = null;
    });
    return run;
  }

  /** Empties the backend's prefix cache through its profile (after its scoring in progress). */
  async flush(target: ScoringTarget = this.target()): Promise<void> {
    const profile = await this.profile(target);
    await this.inTurn({ mode: 'incremental' }, () => profile.flush(target));
  }

  /** The scoring cap learned for a field, if any. */
  scoringCap(field: CappedField): number | undefined {
    return this.shared.scoring.get(this.side, field);
  }

  /**
   * What to force on this backend: the request's prompt as its engine tokenizes it and the given
   * generation's token ids (at most `maxPositions`). Throws Unsupported/ScoringError.
   */
  async prepare(
    target: ScoringTarget,
    source: PromptSource,
    generation: { parsed: ParsedResponse; body: unknown },
  ): Promise<{ profile: EngineProfile; spec: ScoreSpec }> {
    const o = this.shared.options;
    const profile = await this.profile(target);
    const prompt = await profile.promptIds(target, source);
    const continuation = (await continuationIds(profile, target, source, generation)).slice(0, o.maxPositions);
    if (continuation.length === 0) throw new ScoringError('the answer to force has no generated tokens');
    return {
      profile,
      spec: { model: modelOf(source.body), prompt, continuation, topK: o.topK, promptPositions: PROMPT_POSITIONS },
    };
  }

  /**
   * The request's prompt as this backend tokenizes it (chat through its own template) and, where
   * its engine has a `/detokenize`, a function spelling ids as its engine does (null without one).
   */
  async promptTokens(
    target: ScoringTarget,
    source: PromptSource,
  ): Promise<{ ids: number[]; spell: ((ids: readonly number[]) => Promise<string>) | null }> {
    const profile = await this.profile(target);
    const ids = await profile.promptIds(target, source);
    const detokenize = profile.detokenize?.bind(profile);
    const model = modelOf(source.body);
    return { ids, spell: detokenize ? (t) => detokenize(target, t, model) : null };
  }

  /**
   * Scores a prepared sequence (in its turn, for incremental profiles), within the cap the backend
   * stated: asked for more alternatives than it allows (vLLM: `Requested prompt logprobs of N,
   * which is greater than max allowed: M`), the cap is learned and the call is made once more
   * within it; later calls ask within it from the start. `topK`: the alternatives it was scored with.
   */
  score(target: ScoringTarget, profile: EngineProfile, spec: ScoreSpec): Promise<ProfileScore & { topK: number }> {
    const caps = this.shared.scoring;
    return this.inTurn(profile, async () => {
      const known = caps.get(this.side, profile.capField);
      const k = known !== undefined ? Math.min(spec.topK, known) : spec.topK;
      try {
        return { ...(await profile.score(target, { ...spec, topK: k })), topK: k };
      } catch (err) {
        const cap =
          err instanceof ScoringError && err.answer
            ? parseCapFor(profile.capField, err.answer.status, err.answer.body)
            : null;
        if (cap === null || cap >= k) throw err;
        const learned = caps.learn(this.side, profile.capField, cap);
        this.shared.hooks.onScoringCap?.(this.side, profile.capField, cap, k, learned);
        return { ...(await profile.score(target, { ...spec, topK: cap })), topK: cap };
      }
    });
  }

  close(): Promise<void> {
    return this.options.ownsPool ? this.options.pool.close() : Promise.resolve();
  }
}

/**
 * Both sides of a comparison: the candidate's client and the baseline's (null in baseline-free
 * mode), with the logprobs caps they stated kept side by side, so that a pair is sent at the
 * width both accept and both are scored over the same alternatives.
 */
export class Backends {
  readonly candidate: BackendClient;
  readonly baseline: BackendClient | null;
  readonly scoring: ScoringOptions;

  constructor(
    sides: { candidate: BackendOptions; baseline: BackendOptions | null },
    scoring: ScoringOptions,
    hooks: BackendHooks = {},
  ) {
    const shared = sharedState(scoring, hooks);
    this.scoring = scoring;
    this.candidate = new BackendClient('candidate', sides.candidate, shared);
    this.baseline = sides.baseline === null ? null : new BackendClient('baseline', sides.baseline, shared);
  }

  /** One backend on its own (`record`: the trusted build recorded as the baseline side). */
  static alone(
    side: Backend,
    options: BackendOptions,
    scoring: ScoringOptions,
    hooks: BackendHooks = {},
  ): BackendClient {
    return new BackendClient(side, options, sharedState(scoring, hooks));
  }

  /** One side's client; the baseline's only where there is one. */
  side(backend: Backend): BackendClient {
    const c = backend === 'candidate' ? this.candidate : this.baseline;
    if (c === null) throw new Error('baseline-free: there is no baseline to reach');
    return c;
  }

  /**
   * Sends a copy to both backends at once within the caps learned so far (limits.ts): a backend
   * that refuses it for asking too many logprobs is retried once within its cap, and the other
   * side is sent the same width, so a pair never mixes widths. `body`: what both finally got.
   */
  async sendBoth(copy: Copy): Promise<LimitedPair> {
    const baseline = this.side('baseline');
    const [c, b] = await Promise.all([this.candidate.sender(copy), baseline.sender(copy)]);
    return sendWithinLimits({
      ...this.candidate.limited(copy),
      send: (backend, payload) => (backend === 'candidate' ? c(payload) : b(payload)),
    });
  }

  close(): Promise<unknown> {
    return Promise.all([this.candidate.close(), this.baseline?.close()]);
  }
}

/** The caps of a set of backends, none learned yet, with their scoring options and hooks. */
function sharedState(options: ScoringOptions, hooks: BackendHooks): Shared {
  return { copies: new LogprobLimits(), scoring: new LogprobLimits(), options, hooks };
}

/** A payload with an engine profile's extra fields merged in (none: the payload as it is). */
export function withCopyParams(payload: string, extra: Readonly<Record<string, unknown>>): string {
  return Object.keys(extra).length === 0 ? payload : JSON.stringify({ ...(JSON.parse(payload) as object), ...extra });
}

/**
 * The generation's token ids: from its steps (llama.cpp and SGLang name them, vLLM's
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

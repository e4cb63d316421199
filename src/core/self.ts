import {
  observe,
  tick,
  type AlertConfig,
  type AlertTransition,
  type DetectorObservation,
  type DetectorState,
} from './detector.js';
import type { Comparison } from './types.js';
import type { Backend } from './types.js';

/**
 * Self-consistency (docs/format.md, `repeats`): the same request sent twice in succession to one
 * backend, the second normally served from its prefix cache (cold → warm), compared with the same
 * core as a candidate/baseline pair. A backend whose repeats disagree above the noise floor is
 * `self_inconsistent` for that request: its cache path (the state written, evicted, restored)
 * does not give back what the computation gave.
 */
export const SELF_VERDICTS = ['incomparable', 'identical', 'noise', 'self_inconsistent'] as const;
export type SelfVerdict = (typeof SELF_VERDICTS)[number];

/** The self verdict of a repeat pair's comparison (second run as the candidate, first as the baseline). */
export function selfVerdict(c: Comparison): SelfVerdict {
  if (c.verdict === 'incomparable') return 'incomparable';
  if (c.verdict === 'identical') return 'identical';
  if (c.verdict === 'noise') return 'noise';
  // A shift anywhere (free-running or scored), a systematic flip, or a tokenizer change between
  // two runs of one server: the cache path gave something else.
  return 'self_inconsistent';
}

/**
 * What a backend's self detector counts for a repeat pair: the free-running comparison of its two
 * runs (cold, then warm: exactly what the probe asks) or, when scored, the teacher-forced one —
 * whichever moved more. The scoring reads the warm cache a third way (position by position, or one
 * prefill), so it can miss what the warm run showed, or show what free-running could not reach.
 */
export function selfEvidence(c: Comparison): { shifted: number; comparable: number; maxShift: number | null } {
  const free = { shifted: c.shifted, comparable: c.comparable, maxShift: c.maxShift };
  const s = c.scored;
  // A scoring that did not read the cache (vLLM's prompt logprobs, SGLang's logprob_start_len 0)
  // is a fresh prefill: no evidence of the warm path, never in place of the warm run's own.
  if (!s || s.outcome !== 'ok' || !s.comparable || s.readsCache === false) return free;
  const share = (x: { shifted: number; comparable: number }) => (x.comparable > 0 ? x.shifted / x.comparable : 0);
  const scored = {
    shifted: s.shifted ?? 0,
    comparable: s.comparable,
    maxShift: Math.max(s.maxShift ?? -1, c.maxShift ?? -1),
  };
  return share(scored) > share(free) ? scored : free;
}

/** The self alert: the window detector over a backend's repeat pairs. */
export type SelfAlertTransition = AlertTransition & {
  alert: 'LogprobSelfInconsistency' | 'LogprobPathInconsistency';
  backend: Backend;
};

/** A backend's own alert: `LogprobSelfInconsistency` over its repeat pairs, `LogprobPathInconsistency` over its path pairs. */
export type BackendAlert = SelfAlertTransition['alert'];

/**
 * Observes one repeat pair (or path pair) of `backend` on its own detector state: the window of
 * the global alert (the pooled share of shifted positions over the last `alert.window` pairs,
 * held for `forSeconds`), reported as `alert` (default `LogprobSelfInconsistency`) for that
 * backend. The CUSUM part of the state is kept but never reported: a sustained shift is the window's.
 */
export function observeSelf(
  state: DetectorState,
  obs: DetectorObservation,
  cfg: AlertConfig,
  now: number,
  backend: Backend,
  alert: BackendAlert = 'LogprobSelfInconsistency',
): { state: DetectorState; transitions: SelfAlertTransition[] } {
  return relabel(observe(state, obs, cfg, now), backend, alert);
}

/** Time alone can fire or resolve the self alert, as it does the others. */
export function tickSelf(
  state: DetectorState,
  cfg: AlertConfig,
  now: number,
  backend: Backend,
  alert: BackendAlert = 'LogprobSelfInconsistency',
): { state: DetectorState; transitions: SelfAlertTransition[] } {
  return relabel(tick(state, cfg, now), backend, alert);
}

function relabel(
  r: { state: DetectorState; transitions: AlertTransition[] },
  backend: Backend,
  alert: BackendAlert,
): { state: DetectorState; transitions: SelfAlertTransition[] } {
  return {
    state: r.state,
    transitions: r.transitions.filter((t) => t.alert === 'LogprobGlobalShift').map((t) => ({ ...t, alert, backend })),
  };
}

function count(v: unknown): number | null {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : null;
}

/**
 * The prompt tokens an engine served from its prefix cache, from its response: OpenAI's
 * `usage.prompt_tokens_details.cached_tokens` (vLLM with `--enable-prompt-tokens-details`, SGLang
 * with `--enable-cache-report`), SGLang's `meta_info.cached_tokens`, or llama-server's `timings`
 * (`usage.prompt_tokens` − `timings.prompt_n`, the tokens it evaluated). Null when none is there.
 */
export function cachedPromptTokens(body: unknown): number | null {
  if (typeof body !== 'object' || body === null) return null;
  const b = body as {
    usage?: {
      prompt_tokens?: unknown;
      prompt_tokens_details?: { cached_tokens?: unknown } | null;
      input_tokens_details?: { cached_tokens?: unknown } | null;
    };
    meta_info?: { cached_tokens?: unknown };
    timings?: { prompt_n?: unknown };
  };
  const details = count(b.usage?.prompt_tokens_details?.cached_tokens);
  if (details !== null) return details;
  // The Responses API's usage names the prompt `input`.
  const input = count(b.usage?.input_tokens_details?.cached_tokens);
  if (input !== null) return input;
  const meta = count(b.meta_info?.cached_tokens);
  if (meta !== null) return meta;
  const total = count(b.usage?.prompt_tokens);
  const evaluated = count(b.timings?.prompt_n);
  return total !== null && evaluated !== null ? Math.max(0, total - evaluated) : null;
}

/** How one side of a repeat's comparison was obtained (`generation`, or the scoring method) and whether that read the engine's prefix cache (null: not known). */
export interface RepeatSide {
  by: string;
  readCache: boolean | null;
}

/**
 * The sides of a repeat's comparison: the first run and the second, as generated, and the
 * teacher-forced scoring when one was made or considered — `counted` false when it did not read
 * the cache and so stands for nothing (vLLM's and SGLang's prompt logprobs).
 */
export interface RepeatSides {
  first: RepeatSide;
  second: RepeatSide;
  scored?: RepeatSide & { counted: boolean };
}

/** What an engine said of a repeat's two runs: the prompt tokens each took from its cache (null: not reported). */
export interface RepeatCache {
  first: number | null;
  second: number | null;
}

/**
 * What a repeat pair probed, as far as the engine tells: `cold_warm` (the probe: the second run
 * took more of its prompt from the cache than the first — all of a prompt the first computed, or
 * the rest of one whose shared chat-template prefix the first already reused — or, with no counts,
 * a first run made cold by a confirmed flush), `not_cold` (the first run reused as much as the
 * second: both equally warm, nothing between them differs in the cache path), `not_warm` (the
 * second run found its prefix evicted: cold↔cold), `unprobed` (no counts and no confirmed flush:
 * nothing says either run touched the cache, or that the first did not). Only `cold_warm` is
 * evidence about the cache path; the others are counted and shown, never fed to the self alert.
 */
export const PROBE_SHAPES = ['cold_warm', 'not_cold', 'not_warm', 'unprobed'] as const;
export type ProbeShape = (typeof PROBE_SHAPES)[number];

/**
 * The shape of a repeat pair from its cache counts (as {@link CacheCounts.read} gives them) and
 * whether a flush before the first run is confirmed (an engine whose flush answer proves the cache
 * was emptied: SGLang's 200, llama-server's erase; vLLM's 200 does not, its server does not check).
 */
export function probeShape(c: RepeatCache, confirmedFlush = false): ProbeShape {
  if (c.first === null && c.second === null) return confirmedFlush ? 'cold_warm' : 'unprobed';
  if (c.second === 0) return 'not_warm';
  if (c.first !== null && c.first > 0 && (c.second === null || c.first >= c.second)) return 'not_cold';
  return 'cold_warm';
}

/**
 * Whether each backend reports its cache hits, learned from its answers: SGLang
 * (`--enable-cache-report`) and older vLLM (`--enable-prompt-tokens-details`) send a count only
 * above 0, so once a backend has sent one, a missing count means 0 (a cold run). Until then a
 * missing count is unknown.
 */
export class CacheCounts {
  private readonly reports = new Set<string>();

  /** True once `backend` has reported a count. */
  reported(backend: string): boolean {
    return this.reports.has(backend);
  }

  /** One answer's count as it is known (learned from, then a missing count read as 0 where the backend reports). */
  one(backend: string, body: unknown): number | null {
    return this.read(backend, { first: cachedPromptTokens(body), second: null }).first;
  }

  /** A repeat's counts as they are known: learned from, then a missing count read as 0 where the backend reports. */
  read(backend: string, raw: RepeatCache): RepeatCache {
    if (raw.first !== null || raw.second !== null) this.reports.add(backend);
    if (!this.reports.has(backend)) return raw;
    return { first: raw.first ?? 0, second: raw.second ?? 0 };
  }
}

/** Both runs computed the prompt afresh: a pair of cold runs, trusted noise for the floor. */
export function bothCold(c: RepeatCache, flushed: boolean): boolean {
  return c.second === 0 && (c.first === 0 || (c.first === null && flushed));
}

/** The repeat's cache figures, from the two runs' bodies. */
export function repeatCache(first: unknown, second: unknown): RepeatCache {
  return { first: cachedPromptTokens(first), second: cachedPromptTokens(second) };
}

/**
 * The sustained-shift detectors of the README's "Alerts": pure functions, state in, state out,
 * so the proxy, `replay` and the tests share them. Time is passed in (seconds), never read.
 */
import type { Backend } from './types.js';

/** One comparable mirrored request, as the detectors see it. */
export interface DetectorObservation {
  /** Shifted comparable positions of the request. */
  shifted: number;
  /** Comparable positions of the request (> 0). */
  comparable: number;
  /** The request's largest position shift, nats (null when no position had a known shift). */
  maxShift: number | null;
  /** The noise floor in force for this request, nats. */
  noiseFloor: number;
  /** An id to cite as evidence. */
  requestId: string;
}

/** Whether an alert is quiet, waiting out `forSeconds`, firing, or waiting to resolve. */
export type AlertPhase = 'inactive' | 'pending' | 'firing' | 'resolving';

/** An alert's state machine with hysteresis on both edges. */
export interface AlertState {
  phase: AlertPhase;
  /** When the current pending/resolving phase started (seconds), or when firing started. */
  since: number;
  /** When the alert last started firing (seconds), for `startsAt`. */
  firedAt: number | null;
}

/** The in-process alerts. */
export type AlertName =
  | 'LogprobGlobalShift'
  | 'LogprobSustainedShift'
  | 'LogprobSelfInconsistency'
  | 'LogprobPathInconsistency'
  | 'LogprobPromptMismatch'
  | 'LogprobCanaryShift';

/** A change of an alert's firing state, with the evidence at that moment. */
export interface AlertTransition {
  alert: AlertName;
  /** The backend whose repeats (LogprobSelfInconsistency) or whose two paths (LogprobPathInconsistency) disagree. */
  backend?: Backend;
  /** The model slice the alert is about (src/core/slice.ts); absent where the caller keeps one detector for everything. */
  model?: string;
  to: 'firing' | 'resolved';
  at: number;
  startsAt: number;
  /** The evidence in words where the window's figures do not say it (a canary round's judgement). */
  detail?: string;
  evidence: {
    pooledShare: number;
    requestsInWindow: number;
    medianShift: number | null;
    cusum: number;
    /** Requests since the CUSUM last stood at 0: the run of evidence behind `cusum`. */
    cusumRequests: number;
    /** Median x = maxShift / noiseFloor over that run's requests still in the window (before clipping). */
    medianX: number | null;
    exampleRequestId: string | null;
  };
}

/** The thresholds of the documented `alert` section. */
export interface AlertConfig {
  window: number;
  minRequests: number;
  fireFraction: number;
  forSeconds: number;
  cusum: { k: number; h: number };
}

/** Everything the detectors remember between requests. */
export interface DetectorState {
  /** The last `window` comparable requests, oldest first. */
  recent: Array<{ shifted: number; comparable: number; maxShift: number | null; requestId: string; x: number }>;
  /** Sum of `shifted` over `recent`. */
  shiftedSum: number;
  /** Sum of `comparable` over `recent`. */
  comparableSum: number;
  /** The CUSUM statistic S. */
  cusum: number;
  /** Requests since S last stood at 0. */
  cusumRun: number;
  global: AlertState;
  sustained: AlertState;
}

/** A fresh detector state. */
export function initialDetectorState(): DetectorState {
  return {
    recent: [],
    shiftedSum: 0,
    comparableSum: 0,
    cusum: 0,
    cusumRun: 0,
    global: { phase: 'inactive', since: 0, firedAt: null },
    sustained: { phase: 'inactive', since: 0, firedAt: null },
  };
}

/** Pooled shifted share over the window: shifted positions / comparable positions, summed. */
export function pooledShare(state: DetectorState): number {
  return state.comparableSum > 0 ? state.shiftedSum / state.comparableSum : 0;
}

/**
 * Advances one alert's state machine. `condition` is the alert's raw condition now; it must hold
 * for `forSeconds` to fire and stay false for `forSeconds` to resolve (hysteresis both ways).
 */
export function stepAlert(
  state: AlertState,
  condition: boolean,
  now: number,
  forSeconds: number,
): { state: AlertState; change: 'firing' | 'resolved' | null } {
  switch (state.phase) {
    case 'inactive':
      if (!condition) return { state, change: null };
      if (forSeconds <= 0) return { state: { phase: 'firing', since: now, firedAt: now }, change: 'firing' };
      return { state: { phase: 'pending', since: now, firedAt: null }, change: null };
    case 'pending':
      if (!condition) return { state: { phase: 'inactive', since: now, firedAt: null }, change: null };
      if (now - state.since >= forSeconds)
        return { state: { phase: 'firing', since: now, firedAt: now }, change: 'firing' };
      return { state, change: null };
    case 'firing':
      if (condition) return { state, change: null };
      if (forSeconds <= 0) return { state: { phase: 'inactive', since: now, firedAt: null }, change: 'resolved' };
      return { state: { phase: 'resolving', since: now, firedAt: state.firedAt }, change: null };
    case 'resolving':
      if (condition)
        return { state: { phase: 'firing', since: state.firedAt ?? now, firedAt: state.firedAt }, change: null };
      if (now - state.since >= forSeconds)
        return { state: { phase: 'inactive', since: now, firedAt: null }, change: 'resolved' };
      return { state, change: null };
  }
}

function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

function evidence(state: DetectorState): AlertTransition['evidence'] {
  const shifts = state.recent.map((r) => r.maxShift).filter((v): v is number => v !== null);
  // The example is the most recent request that moved the most.
  let example: string | null = null;
  let best = -1;
  for (const r of state.recent) {
    if (r.x >= best) {
      best = r.x;
      example = r.requestId;
    }
  }
  const run = state.recent.slice(Math.max(0, state.recent.length - state.cusumRun));
  return {
    pooledShare: pooledShare(state),
    requestsInWindow: state.recent.length,
    medianShift: median(shifts),
    cusum: state.cusum,
    cusumRequests: state.cusumRun,
    medianX: median(run.map((r) => r.x)),
    exampleRequestId: example,
  };
}

function conditions(state: DetectorState, cfg: AlertConfig): { global: boolean; sustained: boolean } {
  return {
    global: state.recent.length >= cfg.minRequests && pooledShare(state) >= cfg.fireFraction,
    sustained: state.cusum > cfg.cusum.h,
  };
}

function transitions(
  prev: DetectorState,
  next: DetectorState,
  cfg: AlertConfig,
  now: number,
): { state: DetectorState; transitions: AlertTransition[] } {
  const cond = conditions(next, cfg);
  const out: AlertTransition[] = [];
  const g = stepAlert(prev.global, cond.global, now, cfg.forSeconds);
  // CUSUM is already a sequential test: it fires as soon as S > h; it resolves once S has
  // stayed at or below h for forSeconds, and S restarts from 0 then.
  const s = stepAlert(prev.sustained, cond.sustained, now, cond.sustained ? 0 : cfg.forSeconds);
  let state: DetectorState = { ...next, global: g.state, sustained: s.state };
  if (s.change === 'resolved') state = { ...state, cusum: 0, cusumRun: 0 };
  const ev = evidence(next);
  if (g.change)
    out.push({
      alert: 'LogprobGlobalShift',
      to: g.change,
      at: now,
      startsAt: prev.global.firedAt ?? g.state.firedAt ?? now,
      evidence: ev,
    });
  if (s.change)
    out.push({
      alert: 'LogprobSustainedShift',
      to: s.change,
      at: now,
      startsAt: prev.sustained.firedAt ?? s.state.firedAt ?? now,
      evidence: ev,
    });
  return { state, transitions: out };
}

/**
 * The most one request may add to the CUSUM before the slack: `x` is clipped at
 * `k + h / minRequests`, so a request adds at most `h / minRequests` to S and S passes `h` only
 * after more than `alert.minRequests` requests of evidence — the same minimum the window alert
 * waits for. Why a clip and not a count of requests before the CUSUM may fire: a count delays
 * only the first firing; once it is reached (a proxy that has run for a while), one huge request
 * would again take S past h on its own. The clip bounds every request at every moment, so the
 * sustained alert means what it says: a shift over many requests. A shift up to the clip counts
 * in full (with the defaults 0.75 × the floor, the small shifts this alert is for); a large one
 * counts as that much — a large shift on many positions is the window alert's (pooled share),
 * and a single request proves nothing sustained.
 */
export function cusumIncrement(x: number, cfg: Pick<AlertConfig, 'minRequests' | 'cusum'>): number {
  return Math.min(x, cfg.cusum.k + cfg.cusum.h / Math.max(1, cfg.minRequests)) - cfg.cusum.k;
}

/**
 * Adds one comparable request to the window and the CUSUM, then advances both alerts.
 * The CUSUM statistic is `S = max(0, S + min(x, k + h/minRequests) − k)` with
 * `x = maxShift/noiseFloor` ({@link cusumIncrement}), capped at `2h` so that after a fix it falls
 * back below `h` within about `2h/k` clean requests instead of paying back an unbounded excursion.
 */
export function observe(
  state: DetectorState,
  obs: DetectorObservation,
  cfg: AlertConfig,
  now: number,
): { state: DetectorState; transitions: AlertTransition[] } {
  // A floor of 0 (`noiseFloor: exact`, a deterministic engine): any shift counts as a whole step (k + h, clipped below).
  const x =
    obs.maxShift === null
      ? 0
      : obs.noiseFloor > 0
        ? obs.maxShift / obs.noiseFloor
        : obs.maxShift > 0
          ? cfg.cusum.k + cfg.cusum.h
          : 0;
  const recent = [
    ...state.recent,
    { shifted: obs.shifted, comparable: obs.comparable, maxShift: obs.maxShift, requestId: obs.requestId, x },
  ];
  let shiftedSum = state.shiftedSum + obs.shifted;
  let comparableSum = state.comparableSum + obs.comparable;
  while (recent.length > cfg.window) {
    const old = recent.shift()!;
    shiftedSum -= old.shifted;
    comparableSum -= old.comparable;
  }
  const cusum = Math.min(2 * cfg.cusum.h, Math.max(0, state.cusum + cusumIncrement(x, cfg)));
  const cusumRun = cusum > 0 ? state.cusumRun + 1 : 0;
  return transitions(state, { ...state, recent, shiftedSum, comparableSum, cusum, cusumRun }, cfg, now);
}

/** Advances the alerts with no new request (time passing alone can fire or resolve them). */
export function tick(
  state: DetectorState,
  cfg: AlertConfig,
  now: number,
): { state: DetectorState; transitions: AlertTransition[] } {
  return transitions(state, state, cfg, now);
}

/**
 * The prompt-mismatch detector: the same window as the pair detector's, over compared pairs, each
 * counting one position that "moved" when its two sides read different prompts
 * (`prompt_mismatch`); it fires `LogprobPromptMismatch` when at least `fireFraction` of the last
 * `window` pairs (and `minRequests` of them) did, held for `forSeconds`. It has no CUSUM: a template
 * or tokenizer mismatch is all or nothing per pair, never a small shift to accumulate.
 */
export function observePrompt(
  state: DetectorState,
  mismatched: boolean,
  requestId: string,
  cfg: AlertConfig,
  now: number,
): { state: DetectorState; transitions: AlertTransition[] } {
  const obs = { shifted: mismatched ? 1 : 0, comparable: 1, maxShift: null, noiseFloor: 1, requestId };
  return promptAlert(observe(state, obs, cfg, now));
}

/** Time alone can fire or resolve the prompt-mismatch alert, as it does the others. */
export function tickPrompt(
  state: DetectorState,
  cfg: AlertConfig,
  now: number,
): { state: DetectorState; transitions: AlertTransition[] } {
  return promptAlert(tick(state, cfg, now));
}

function promptAlert(r: { state: DetectorState; transitions: AlertTransition[] }): {
  state: DetectorState;
  transitions: AlertTransition[];
} {
  return {
    state: r.state,
    transitions: r.transitions
      .filter((t) => t.alert === 'LogprobGlobalShift')
      .map((t) => ({ ...t, alert: 'LogprobPromptMismatch' as const })),
  };
}

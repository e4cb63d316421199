import {
  initialDetectorState,
  observe,
  pooledShare,
  tick,
  type AlertConfig,
  type AlertName,
  type AlertTransition,
  type DetectorState,
} from '../core/detector.js';
import { observeSelf, selfEvidence, tickSelf, type BackendAlert } from '../core/self.js';
import { PermutationWindow, type PermutationConfig } from '../core/permutation.js';
import { detectorEvidence, VERDICTS, type Comparison, type Verdict } from '../core/index.js';
import { CACHE_SPLITS, NO_MODEL, OTHER_MODEL, type CacheSplit } from '../core/slice.js';
import type { Backend } from '../core/types.js';

/** Verdicts that are a shift: what the cache split counts as shifted. */
export const SHIFT_VERDICTS: readonly Verdict[] = ['global_shift', 'early_shift', 'local_shift'];
/** Verdicts that say nothing about the logprobs (no usable logprobs; different prompts): not counted as compared in the cache split. */
const UNJUDGED: readonly Verdict[] = ['incomparable', 'prompt_mismatch'];

/**
 * The cache-path rule (docs/detection.md "Slices"): a model's shifts concentrate on cache hits
 * when at least {@link CACHE_RULE}.minPairs hits and as many misses were compared, the hits'
 * shifted share is at least `minShare`, and at least `ratio` times the misses' (which may be 0).
 */
export const CACHE_RULE = { minPairs: 5, minShare: 0.5, ratio: 3 } as const;

/** Distinct models the offline summary keeps apart; later names are counted as `other` (memory stays bounded). */
export const MAX_MODELS = 64;

/** Where a pair is in the input: its number, id and `file:line`. */
export interface PairPlace {
  n: number;
  id: string;
  where: string;
}

/** The detectors' clock for one pair (see Summary.clock). */
export interface DetectorClock {
  cfg: AlertConfig;
  now: number;
}

/** An alert the in-process detectors would have raised over the pairs, in input order. */
export interface OfflineAlert {
  alert: AlertName;
  /** The model slice whose detector fired (as online: each model has its own). */
  model: string;
  /** LogprobSelfInconsistency, LogprobPathInconsistency: the backend whose repeats, or whose two paths, disagree. */
  backend?: Backend;
  /** 1-based pair number at which it fired. */
  atPair: number;
  /** That pair's id (the request id online) and where it is (`file:line`). */
  id: string;
  where: string;
  pooledShare: number;
  cusum: number;
}

/** A detector's figures after the last pair: its window's pooled share and size, and its CUSUM. */
export interface DetectorFigures {
  share: number;
  requests: number;
  cusum: number;
}

/** One cache split of one model: pairs compared (a verdict other than incomparable or prompt_mismatch), shifted, and every verdict. */
export interface CacheCell {
  compared: number;
  shifted: number;
  verdicts: Record<Verdict, number>;
}

/** One model slice in the report: its verdicts, its cache split, its detectors after the last pair. */
export interface ModelFigures {
  model: string;
  /** Pairs with a verdict. */
  compared: number;
  verdicts: Record<Verdict, number>;
  cache: Record<CacheSplit, CacheCell>;
  /** The shifts concentrate on cache hits ({@link CACHE_RULE}). */
  cacheSuspect: boolean;
  /** The pair detectors (window, CUSUM) and the permutation test's p-value over its window (null: no alert config, not run). */
  detector: (DetectorFigures & { pValue: number; permutationPairs: number }) | null;
  /** Each backend's self and path detectors that were fed. */
  self: Partial<Record<Backend, DetectorFigures>>;
  path: Partial<Record<Backend, DetectorFigures>>;
}

interface ModelState {
  verdicts: Record<Verdict, number>;
  cache: Record<CacheSplit, CacheCell>;
  pairs: DetectorState;
  permutation: PermutationWindow | null;
  self: Partial<Record<Backend, DetectorState>>;
  path: Partial<Record<Backend, DetectorState>>;
}

const verdictCounts = (): Record<Verdict, number> =>
  Object.fromEntries(VERDICTS.map((v) => [v, 0])) as Record<Verdict, number>;

const figures = (s: DetectorState): DetectorFigures => ({
  share: pooledShare(s),
  requests: s.recent.length,
  cusum: s.cusum,
});

/** The model of a pair: its captured slice's, else (records before v3) the request's `model`, `none` without one. */
export function entryModel(slice: { model: string } | undefined, request: unknown): string {
  if (slice && typeof slice.model === 'string') return slice.model;
  const m = typeof request === 'object' && request !== null ? (request as { model?: unknown }).model : undefined;
  return typeof m === 'string' && m !== '' ? m : NO_MODEL;
}

/**
 * The offline replay of the mirror's per-slice detectors (src/mirror/detectors.ts): each model its
 * own window and CUSUM over compared pairs, its permutation test, and each backend's self detector
 * (cold→warm repeats) and path detector (decode vs prefill), with the same evidence functions and
 * the same floors as online; and each model's verdicts by cache split. Bounded: at most
 * {@link MAX_MODELS} models, the rest `other`.
 */
export class OfflineSlices {
  private readonly models = new Map<string, ModelState>();
  readonly alerts: OfflineAlert[] = [];

  constructor(
    private readonly o: {
      alert?: AlertConfig | undefined;
      permutation?: Omit<PermutationConfig, 'window'> | undefined;
    },
  ) {}

  /** The slice name a pair counts in (bounded). */
  name(model: string): string {
    if (this.models.has(model) || this.models.size < MAX_MODELS) return model;
    return OTHER_MODEL;
  }

  private state(model: string): ModelState {
    let s = this.models.get(model);
    if (s) return s;
    const cache = Object.fromEntries(
      CACHE_SPLITS.map((c) => [c, { compared: 0, shifted: 0, verdicts: verdictCounts() }]),
    ) as Record<CacheSplit, CacheCell>;
    const p = this.o.permutation;
    s = {
      verdicts: verdictCounts(),
      cache,
      pairs: initialDetectorState(),
      permutation: p && this.o.alert ? new PermutationWindow({ ...p, window: this.o.alert.window }) : null,
      self: {},
      path: {},
    };
    this.models.set(model, s);
    return s;
  }

  /** A pair's verdict, counted in its model and cache split. */
  verdict(model: string, cache: CacheSplit, v: Verdict): void {
    const s = this.state(model);
    s.verdicts[v]++;
    const cell = s.cache[cache];
    cell.verdicts[v]++;
    if (UNJUDGED.includes(v)) return;
    cell.compared++;
    if (SHIFT_VERDICTS.includes(v)) cell.shifted++;
  }

  /**
   * Time alone, as the mirror's ticker (once a second) moves it: every slice's detectors ticked at
   * `now`; an alert that fires here fired after `previous`, the pair before the current one.
   */
  tick(cfg: AlertConfig, now: number, previous: PairPlace): void {
    for (const [model, s] of this.models) {
      const t = tick(s.pairs, cfg, now);
      s.pairs = t.state;
      this.fired(model, t.transitions, t.state, previous);
      for (const which of ['self', 'path'] as const)
        for (const [b, d] of Object.entries(s[which]) as Array<[Backend, DetectorState]>) {
          const r = tickSelf(d, cfg, now, b, alertOf(which));
          s[which][b] = r.state;
          this.fired(model, r.transitions, r.state, previous);
        }
    }
  }

  /** A compared pair's evidence to its model's window and CUSUM and permutation test (the caller skips what online skips). */
  pair(model: string, c: Comparison, noiseFloor: number, clock: DetectorClock, here: PairPlace): void {
    const s = this.state(model);
    const r = observe(s.pairs, { ...detectorEvidence(c), noiseFloor, requestId: here.id }, clock.cfg, clock.now);
    s.pairs = r.state;
    s.permutation?.add(c);
    this.fired(model, r.transitions, r.state, here);
  }

  /** A cold→warm repeat pair's evidence to its backend's self detector in its model. */
  repeat(
    model: string,
    backend: Backend,
    c: Comparison,
    noiseFloor: number,
    clock: DetectorClock,
    here: PairPlace,
  ): void {
    this.backendObserve(model, 'self', backend, { ...selfEvidence(c), noiseFloor, requestId: here.id }, clock, here);
  }

  /** A path pair's evidence (decode vs prefill) to its backend's path detector in its model. */
  path(
    model: string,
    backend: Backend,
    c: { shifted: number; comparable: number; maxShift: number | null; noiseFloor: number },
    clock: DetectorClock,
    here: PairPlace,
  ): void {
    const evidence = { shifted: c.shifted, comparable: c.comparable, maxShift: c.maxShift, noiseFloor: c.noiseFloor };
    this.backendObserve(model, 'path', backend, { ...evidence, requestId: here.id }, clock, here);
  }

  private backendObserve(
    model: string,
    which: 'self' | 'path',
    backend: Backend,
    obs: Parameters<typeof observeSelf>[1],
    clock: DetectorClock,
    here: PairPlace,
  ): void {
    const s = this.state(model);
    const r = observeSelf(
      s[which][backend] ?? initialDetectorState(),
      obs,
      clock.cfg,
      clock.now,
      backend,
      alertOf(which),
    );
    s[which][backend] = r.state;
    this.fired(model, r.transitions, r.state, here);
  }

  /** Records each alert's first firing per model (and backend) among `transitions`, at `pair`. */
  private fired(model: string, transitions: readonly AlertTransition[], state: DetectorState, pair: PairPlace): void {
    for (const t of transitions) {
      if (t.to !== 'firing') continue;
      if (this.alerts.some((a) => a.alert === t.alert && a.model === model && a.backend === t.backend)) continue;
      this.alerts.push({
        alert: t.alert,
        model,
        ...(t.backend ? { backend: t.backend } : {}),
        atPair: pair.n,
        id: pair.id,
        where: pair.where,
        pooledShare: pooledShare(state),
        cusum: state.cusum,
      });
    }
  }

  /** A backend's self detector figures of the worst model (the largest pooled share), as online's one-line views show; null when none was fed. */
  worstSelf(backend: Backend): DetectorFigures | null {
    let best: DetectorState | null = null;
    for (const s of this.models.values()) {
      const d = s.self[backend];
      if (d && (best === null || pooledShare(d) > pooledShare(best))) best = d;
    }
    return best === null ? null : figures(best);
  }

  /** Every model seen, in the order first seen. */
  data(): ModelFigures[] {
    return [...this.models].map(([model, s]) => ({
      model,
      compared: VERDICTS.reduce((n, v) => n + s.verdicts[v], 0),
      verdicts: { ...s.verdicts },
      cache: Object.fromEntries(
        CACHE_SPLITS.map((c) => [c, { ...s.cache[c], verdicts: { ...s.cache[c].verdicts } }]),
      ) as Record<CacheSplit, CacheCell>,
      cacheSuspect: cacheSuspect(s.cache.hit, s.cache.miss),
      detector: this.o.alert
        ? {
            ...figures(s.pairs),
            pValue: s.permutation?.pValue() ?? 1,
            permutationPairs: s.permutation?.pairs ?? 0,
          }
        : null,
      self: mapFigures(s.self),
      path: mapFigures(s.path),
    }));
  }
}

function alertOf(which: 'self' | 'path'): BackendAlert {
  return which === 'self' ? 'LogprobSelfInconsistency' : 'LogprobPathInconsistency';
}

function mapFigures(m: Partial<Record<Backend, DetectorState>>): Partial<Record<Backend, DetectorFigures>> {
  return Object.fromEntries(Object.entries(m).map(([b, d]) => [b, figures(d)]));
}

/** {@link CACHE_RULE}: the hits' shifted share is at least half and at least three times the misses'. */
export function cacheSuspect(
  hit: Pick<CacheCell, 'compared' | 'shifted'>,
  miss: Pick<CacheCell, 'compared' | 'shifted'>,
): boolean {
  if (hit.compared < CACHE_RULE.minPairs || miss.compared < CACHE_RULE.minPairs) return false;
  const h = hit.shifted / hit.compared;
  const m = miss.shifted / miss.compared;
  return h >= CACHE_RULE.minShare && h >= CACHE_RULE.ratio * m;
}

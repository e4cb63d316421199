import type { Config } from '../config/schema.js';
import { VERDICTS, type Verdict } from '../core/index.js';
import {
  pooledShare,
  type AlertName,
  type AlertPhase,
  type AlertTransition,
  type DetectorState,
} from '../core/detector.js';
import type { PathOutcome, PathPair, PathVerdict } from '../core/path.js';
import { OTHER_MODEL, NO_MODEL } from '../core/slice.js';
import type { Backend } from '../core/types.js';
import type { SliceDetectors } from '../mirror/detectors.js';
import type { MirroredPair } from '../pair/types.js';
import type { LiveAlert } from './feed.js';

/**
 * The live page's row per model slice (src/core/slice.ts; src/mirror/detectors.ts keeps one set
 * of detectors per slice): the pairs it has seen and their verdicts, its window's pooled share,
 * CUSUM and permutation p-value, the state of each of its alerts, and each backend's last path
 * check. Bounded like the slices themselves: at most `slices.models` (or `slices.maxModels`) names
 * plus `other` and `none`; a name past that bound (a pair without a slice, from a caller that
 * does not slice) is counted under `other`.
 */

/** One backend's path check in a slice: the last one's figures and the path detector's window. */
export interface LivePath {
  /** The last check's outcome, and its verdict (null unless `ok`). */
  outcome: PathOutcome;
  verdict: PathVerdict | null;
  /** Why the last check was not `ok`. */
  reason?: string;
  /** The engine API the prefill used. */
  method?: string;
  /** Decode against prefill of the last `ok` check: the largest shift (nats) and shifted/comparable positions. */
  maxShift: number | null;
  shifted: number;
  comparable: number;
  /** When the last check came (epoch ms). */
  at: number;
  /** Checks since the start, and how many found the two paths inconsistent. */
  checks: number;
  inconsistent: number;
  /** The path detector's window now: pooled share over its requests, and its CUSUM. */
  share: number;
  cusum: number;
  requests: number;
}

/** One model slice's row on the page. */
export interface LiveModel {
  model: string;
  /** Mirrored pairs of this slice since the start (every outcome), and the compared ones by verdict. */
  pairs: number;
  verdicts: Record<Verdict, number>;
  /** The slice's pair window now: pooled share, comparable requests in it, CUSUM, the permutation test. */
  share: number;
  requests: number;
  cusum: number;
  pvalue?: number;
  pvaluePairs?: number;
  /** Its alerts: LogprobGlobalShift, LogprobSustainedShift, LogprobSelfInconsistency and LogprobPathInconsistency per backend, LogprobPromptMismatch, LogprobCanaryShift. */
  alerts: LiveAlert[];
  /** How many of them fire now (`firing` or `resolving`): what orders the rows, worst first. */
  firing: number;
  /** Each backend's path check (null: none came for this slice). */
  path: Record<Backend, LivePath | null>;
}

interface Counts {
  pairs: number;
  verdicts: Record<Verdict, number>;
  path: Record<Backend, LivePath | null>;
}

const BACKENDS: readonly Backend[] = ['candidate', 'baseline'];
const zeroVerdicts = (): Record<Verdict, number> =>
  Object.fromEntries(VERDICTS.map((v) => [v, 0])) as Record<Verdict, number>;
const finite = (x: number | null | undefined): number | null =>
  x === null || x === undefined || !Number.isFinite(x) ? null : x;

/** `logprobe_alert_firing`'s reading of a phase. */
export const fires = (phase: AlertPhase): boolean => phase === 'firing' || phase === 'resolving';

/** An alert's state as the page shows it, from its detector's phase and the last transition the feed heard. */
export function liveAlert(
  alert: AlertName,
  s: DetectorState['global'],
  last: LiveAlert['last'],
  backend?: Backend,
): LiveAlert {
  return {
    alert,
    ...(backend ? { backend } : {}),
    phase: s.phase,
    since: s.phase === 'inactive' && s.since === 0 ? null : s.since * 1000,
    last,
  };
}

/** The per-model counts the feed keeps, and the rows it builds from them and the slices' detectors. */
export class LiveModels {
  private readonly counts = new Map<string, Counts>();
  /** The last transition of each alert, by `model/alert[/backend]`. */
  private readonly last = new Map<string, NonNullable<LiveAlert['last']>>();
  /** Names other than `other` and `none` counted so far. */
  private named = 0;
  private readonly bound: number;

  constructor(
    config: Config,
    private readonly now: () => number,
  ) {
    // The slicer's own bound (src/core/slice.ts): the names it may give besides `other` and `none`.
    this.bound = config.slices.models?.length ?? config.slices.maxModels;
  }

  /** The slice a pair counts in: its own, or `other` once the bound is reached (the slicer's, again). */
  private key(pair: MirroredPair): string {
    const model = pair.slice?.model ?? NO_MODEL;
    if (this.counts.has(model) || model === OTHER_MODEL || model === NO_MODEL) return model;
    if (this.named >= this.bound) return OTHER_MODEL;
    this.named++;
    return model;
  }

  private of(model: string): Counts {
    let c = this.counts.get(model);
    if (c === undefined) {
      c = { pairs: 0, verdicts: zeroVerdicts(), path: { candidate: null, baseline: null } };
      this.counts.set(model, c);
    }
    return c;
  }

  /** A mirrored pair: its slice's count, its verdict (when compared against a baseline), its path checks. A canary's pair is not traffic: its alert says what its rounds found. */
  onPair(pair: MirroredPair, verdict: Verdict | null): void {
    if (pair.canary !== undefined) return;
    const c = this.of(this.key(pair));
    c.pairs++;
    if (verdict !== null && pair.baseline !== null) c.verdicts[verdict]++;
    for (const pp of pair.paths ?? []) this.onPath(c, pp);
  }

  private onPath(c: Counts, pp: PathPair): void {
    const prev = c.path[pp.backend];
    const a = pp.analysis;
    c.path[pp.backend] = {
      outcome: pp.outcome,
      verdict: pp.verdict,
      ...(pp.reason ? { reason: pp.reason } : {}),
      ...(pp.method ? { method: pp.method } : {}),
      // A check that was not `ok` keeps the last figures: the row says why this one has none.
      maxShift: a ? finite(a.maxShift) : (prev?.maxShift ?? null),
      shifted: a ? a.shifted : (prev?.shifted ?? 0),
      comparable: a ? a.comparable : (prev?.comparable ?? 0),
      at: this.now(),
      checks: (prev?.checks ?? 0) + 1,
      inconsistent: (prev?.inconsistent ?? 0) + (pp.verdict === 'path_inconsistent' ? 1 : 0),
      share: 0,
      cusum: 0,
      requests: 0,
    };
  }

  /** An alert transition of a slice (one without a model is the caller's single detector: not a row's). */
  onAlert(t: AlertTransition): void {
    if (t.model === undefined || !(this.counts.has(t.model) || this.last.size < (this.bound + 2) * 8)) return;
    this.last.set(alertKey(t.model, t.alert, t.backend), { to: t.to, at: t.at * 1000, evidence: t.evidence });
  }

  /** Every slice that has seen a pair (or fires), worst first: most alerts firing, then pending, then the larger share and CUSUM. */
  rows(slices: ReadonlyMap<string, Readonly<SliceDetectors>>): LiveModel[] {
    const names = new Set([...this.counts.keys(), ...slices.keys()]);
    const out: LiveModel[] = [];
    for (const model of names) {
      const row = this.row(model, slices.get(model));
      if (row.pairs > 0 || row.firing > 0) out.push(row);
    }
    const pending = (m: LiveModel) => m.alerts.filter((a) => a.phase === 'pending').length;
    return out.sort(
      (a, b) =>
        b.firing - a.firing ||
        pending(b) - pending(a) ||
        b.share - a.share ||
        b.cusum - a.cusum ||
        b.pairs - a.pairs ||
        a.model.localeCompare(b.model),
    );
  }

  private row(model: string, d: Readonly<SliceDetectors> | undefined): LiveModel {
    const c = this.counts.get(model);
    const last = (alert: AlertName, backend?: Backend) => this.last.get(alertKey(model, alert, backend)) ?? null;
    const alerts: LiveAlert[] = d
      ? [
          liveAlert('LogprobGlobalShift', d.pairs.global, last('LogprobGlobalShift')),
          liveAlert('LogprobSustainedShift', d.pairs.sustained, last('LogprobSustainedShift')),
          ...BACKENDS.map((b) =>
            liveAlert('LogprobSelfInconsistency', d.self[b].global, last('LogprobSelfInconsistency', b), b),
          ),
          ...BACKENDS.map((b) =>
            liveAlert('LogprobPathInconsistency', d.path[b].global, last('LogprobPathInconsistency', b), b),
          ),
          liveAlert('LogprobPromptMismatch', d.prompt.global, last('LogprobPromptMismatch')),
          liveAlert('LogprobCanaryShift', d.canary, last('LogprobCanaryShift')),
        ]
      : [];
    const path = { candidate: c?.path.candidate ?? null, baseline: c?.path.baseline ?? null };
    for (const b of BACKENDS) {
      const p = path[b];
      if (p && d)
        path[b] = { ...p, share: pooledShare(d.path[b]), cusum: d.path[b].cusum, requests: d.path[b].recent.length };
    }
    const pvalue = d ? { pvalue: d.permutation.pValue(), pvaluePairs: d.permutation.pairs } : {};
    return {
      model,
      pairs: c?.pairs ?? 0,
      verdicts: c?.verdicts ?? zeroVerdicts(),
      share: d ? pooledShare(d.pairs as DetectorState) : 0,
      requests: d ? d.pairs.recent.length : 0,
      cusum: d ? d.pairs.cusum : 0,
      ...pvalue,
      alerts,
      firing: alerts.filter((a) => fires(a.phase)).length,
      path,
    };
  }
}

function alertKey(model: string, alert: AlertName, backend?: Backend): string {
  return `${model}\u0000${alert}${backend ? `\u0000${backend}` : ''}`;
}

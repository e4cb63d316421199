import type { Config } from '../config/schema.js';
import { parseResponse, VERDICTS, type Verdict } from '../core/index.js';
import {
  pooledShare,
  type AlertName,
  type AlertPhase,
  type AlertTransition,
  type DetectorState,
} from '../core/detector.js';
import { PROBE_SHAPES, SELF_VERDICTS, type ProbeShape, type SelfVerdict } from '../core/self.js';
import { buildStrip, type Strip } from '../report/strips.js';
import type { MirroredPair, MirrorOutcome } from '../pair/types.js';
import type { BackendStatus } from '../backend/health.js';
import type { Backend } from '../core/types.js';
import type { CacheSplit } from '../core/slice.js';
import type { SliceDetectors } from '../mirror/detectors.js';
import { fires, liveAlert, LiveModels, type LiveModel } from './models.js';

/**
 * The live page's state (GET /ui on the admin port, src/live/page.ts), kept in the mirror's
 * worker thread, where the pairs are: the last {@link LIVE_PAIRS} pairs as the report's token
 * strips (built here from the bodies the worker has just parsed and compared, so the proxy's
 * thread never parses anything for the page), the detectors' pooled share and CUSUM sampled every
 * second over the last {@link LIVE_SECONDS} seconds, the verdict mix and every in-process alert.
 * Bounded whatever the traffic: a strip has at most 256 positions of short tokens, a prompt
 * excerpt at most {@link PROMPT_CHARS} characters.
 *
 * The page polls; each poll asks the worker for what changed since its last one (`since`: the
 * last pair it has, `sinceT`: its last point), which the worker serialises itself. With nobody on
 * the page the proxy's thread pays nothing and the worker builds no strip (it keeps the last
 * {@link PENDING_PAIRS} pairs' bodies to build theirs if a page opens); while a page is open, one
 * strip per pair, about what the comparison itself costs (docs/operations.md has the figures).
 */

/** Pairs kept for the page. */
export const LIVE_PAIRS = 50;
/**
 * While no page has polled for {@link VIEWER_MS}, strips are not built: the last
 * {@link PENDING_PAIRS} pairs keep their bodies (by reference) so that a page opened then shows
 * them at once; older ones are listed without a strip.
 */
export const VIEWER_MS = 60_000;
export const PENDING_PAIRS = 10;
/** Seconds of detector history kept (one point a second). */
export const LIVE_SECONDS = 300;
/** A token longer than this is cut (tokens are short; this bounds a hostile vocabulary). */
const TOKEN_CHARS = 48;
const PROMPT_CHARS = 240;
const ID_CHARS = 80;

/** A strip as the page draws it; a repeat's names its two runs. */
export type LiveStrip = Strip & { sides?: [string, string] };

export interface LivePair {
  seq: number;
  id: string;
  ts: string;
  route: string;
  /** Its model slice and whether the candidate's copy read from its prefix cache (absent: the pair carried no slice). */
  model?: string;
  cache?: CacheSplit;
  /** A canary's pair (logprobe's own probe): its probe and round; not in the verdict mix. */
  canary?: { probe: string; round: number };
  outcome: MirrorOutcome;
  /** The pair's verdict; null when it was not compared (see outcome) or baseline-free. */
  verdict: Verdict | null;
  /** The start of the prompt (the last user message, or `prompt`), unless capture.includePrompts is false. */
  prompt: string | null;
  /** The pair's strip, or (baseline-free) its repeat's; null when nothing was compared, or not built (`unbuilt`). */
  strip: LiveStrip | null;
  /** True when the strip was not built: the pair came while no page was open and is no longer among the last {@link PENDING_PAIRS}. */
  unbuilt?: true;
  /**
   * The comparison the strip draws (the pair's, or baseline-free its repeat's: second run against
   * first), kept whether or not the strip is built, so that a card without a strip still shows its
   * true verdict and figures; null when nothing was compared.
   */
  compared: LiveCompared | null;
  repeats: Array<{ backend: Backend; verdict: SelfVerdict | null; probe: ProbeShape }>;
}

/** A comparison's verdict and free-running figures, as the strip's head shows them. */
export interface LiveCompared {
  /** `pair`: candidate against baseline; `repeat`: a baseline-free repeat on `backend`. */
  kind: 'pair' | 'repeat';
  backend?: Backend;
  verdict: Verdict;
  maxShift: number | null;
  shifted: number;
  comparable: number;
}

/** One second of the detectors. `t`: epoch ms. */
export interface LivePoint {
  t: number;
  share: number;
  cusum: number;
  /** Comparable requests in the window. */
  requests: number;
  /** The permutation test's p-value over the window (src/core/permutation.ts), and the pairs it had; absent without one. */
  pvalue?: number;
  pvaluePairs?: number;
}

export interface LiveAlert {
  alert: AlertName;
  backend?: Backend;
  /** `firing` and `resolving` are what logprobe_alert_firing shows as 1. */
  phase: AlertPhase;
  /** When the phase began (epoch ms), or null when it never left inactive. */
  since: number | null;
  /** The last transition, with its evidence. */
  last: { to: 'firing' | 'resolved'; at: number; evidence: AlertTransition['evidence'] } | null;
}

/** What one poll gets (the JSON of GET /ui/data's `data`). */
export interface LiveData {
  now: number;
  /** The newest pair's seq (0: none yet). */
  seq: number;
  /** Pairs below this seq are no longer held: the page drops them. */
  oldest: number;
  settings: {
    mode: Config['mode'];
    candidate: string;
    baseline: string | null;
    sampleRate: number;
    window: number;
    minRequests: number;
    fireFraction: number;
    forSeconds: number;
    cusumK: number;
    cusumH: number;
    pairs: number;
    seconds: number;
  };
  noiseFloor: number | null;
  /** Each backend's state: reachable or not, its engine, the last failed copy's cause (src/backend/health.ts). */
  backends: BackendStatus[];
  /**
   * The worst slice's LogprobGlobalShift and LogprobSustainedShift (the slice {@link window} and
   * {@link series} show), then LogprobSelfInconsistency per backend, firing when it fires in any
   * slice. Each slice's own alerts are in {@link models}.
   */
  alerts: LiveAlert[];
  /**
   * One row per model slice that has seen a pair (src/live/models.ts), worst first: its pairs and
   * verdicts, its window, CUSUM and p-value, each of its alerts, its path checks. At most
   * `slices.models` (or `slices.maxModels`) + 2 rows.
   */
  models: LiveModel[];
  /** Since the start: pairs by outcome, compared pairs by verdict, repeats by backend and verdict. */
  outcomes: Partial<Record<MirrorOutcome, number>>;
  verdicts: Record<Verdict, number>;
  self: Record<Backend, Record<SelfVerdict, number>>;
  /** Since the start: repeats by backend and what they probed (only cold_warm feeds the self alert). */
  probes: Record<Backend, Record<ProbeShape, number>>;
  window: LivePoint;
  /** Points after `sinceT`, oldest first. */
  series: LivePoint[];
  /** Pairs after `since`, oldest first. */
  pairs: LivePair[];
}

const cut = (s: string, n: number): string => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
const cutTop = (top: Array<[string, number | null]>): Array<[string, number | null]> =>
  top.map(([t, v]) => [cut(t, TOKEN_CHARS), v]);

/** The strip with every token, the id and the top-k bounded in length. */
function bounded(s: LiveStrip): LiveStrip {
  return {
    ...s,
    id: cut(s.id, ID_CHARS),
    tokens: s.tokens.map((t) => ({
      ...t,
      t: cut(t.t, TOKEN_CHARS),
      ...(t.c !== undefined ? { c: cut(t.c, TOKEN_CHARS) } : {}),
      tc: cutTop(t.tc),
      tb: cutTop(t.tb),
    })),
    ...(s.scored ? { scored: s.scored.map((x) => ({ ...x, t: cut(x.t, TOKEN_CHARS) })) } : {}),
    ...(s.flip
      ? {
          flip: {
            ...s.flip,
            baselineToken: cut(s.flip.baselineToken, TOKEN_CHARS),
            candidateToken: cut(s.flip.candidateToken, TOKEN_CHARS),
          },
        }
      : {}),
  };
}

/** The text a prompt starts with: the last user message (string or text parts), or `prompt`. */
export function promptExcerpt(request: Record<string, unknown>): string | null {
  const text = (v: unknown): string | null => {
    if (typeof v === 'string') return v;
    if (Array.isArray(v)) {
      const parts = v
        .map((p) =>
          typeof p === 'string'
            ? p
            : p !== null && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string'
              ? (p as { text: string }).text
              : '',
        )
        .filter(Boolean);
      return parts.length > 0 ? parts.join(' ') : null;
    }
    return null;
  };
  let out: string | null = null;
  if (Array.isArray(request.messages)) {
    const msgs = request.messages as Array<{ role?: unknown; content?: unknown }>;
    const user =
      [...msgs].reverse().find((m) => m !== null && typeof m === 'object' && m.role === 'user') ??
      msgs[msgs.length - 1];
    out = user && typeof user === 'object' ? text(user.content) : null;
  } else {
    out = text(request.prompt);
  }
  return out === null ? null : cut(out.replace(/\s+/g, ' ').trim(), PROMPT_CHARS);
}

const finite = (x: number | null | undefined): number | null =>
  x === null || x === undefined || !Number.isFinite(x) ? null : x;

/** The comparison {@link LiveFeed}'s strip draws for the pair (the same choice), without its bodies. */
function compared(pair: MirroredPair): LiveCompared | null {
  const of = (c: NonNullable<MirroredPair['analysis']>) => ({
    verdict: c.verdict,
    maxShift: finite(c.maxShift),
    shifted: c.shifted,
    comparable: c.comparable,
  });
  if (pair.analysis && pair.baseline && pair.outcome !== 'unparseable') return { kind: 'pair', ...of(pair.analysis) };
  const r = pair.repeats?.find((x) => x.analysis !== null && x.analysis.verdict !== 'incomparable');
  if (r && r.analysis && (r.backend === 'candidate' || pair.baseline !== null))
    return { kind: 'repeat', backend: r.backend, ...of(r.analysis) };
  return null;
}

const zeros = <K extends string>(keys: readonly K[]): Record<K, number> =>
  Object.fromEntries(keys.map((k) => [k, 0])) as Record<K, number>;

export class LiveFeed {
  private readonly pairs: LivePair[] = [];
  /** Pairs whose strip is still to be built, with what it needs (the newest {@link PENDING_PAIRS}). */
  private readonly pending = new Map<number, MirroredPair>();
  private lastPoll = -Infinity;
  private readonly series: LivePoint[] = [];
  private seq = 0;
  private noiseFloor: number | null = null;
  private readonly outcomes: Partial<Record<MirrorOutcome, number>> = {};
  private readonly verdicts = zeros(VERDICTS);
  private readonly self: Record<Backend, Record<SelfVerdict, number>> = {
    candidate: zeros(SELF_VERDICTS),
    baseline: zeros(SELF_VERDICTS),
  };
  private readonly probes: Record<Backend, Record<ProbeShape, number>> = {
    candidate: zeros(PROBE_SHAPES),
    baseline: zeros(PROBE_SHAPES),
  };
  private readonly selfAlerts: Record<Backend, { firing: boolean; since: number | null }> = {
    candidate: { firing: false, since: null },
    baseline: { firing: false, since: null },
  };
  private readonly lastTransition = new Map<string, LiveAlert['last']>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly config: Config,
    /** The mirror's detectors now. */
    private readonly detector: () => Readonly<DetectorState>,
    private readonly now: () => number = Date.now,
    /** Each backend's state now. */
    private readonly backends: () => BackendStatus[] = () => [],
    /** The permutation test now (null: none). */
    private readonly permutation: () => { pValue(): number; readonly pairs: number } | null = () => null,
    /** Every model slice's detectors now (src/mirror/detectors.ts): the page's row per model. */
    private readonly slices: () => ReadonlyMap<string, Readonly<SliceDetectors>> = () => new Map(),
  ) {
    this.models = new LiveModels(config, now);
    this.timer = setInterval(() => this.sample(), 1000);
    this.timer.unref();
  }

  private readonly models: LiveModels;

  /** The window now, as a point of the chart. */
  private point(): LivePoint {
    const d = this.detector();
    const p = this.permutation();
    return {
      t: this.now(),
      share: pooledShare(d as DetectorState),
      cusum: d.cusum,
      requests: d.recent.length,
      ...(p ? { pvalue: p.pValue(), pvaluePairs: p.pairs } : {}),
    };
  }

  /** One point a second; the oldest beyond {@link LIVE_SECONDS} go. */
  sample(): void {
    this.series.push(this.point());
    if (this.series.length > LIVE_SECONDS) this.series.splice(0, this.series.length - LIVE_SECONDS);
  }

  onPair(pair: MirroredPair): void {
    const seq = ++this.seq;
    this.outcomes[pair.outcome] = (this.outcomes[pair.outcome] ?? 0) + 1;
    this.noiseFloor = pair.noiseFloor;
    const verdict = pair.analysis && pair.outcome !== 'unparseable' ? pair.analysis.verdict : null;
    if (verdict !== null && pair.baseline !== null && pair.canary === undefined) this.verdicts[verdict]++;
    this.models.onPair(pair, verdict);
    const repeats = (pair.repeats ?? []).map((r) => ({ backend: r.backend, verdict: r.verdict, probe: r.probe }));
    for (const r of repeats) if (r.verdict !== null) this.self[r.backend][r.verdict]++;
    for (const r of repeats) if (r.verdict !== null) this.probes[r.backend][r.probe]++;
    // A page is open: the strip now (the worker has the bodies at hand). None is: later, if asked.
    const watched = this.now() - this.lastPoll < VIEWER_MS;
    this.pairs.push({
      seq,
      id: cut(pair.id, ID_CHARS),
      ts: pair.ts,
      route: pair.route,
      ...(pair.slice ? { model: pair.slice.model, cache: pair.slice.cache } : {}),
      ...(pair.canary ? { canary: { probe: cut(pair.canary.probe, ID_CHARS), round: pair.canary.round } } : {}),
      outcome: pair.outcome,
      verdict: pair.baseline === null ? null : verdict,
      prompt: this.config.capture.includePrompts ? promptExcerpt(pair.request) : null,
      strip: watched ? this.strip(seq, pair) : null,
      compared: compared(pair),
      repeats,
    });
    if (!watched) {
      this.pending.set(seq, pair);
      for (const old of this.pending.keys()) {
        if (this.pending.size <= PENDING_PAIRS) break;
        this.pending.delete(old);
        const p = this.pairs.find((x) => x.seq === old);
        if (p) p.unbuilt = true;
      }
    }
    if (this.pairs.length > LIVE_PAIRS) {
      for (const p of this.pairs.splice(0, this.pairs.length - LIVE_PAIRS)) this.pending.delete(p.seq);
    }
  }

  /** The pair's strip (candidate against baseline), or baseline-free the first repeat's (second run against first). */
  private strip(seq: number, pair: MirroredPair): LiveStrip | null {
    const meta = {
      n: seq,
      id: pair.id,
      at: `${pair.ts.slice(11, 19)}Z`,
      route: pair.route,
      noiseFloor: pair.noiseFloor,
    };
    try {
      if (pair.analysis && pair.baseline && pair.outcome !== 'unparseable') {
        return bounded(
          buildStrip(meta, pair.analysis, parseResponse(pair.candidate.body), parseResponse(pair.baseline.body)),
        );
      }
      const r = pair.repeats?.find((x) => x.analysis !== null && x.analysis.verdict !== 'incomparable');
      if (r && r.analysis) {
        const first = r.backend === 'candidate' ? pair.candidate : pair.baseline;
        if (first === null) return null;
        const s: LiveStrip = buildStrip(meta, r.analysis, parseResponse(r.second.body), parseResponse(first.body));
        s.sides = [`${r.backend}, second run`, `${r.backend}, first run`];
        return bounded(s);
      }
    } catch {
      // A body the parser cannot read as the comparison did: no strip, the counts stand.
    }
    return null;
  }

  onAlert(t: AlertTransition): void {
    this.models.onAlert(t);
    const key = t.backend ? `${t.alert}/${t.backend}` : t.alert;
    this.lastTransition.set(key, { to: t.to, at: t.at * 1000, evidence: t.evidence });
    if (t.alert === 'LogprobSelfInconsistency' && t.backend)
      this.selfAlerts[t.backend] = { firing: t.to === 'firing', since: t.at * 1000 };
  }

  private alerts(): LiveAlert[] {
    const d = this.detector();
    const of = (alert: 'LogprobGlobalShift' | 'LogprobSustainedShift', s: DetectorState['global']): LiveAlert =>
      liveAlert(alert, s, this.lastTransition.get(alert) ?? null);
    const slices = [...this.slices().values()];
    const self = (['candidate', 'baseline'] as const).map((backend): LiveAlert => {
      const last = this.lastTransition.get(`LogprobSelfInconsistency/${backend}`) ?? null;
      // Per slice, the detectors' own phases: firing when any slice's fires (the transitions
      // alone would let one slice's resolve hide another's firing).
      if (slices.length > 0) {
        const s = slices.map((x) => x.self[backend].global);
        const worst = s.find((x) => fires(x.phase)) ?? s.find((x) => x.phase === 'pending') ?? s[0]!;
        return liveAlert('LogprobSelfInconsistency', worst, last, backend);
      }
      return {
        alert: 'LogprobSelfInconsistency',
        backend,
        phase: this.selfAlerts[backend].firing ? 'firing' : 'inactive',
        since: this.selfAlerts[backend].since,
        last,
      };
    });
    return [of('LogprobGlobalShift', d.global), of('LogprobSustainedShift', d.sustained), ...self];
  }

  /** What changed since the page's last poll, as JSON text (serialised here, in the worker). */
  snapshot(since: number, sinceT: number): string {
    this.lastPoll = this.now();
    const pairs = this.pairs.filter((p) => p.seq > since);
    for (const p of pairs) {
      const pair = this.pending.get(p.seq);
      if (pair === undefined) continue;
      this.pending.delete(p.seq);
      p.strip = this.strip(p.seq, pair);
    }
    const c = this.config;
    const data: LiveData = {
      now: this.now(),
      seq: this.seq,
      oldest: this.pairs[0]?.seq ?? this.seq + 1,
      settings: {
        mode: c.mode,
        candidate: new URL(c.candidate.url).host,
        baseline: c.baseline.url === null ? null : new URL(c.baseline.url).host,
        sampleRate: c.mirror.sampleRate,
        window: c.alert.window,
        minRequests: c.alert.minRequests,
        fireFraction: c.alert.fireFraction,
        forSeconds: c.alert.forSeconds,
        cusumK: c.alert.cusum.k,
        cusumH: c.alert.cusum.h,
        pairs: LIVE_PAIRS,
        seconds: LIVE_SECONDS,
      },
      noiseFloor: this.noiseFloor,
      backends: this.backends(),
      alerts: this.alerts(),
      models: this.models.rows(this.slices()),
      outcomes: this.outcomes,
      verdicts: this.verdicts,
      self: this.self,
      probes: this.probes,
      window: this.point(),
      series: this.series.filter((p) => p.t > sinceT),
      pairs,
    };
    return JSON.stringify(data);
  }

  close(): void {
    clearInterval(this.timer);
  }
}

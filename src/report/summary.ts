import type { AlertConfig } from '../core/detector.js';
import { SELF_VERDICTS, type SelfVerdict } from '../core/self.js';
import { VERDICTS, type FlipClass, type Locus, type ScoringOutcome, type Verdict } from '../core/index.js';
import type { MirrorOutcome } from '../pair/types.js';
import { Histogram, linearEdges, logEdges, type HistogramData } from './histogram.js';
import type { PairResult, RepeatResult } from '../pair/analyze.js';
import { FlipCurve, type FlipCurveData } from './threshold.js';
import { badness, buildStrip, promptKey, StripSelector, stripInput, type Strip } from './strips.js';
import type { Backend } from '../core/types.js';
import type { PermutationConfig } from '../core/permutation.js';
import type { Slice } from '../core/slice.js';
import { PATH_VERDICTS, type PathOutcome, type PathPair, type PathVerdict } from '../core/path.js';
import {
  CACHE_RULE,
  entryModel,
  OfflineSlices,
  type DetectorClock,
  type ModelFigures,
  type OfflineAlert,
  type PairPlace,
} from './slices.js';

export type { ModelFigures, OfflineAlert } from './slices.js';

/** Outcomes of pairs that were not compared. */
export const UNCOMPARED: readonly MirrorOutcome[] = ['candidate_error', 'baseline_error', 'unparseable'];
/** Flip classes, from a near-tie to a flip that needs a systematic shift. */
export const FLIP_CLASSES: readonly FlipClass[] = ['ambiguous', 'gray', 'systematic'];

/** One pair handed to the summary. */
export interface SummaryEntry {
  file: string;
  line: number;
  id: string;
  route: string;
  result: PairResult;
  /** The thresholds' noise floor used for this pair. */
  noiseFloor: number;
  /** The input's model, as named (replay's gate by model slices it: src/replay/models.ts); absent when none is named. */
  model?: string;
  /** The verdict the capture recorded online (null: not compared online); undefined when the input had none. */
  online?: Verdict | null;
  /** The mirrored request (its prompt is shown with the pair's strip, and groups repeated prompts). */
  request?: unknown;
  /** The capture hashed the prompts (`capture.includePrompts: false`). */
  promptsHashed?: boolean;
  /** The pair's repeat probes (cold → warm on one backend), analysed. */
  repeats?: readonly RepeatResult[];
  /**
   * When the mirror observed the pair (seconds since the epoch: the capture's `ts`, written just
   * after the detectors saw it): the detectors' clock offline, so that `alert.forSeconds` holds
   * as it did online. Without it, each pair is one tick and the alerts fire without waiting.
   */
  at?: number;
  /** The pair's model slice and cache split as captured (v3); without it, the request's `model` and cache `unknown`. */
  slice?: Slice;
  /** The pair's path checks (decode vs prefill on one backend), judged offline (src/core/path.ts rejudgePath). */
  paths?: readonly PathPair[];
}

/** Path checks of one backend: by outcome, the verdicts of those checked, their shifts, and the verdicts per model. */
export interface PathFigures {
  backend: Backend;
  /** Path pairs by outcome (`ok`: checked). */
  outcomes: Record<PathOutcome, number>;
  verdicts: Record<PathVerdict, number>;
  /** shift_i over every compared position of every checked path pair (decode vs prefill). */
  positionShift: HistogramData;
  /** Each checked path pair's largest shift. */
  pairMaxShift: HistogramData;
  /** The path verdicts per model, in the order the models were first seen. */
  models: Array<{ model: string; verdicts: Record<PathVerdict, number> }>;
}

/** Everything a report shows, as plain data (the text report, `--html`, and tests read it). */
export interface SummaryData {
  pairs: number;
  compared: number;
  verdicts: Record<Verdict, number>;
  uncompared: Partial<Record<MirrorOutcome, number>>;
  /** For each uncompared outcome, its most frequent reasons (up to three, most frequent first). */
  uncomparedReasons: Partial<Record<MirrorOutcome, Array<{ reason: string; count: number }>>>;
  /** Pairs whose verdict differs from the one captured online (null: no input carried one). */
  changed: number | null;
  /** Distinct noise floors used (at most 5 listed; `moreFloors` when there were more). */
  noiseFloors: number[];
  moreFloors: boolean;
  /** shift_i over every comparable position of every compared pair. */
  positionShift: HistogramData;
  /** Each compared pair's largest shift. */
  pairMaxShift: HistogramData;
  /** Flip gaps by class, and how many were lower bounds. */
  flips: Record<FlipClass, HistogramData> & { lowerBound: number };
  /** The threshold model: the share of positions that flipped per baseline-gap bucket, and the gap at which flips stop (src/report/threshold.ts). */
  flipCurve: FlipCurveData;
  /** What the offline detectors would have raised: each alert's first firing per model (and backend), in input order. */
  alerts: OfflineAlert[];
  /** Each model slice: its verdicts, its cache split, its detectors (the report shows a table when there is more than one). */
  models: ModelFigures[];
  /** The rule by which a model's shifts concentrate on cache hits (src/report/slices.ts CACHE_RULE). */
  cacheRule: typeof CACHE_RULE;
  /** Path checks per backend (none when no pair carried one). */
  paths: PathFigures[];
  /** Pairs without a baseline (baseline-free mode): only their repeats say anything. */
  baselineFree: number;
  /**
   * Canary pairs (logprobe's own probes, config canary): judged online per round, never in the
   * figures above; per model, the rounds and the verdicts of their probes.
   */
  canaries: Array<{ model: string; rounds: number; pairs: number; verdicts: Partial<Record<Verdict, number>> }>;
  /** Repeat probes per backend: self verdicts, the shift between the runs, and how many had their first run cold for sure. */
  repeats: Array<{
    backend: Backend;
    pairs: number;
    flushed: number;
    notCold: number;
    notWarm: number;
    unprobed: number;
    verdicts: Record<SelfVerdict, number>;
    positionShift: HistogramData;
    /** The self detector after the last pair (the cold→warm pairs it counted; of the model whose share is largest): its window's pooled share and size, and its CUSUM. */
    detector: { share: number; requests: number; cusum: number };
  }>;
  /** The alert config the offline detectors ran with (null: none ran). */
  alertConfig: AlertConfig | null;
  /** Teacher-forced scoring: pairs by outcome (pairs that needed none are not counted), the most frequent reasons, and the loci found. */
  scoring: {
    outcomes: Record<ScoringOutcome, number>;
    /** Up to five reasons with their counts, most frequent first (unsupported, skipped, failed). */
    reasons: Array<{ reason: string; count: number }>;
    methods: string[];
    /** shift_i over every scored position of every scored pair. */
    positionShift: HistogramData;
    loci: Record<Locus, number>;
    /** The prompt's own positions: pairs compared, pairs with a shifted prompt position, and the shifts. */
    prompt: { pairs: number; shifted: number; positionShift: HistogramData };
  };
  /** Worst pairs first, then the sample, each with its strip. */
  worst: Strip[];
  sampled: Strip[];
  /** Size of the uniform sample the `sampled` strips come from (it may overlap the worst). */
  sampleDrawn: number;
  /** Lines that were skipped, and the first few messages. */
  skipped: number;
  skippedExamples: string[];
}

/** Sizes of what the summary keeps (it keeps nothing else per pair). */
export interface SummaryOptions {
  /** Pairs with a strip among the worst (default 100). */
  worst?: number;
  /** Pairs with a strip drawn uniformly from all (default 400). */
  sample?: number;
  /** Alert config for the offline detectors (`forSeconds` holds over the pairs' capture times, {@link SummaryEntry.at}). */
  alert?: AlertConfig;
  /** The permutation test's settings (`alert.permutation`; its window is `alert.window`); absent: no p-value. */
  permutation?: Omit<PermutationConfig, 'window'>;
}

const EXAMPLES = 20;
/** Distinct reasons counted per uncompared outcome. */
const MAX_CAUSES = 50;

/**
 * Accumulates analysed pairs into a report in constant memory: counts, histograms, the flips,
 * the offline detectors, and a bounded selection of pairs with their token strips.
 */
export class Summary {
  private pairs = 0;
  private readonly verdicts = Object.fromEntries(VERDICTS.map((v) => [v, 0])) as Record<Verdict, number>;
  private readonly uncompared: Partial<Record<MirrorOutcome, number>> = {};
  private readonly causes = new Map<MirrorOutcome, Map<string, number>>();
  private changed: number | null = null;
  private readonly floors = new Set<number>();
  private moreFloors = false;
  private readonly positionShift = new Histogram(logEdges(-6, 2, 10));
  private readonly pairMaxShift = new Histogram(logEdges(-6, 2, 10));
  private readonly flipCurve = new FlipCurve();
  private readonly flipGap = Object.fromEntries(
    FLIP_CLASSES.map((c) => [c, new Histogram(linearEdges(0.05, 5))]),
  ) as Record<FlipClass, Histogram>;
  private lowerBound = 0;
  private readonly strips: StripSelector;
  /** Each model's detectors and verdicts by cache split, as the mirror keeps them per slice. */
  private readonly slices: OfflineSlices;
  /** The pair before the current one: an alert that time alone fired between two pairs fired after it. */
  private previous: PairPlace | null = null;
  private readonly pathStats = new Map<
    Backend,
    {
      outcomes: Record<PathOutcome, number>;
      verdicts: Record<PathVerdict, number>;
      shift: Histogram;
      maxShift: Histogram;
      models: Map<string, Record<PathVerdict, number>>;
    }
  >();
  private skipped = 0;
  private readonly skippedExamples: string[] = [];
  private readonly scoringOutcomes: Record<ScoringOutcome, number> = { ok: 0, unsupported: 0, skipped: 0, failed: 0 };
  private readonly reasons = new Map<string, number>();
  private readonly methods = new Set<string>();
  private readonly scoredShift = new Histogram(logEdges(-6, 2, 10));
  private readonly loci: Record<Locus, number> = { compute: 0, decode_state: 0, unknown: 0 };
  private readonly promptShift = new Histogram(logEdges(-6, 2, 10));
  private promptPairs = 0;
  private promptShifted = 0;
  private baselineFree = 0;
  private readonly selfStats = new Map<
    Backend,
    {
      pairs: number;
      flushed: number;
      notCold: number;
      notWarm: number;
      unprobed: number;
      verdicts: Record<SelfVerdict, number>;
      shift: Histogram;
    }
  >();

  constructor(private readonly options: SummaryOptions = {}) {
    this.strips = new StripSelector(options.worst ?? 100, options.sample ?? 400);
    this.slices = new OfflineSlices({ alert: options.alert, permutation: options.permutation });
  }

  private readonly canaryStats = new Map<
    string,
    { rounds: Set<number>; pairs: number; verdicts: Partial<Record<Verdict, number>> }
  >();

  /**
   * Adds one canary pair (a record with `canary`): counted apart by model, round and verdict, and
   * nothing else — logprobe's own probes are not the traffic, and their rounds were judged online.
   */
  addCanary(model: string, round: number, verdict: Verdict | null): void {
    let c = this.canaryStats.get(model);
    if (c === undefined) {
      // As bounded as the models of the traffic (the capture's slices).
      if (this.canaryStats.size >= 1000) return;
      c = { rounds: new Set(), pairs: 0, verdicts: {} };
      this.canaryStats.set(model, c);
    }
    if (c.rounds.size < 100_000) c.rounds.add(round);
    c.pairs++;
    if (verdict !== null) c.verdicts[verdict] = (c.verdicts[verdict] ?? 0) + 1;
  }

  /** Adds one pair. */
  add(e: SummaryEntry): void {
    const n = ++this.pairs;
    const here: PairPlace = { n, id: e.id, where: `${e.file}:${e.line}` };
    const model = this.slices.name(entryModel(e.slice, e.request));
    const clock = this.detectorClock(n, e, this.previous);
    this.previous = here;
    for (const r of e.repeats ?? []) this.addRepeat(model, r, e.noiseFloor, clock, here);
    for (const p of e.paths ?? []) this.addPath(model, p, clock, here);
    if (e.result.baselineFree) {
      this.baselineFree++;
      return;
    }
    const c = e.result.comparison;
    if (e.online !== undefined) this.changed = (this.changed ?? 0) + ((c?.verdict ?? null) === e.online ? 0 : 1);
    if (c === null) {
      this.uncompared[e.result.outcome] = (this.uncompared[e.result.outcome] ?? 0) + 1;
      this.addCause(e.result.outcome, e.result.reason);
      return;
    }
    this.verdicts[c.verdict]++;
    this.slices.verdict(model, e.slice?.cache ?? 'unknown', c.verdict);
    if (this.floors.size < 5) this.floors.add(e.noiseFloor);
    else if (!this.floors.has(e.noiseFloor)) this.moreFloors = true;
    if (c.verdict === 'incomparable') return;
    // Two sides that read different prompts: their shifts and flips measure no server, only the strip says what differs.
    if (c.verdict !== 'prompt_mismatch') this.addFigures(c);
    this.addStrip(n, e, c);
    // As online: a compared pair with comparable positions feeds its model's pair detectors; a
    // prompt_mismatch is never a shift (the two sides read different prompts) and feeds none.
    if (clock && c.comparable > 0 && c.verdict !== 'prompt_mismatch')
      this.slices.pair(model, c, e.noiseFloor, clock, here);
  }

  /** A compared pair's shifts, flip, threshold-model positions and scoring. */
  private addFigures(c: NonNullable<PairResult['comparison']>): void {
    for (const p of c.positions) if (p.shift !== null) this.positionShift.add(p.shift);
    if (c.maxShift !== null) this.pairMaxShift.add(c.maxShift);
    if (c.flip && c.flip.gap !== null) {
      this.flipGap[c.flip.class].add(c.flip.gap);
      if (c.flip.lowerBound) this.lowerBound++;
    }
    if (c.verdict !== 'tokenizer_mismatch') this.flipCurve.add(c);
    this.addScoring(c);
  }

  /** The pair among the worst and the sample: repeats of one prompt with one verdict share a strip (hashed prompts group by their hash). */
  private addStrip(n: number, e: SummaryEntry, c: NonNullable<PairResult['comparison']>): void {
    const { candidate, baseline } = e.result;
    if (!candidate || !baseline) return;
    const prompt = promptKey(e.route, e.request);
    const group = prompt === null ? null : `${c.verdict}:${prompt}`;
    const input = stripInput(e.request, e.promptsHashed);
    this.strips.consider(
      badness(c),
      () =>
        buildStrip(
          {
            n,
            id: e.id,
            at: `${e.file}:${e.line}`,
            route: e.route,
            noiseFloor: e.noiseFloor,
            ...(input ? { input } : {}),
          },
          c,
          candidate,
          baseline,
        ),
      group,
    );
  }

  private addScoring(c: NonNullable<PairResult['comparison']>): void {
    const s = c.scored;
    // Pairs that needed no scoring (no divergence, a settled verdict) are not counted, as online.
    if (s && !(s.outcome === 'skipped' && s.reason?.startsWith('not needed'))) {
      this.scoringOutcomes[s.outcome]++;
      if (s.outcome === 'ok' && s.method) this.methods.add(s.method);
      if (s.outcome !== 'ok' && s.reason && (this.reasons.has(s.reason) || this.reasons.size < 50))
        this.reasons.set(s.reason, (this.reasons.get(s.reason) ?? 0) + 1);
      if (s.outcome === 'ok') for (const x of s.shifts ?? []) if (x !== null) this.scoredShift.add(x);
    }
    if (c.locus) this.loci[c.locus]++;
    if (c.prompt) {
      this.promptPairs++;
      if (c.prompt.shifted > 0) this.promptShifted++;
      for (const x of c.prompt.shifts) if (x !== null) this.promptShift.add(x);
    }
  }

  private addRepeat(
    model: string,
    r: RepeatResult,
    noiseFloor: number,
    clock: DetectorClock | null,
    here: PairPlace,
  ): void {
    let s = this.selfStats.get(r.backend);
    if (!s) {
      s = {
        pairs: 0,
        flushed: 0,
        notCold: 0,
        notWarm: 0,
        unprobed: 0,
        verdicts: Object.fromEntries(SELF_VERDICTS.map((v) => [v, 0])) as Record<SelfVerdict, number>,
        shift: new Histogram(logEdges(-6, 2, 10)),
      };
      this.selfStats.set(r.backend, s);
    }
    s.pairs++;
    if (r.flushed) s.flushed++;
    if (r.probe === 'not_cold') s.notCold++;
    if (r.probe === 'not_warm') s.notWarm++;
    if (r.probe === 'unprobed') s.unprobed++;
    const c = r.comparison;
    if (c === null || r.verdict === null) return;
    s.verdicts[r.verdict]++;
    for (const p of c.positions) if (p.shift !== null) s.shift.add(p.shift);
    // As online: only a cold→warm pair says anything about the cache path.
    if (clock && r.probe === 'cold_warm' && c.verdict !== 'incomparable' && c.comparable > 0)
      this.slices.repeat(model, r.backend, c, noiseFloor, clock, here);
  }

  /** A path check: counted by backend and model; a checked pair with comparable positions feeds its model's path detector, as online. */
  private addPath(model: string, p: PathPair, clock: DetectorClock | null, here: PairPlace): void {
    let s = this.pathStats.get(p.backend);
    if (!s) {
      s = {
        outcomes: { ok: 0, unsupported: 0, skipped: 0, failed: 0 },
        verdicts: pathVerdictCounts(),
        shift: new Histogram(logEdges(-6, 2, 10)),
        maxShift: new Histogram(logEdges(-6, 2, 10)),
        models: new Map(),
      };
      this.pathStats.set(p.backend, s);
    }
    if (p.outcome in s.outcomes) s.outcomes[p.outcome]++;
    const c = p.analysis;
    if (c === null || p.verdict === null) return;
    s.verdicts[p.verdict]++;
    let m = s.models.get(model);
    if (!m) s.models.set(model, (m = pathVerdictCounts()));
    m[p.verdict]++;
    for (const x of c.shifts) if (x !== null) s.shift.add(x);
    if (c.maxShift !== null) s.maxShift.add(c.maxShift);
    if (clock && c.verdict !== 'incomparable' && c.comparable > 0) this.slices.path(model, p.backend, c, clock, here);
  }

  /**
   * The detectors' clock for pair `n` (null: no alert config, no detector runs): its capture time
   * when it has one and the alert must hold for `forSeconds`, otherwise one tick per pair and no
   * waiting. With capture times, the mirror's ticker (once a second) may fire a pending alert
   * between two pairs: by a second before this pair it has surely ticked every slice, and an
   * alert that fired so fired after the previous pair.
   */
  private detectorClock(n: number, e: SummaryEntry, previous: PairPlace | null): DetectorClock | null {
    const cfg = this.options.alert;
    if (!cfg) return null;
    if (cfg.forSeconds > 0 && e.at !== undefined && Number.isFinite(e.at)) {
      if (previous) this.slices.tick(cfg, e.at - 1, previous);
      return { cfg, now: e.at };
    }
    return { cfg: { ...cfg, forSeconds: 0 }, now: n };
  }

  /** Counts an uncompared pair's reason: at most {@link MAX_CAUSES} distinct ones per outcome (the rest are not named). */
  private addCause(outcome: MirrorOutcome, reason: string | undefined): void {
    if (!reason) return;
    let m = this.causes.get(outcome);
    if (!m) this.causes.set(outcome, (m = new Map()));
    if (m.has(reason) || m.size < MAX_CAUSES) m.set(reason, (m.get(reason) ?? 0) + 1);
  }

  /** Counts a skipped line (malformed, truncated, not replayable); keeps the first messages. */
  skip(message: string): void {
    this.skipped++;
    if (this.skippedExamples.length < EXAMPLES) this.skippedExamples.push(message);
  }

  /** Pairs so far with one of `verdicts` (verdict names or uncompared outcomes). */
  count(names: Iterable<string>): number {
    let n = 0;
    for (const name of names) {
      if (name === 'self_inconsistent') for (const s of this.selfStats.values()) n += s.verdicts.self_inconsistent;
      else
        n += (this.verdicts as Record<string, number>)[name] ?? (this.uncompared as Record<string, number>)[name] ?? 0;
    }
    return n;
  }

  get alertsFired(): number {
    return this.slices.alerts.length;
  }

  /** Repeat pairs compared (their two runs both answered), over every backend: evidence too. */
  get selfCompared(): number {
    let n = 0;
    for (const s of this.selfStats.values())
      n += s.verdicts.identical + s.verdicts.noise + s.verdicts.self_inconsistent;
    return n;
  }

  get total(): number {
    return this.pairs;
  }

  /** Each backend's repeat probes, as data. */
  private repeatData(): SummaryData['repeats'] {
    return [...this.selfStats].map(([backend, s]) => ({
      backend,
      pairs: s.pairs,
      flushed: s.flushed,
      notCold: s.notCold,
      notWarm: s.notWarm,
      unprobed: s.unprobed,
      verdicts: { ...s.verdicts },
      positionShift: s.shift.toJSON(),
      detector: this.slices.worstSelf(backend) ?? { share: 0, requests: 0, cusum: 0 },
    }));
  }

  /** Each backend's path checks, as data. */
  private pathData(): PathFigures[] {
    return [...this.pathStats].map(([backend, s]) => ({
      backend,
      outcomes: { ...s.outcomes },
      verdicts: { ...s.verdicts },
      positionShift: s.shift.toJSON(),
      pairMaxShift: s.maxShift.toJSON(),
      models: [...s.models].map(([model, verdicts]) => ({ model, verdicts: { ...verdicts } })),
    }));
  }

  /** The report's data. */
  data(): SummaryData {
    const compared = VERDICTS.reduce((s, v) => s + this.verdicts[v], 0);
    return {
      pairs: this.pairs,
      compared,
      verdicts: { ...this.verdicts },
      uncompared: { ...this.uncompared },
      uncomparedReasons: Object.fromEntries(
        [...this.causes].map(([o, m]) => [
          o,
          [...m]
            .sort((a, b) => b[1] - a[1])
            .slice(0, 3)
            .map(([reason, count]) => ({ reason, count })),
        ]),
      ),
      changed: this.changed,
      noiseFloors: [...this.floors].sort((a, b) => a - b),
      moreFloors: this.moreFloors,
      positionShift: this.positionShift.toJSON(),
      pairMaxShift: this.pairMaxShift.toJSON(),
      flips: {
        ambiguous: this.flipGap.ambiguous.toJSON(),
        gray: this.flipGap.gray.toJSON(),
        systematic: this.flipGap.systematic.toJSON(),
        lowerBound: this.lowerBound,
      },
      flipCurve: this.flipCurve.toJSON(),
      alerts: [...this.slices.alerts],
      models: this.slices.data(),
      cacheRule: CACHE_RULE,
      paths: this.pathData(),
      baselineFree: this.baselineFree,
      canaries: [...this.canaryStats].map(([model, c]) => ({
        model,
        rounds: c.rounds.size,
        pairs: c.pairs,
        verdicts: { ...c.verdicts },
      })),
      repeats: this.repeatData(),
      alertConfig: this.options.alert ?? null,
      scoring: {
        outcomes: { ...this.scoringOutcomes },
        reasons: [...this.reasons]
          .sort((a, b) => b[1] - a[1])
          .slice(0, 5)
          .map(([reason, count]) => ({ reason, count })),
        methods: [...this.methods],
        positionShift: this.scoredShift.toJSON(),
        loci: { ...this.loci },
        prompt: { pairs: this.promptPairs, shifted: this.promptShifted, positionShift: this.promptShift.toJSON() },
      },
      worst: this.strips.worst(),
      sampled: this.strips.sampled(),
      sampleDrawn: this.strips.drawn,
      skipped: this.skipped,
      skippedExamples: [...this.skippedExamples],
    };
  }
}

function pathVerdictCounts(): Record<PathVerdict, number> {
  return Object.fromEntries(PATH_VERDICTS.map((v) => [v, 0])) as Record<PathVerdict, number>;
}

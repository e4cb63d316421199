import { SELF_VERDICTS } from '../core/self.js';
import { formatNats, VERDICTS, type Verdict } from '../core/index.js';
import { coarsen, type HistogramData } from './histogram.js';
import { FLIP_CLASSES, type ModelFigures, type SummaryData } from './summary.js';
import { PATH_VERDICTS } from '../core/path.js';
import { CACHE_SPLITS } from '../core/slice.js';
import { SHIFT_VERDICTS } from './slices.js';
import { healthLines, type HealthReport } from './health-text.js';
import type { Strip } from './strips.js';
import { gapBucketLabel, MIN_FLIPS_FOR_STOP, type FlipCurveData } from './threshold.js';

/** What the text report says about how the pairs were judged. */
export interface ReportContext {
  /** One line describing the thresholds (per record, overridden, …). */
  thresholds: string;
  gapAmbiguous: number;
  gapSystematic: number;
  /** Worst pairs listed (default 10). */
  top?: number;
  /** The health figures, definition warnings and gates (src/report/health-text.ts). */
  health?: HealthReport;
}

/** How alarming each verdict is, most first (a Record: a new verdict cannot be left out). */
const ALARM_RANK: Readonly<Record<Verdict, number>> = {
  global_shift: 0,
  early_shift: 1,
  local_shift: 2,
  prompt_mismatch: 3,
  tokenizer_mismatch: 4,
  noise: 5,
  identical: 6,
  incomparable: 7,
};

/** Every verdict ({@link VERDICTS}) from the most to the least alarming: the order reports list them in. */
export const VERDICT_ORDER: readonly Verdict[] = [...VERDICTS].sort((a, b) => ALARM_RANK[a] - ALARM_RANK[b]);

/** The caveat every report carries. */
export const ABSENCE_NOTE =
  'a noise verdict does not prove there is no bug: small differences do not prove absence; a large-gap flip proves presence.';

const int = (n: number): string => n.toLocaleString('en-US');
const pct = (n: number, of: number): string => (of > 0 ? `${((100 * n) / of).toFixed(1)}%` : '—');
const bar = (n: number, max: number, width = 30): string =>
  max > 0 && n > 0 ? '█'.repeat(Math.max(1, Math.round((width * n) / max))) : '';

/** The decade edges of the shift histograms, for display. */
export const SHIFT_DECADES = [0, 1e-4, 1e-3, 1e-2, 1e-1, 1, 10];

function decadeLabel(edges: readonly number[], i: number): string {
  if (i === 0) return '0';
  if (i >= edges.length) return `> ${edges[edges.length - 1]}`;
  return `(${edges[i - 1]}, ${edges[i]}]`;
}

function quantiles(h: HistogramData, qs: Array<[string, number]>): string {
  if (h.n === 0) return 'none';
  const parts = qs.map(([label, q]) => {
    const target = Math.max(1, Math.ceil(q * h.n));
    let seen = 0;
    for (let i = 0; i < h.counts.length; i++) {
      seen += h.counts[i]!;
      if (seen >= target)
        return `${label} ≤ ${formatNats(i < h.edges.length ? Math.min(h.edges[i]!, h.max ?? Infinity) : h.max)}`;
    }
    return `${label} ${formatNats(h.max)}`;
  });
  return `${parts.join('  ')}  max ${formatNats(h.max)}`;
}

/** The threshold model in text: flip share per baseline-gap bucket and the gap at which flips stop. */
function flipCurveLines(d: SummaryData, ctx: ReportContext): string[] {
  const fc = d.flipCurve;
  const total = fc.positions.reduce((a, b) => a + b, 0);
  if (total === 0 || fc.flips.every((f) => f === 0)) return [];
  const out = [
    '',
    "flip share by the baseline's gap (top-1 − top-2 at every comparable position; a flip is a pair's first divergence)",
  ];
  fc.positions.forEach((n, i) => {
    if (n > 0)
      out.push(
        `  gap ${gapBucketLabel(fc.edges, i).padEnd(9)} ${int(n).padStart(8)} positions  ${int(fc.flips[i]!).padStart(6)} flipped (${((100 * fc.flips[i]!) / n).toFixed(1)}%)`,
      );
  });
  out.push(`  ${flipStopSentence(fc, ctx.gapAmbiguous, d.positionShift)}`);
  return out;
}

/** Where flips stop, read as an estimate of the offset (src/report/threshold.ts; shared by the text and HTML reports). */
export function flipStopSentence(fc: FlipCurveData, gapAmbiguous: number, positionShift: HistogramData): string {
  if (fc.stop === null)
    return `flips stop: too few flips to say (${int(fc.flips.reduce((a, b) => a + b, 0))}, at least ${MIN_FLIPS_FOR_STOP} needed)`;
  const at = `flips stop at a gap of about ${formatNats(fc.stop.gap)} nats (95% of ${int(fc.stop.flips)} flips below it)`;
  if (fc.stop.gap < gapAmbiguous) return `${at}: only near-ties flip — the pattern of float noise`;
  return `${at}: a systematic shift of size s flips the tokens whose gap is below about s, so this is a second estimate of the offset, independent of the logprobs (median position shift ${quantiles(
    positionShift,
    [['', 0.5]],
  )
    .replace(/^ /, '')
    .replace(/ {2}max .*$/, '')})`;
}

function describeFlip(s: Strip): string {
  const f = s.flip;
  if (!f) return 'no flip';
  return `flip@${f.index} ${JSON.stringify(f.baselineToken)}→${JSON.stringify(f.candidateToken)} gap ${f.gap === null ? '?' : `${f.lowerBound ? '≥ ' : ''}${formatNats(f.gap)}`} (${f.class})`;
}

/** A pair's figures, each set of positions named: free-running, and teacher-forced when scored (the verdict's). */
export function stripFigures(s: Pick<Strip, 'maxShift' | 'shifted' | 'comparable' | 'forced'>): string {
  const free = `free-running max shift ${formatNats(s.maxShift)} shifted ${s.shifted}/${s.comparable}`;
  return s.forced
    ? `${free}; teacher-forced max shift ${formatNats(s.forced.maxShift)} shifted ${s.forced.shifted}/${s.forced.comparable}`
    : free;
}

/** The worst pairs worth reading: a shift, a tokenizer mismatch or a systematic flip (ten noise pairs say nothing). */
export function notableWorst(d: SummaryData, top: number): Strip[] {
  return d.worst.filter((s) => NOTABLE.has(s.verdict) || s.flip?.class === 'systematic').slice(0, top);
}

const NOTABLE = new Set<string>([
  'global_shift',
  'early_shift',
  'local_shift',
  'prompt_mismatch',
  'tokenizer_mismatch',
]);

/** The human-readable report of `analyze` and `replay`: verdict mix, shift distribution, flips, alerts, worst pairs. */
export function renderSummaryText(d: SummaryData, ctx: ReportContext): string {
  const out = headerLines(d, ctx);
  // Baseline-free: no pair was compared, the repeats below are the report.
  if (!(d.compared === 0 && d.baselineFree > 0)) out.push(...verdictLines(d), ...shiftLines(d), ...flipLines(d, ctx));
  out.push(...modelLines(d), ...cacheLines(d));
  out.push(...flipCurveLines(d, ctx), ...scoringLines(d), ...repeatLines(d), ...pathLines(d));
  out.push(...alertLines(d), ...canaryLines(d), ...worstLines(d, ctx));
  // Baseline-free, health (KL, relative error) has no second backend to measure: said, not a block of n/a.
  if (ctx.health && d.compared === 0 && d.baselineFree > 0)
    out.push(
      '',
      'health: not measured — KL and relative error compare the candidate with a baseline, and these pairs have none (the repeats above compare the candidate with itself)',
    );
  else if (ctx.health) out.push('', ...healthLines(ctx.health));
  if (d.skipped > 0) out.push('', `skipped lines: ${int(d.skipped)} (reported on stderr)`);
  out.push('', `note: ${ABSENCE_NOTE}`);
  return `${out.join('\n')}\n`;
}

/** Canary pairs, counted apart: per model, the rounds and the verdicts of their probes. */
function canaryLines(d: SummaryData): string[] {
  if (d.canaries.length === 0) return [];
  const out = ['', "canaries (logprobe's own probes, judged online per round; not in the figures above)"];
  for (const c of d.canaries) {
    const verdicts = VERDICT_ORDER.filter((v) => (c.verdicts[v] ?? 0) > 0)
      .map((v) => `${v} ${int(c.verdicts[v] ?? 0)}`)
      .join(', ');
    out.push(`  model ${c.model}: ${int(c.pairs)} probes in ${int(c.rounds)} rounds${verdicts ? `: ${verdicts}` : ''}`);
  }
  return out;
}

/** What was read and compared, why the rest was not, the thresholds. */
function headerLines(d: SummaryData, ctx: ReportContext): string[] {
  const out: string[] = [];
  const unc = Object.entries(d.uncompared).filter(([, n]) => (n ?? 0) > 0);
  out.push(
    `pairs ${int(d.pairs)}, compared ${int(d.compared)}${unc.length ? `; not compared: ${unc.map(([k, n]) => `${k} ${int(n ?? 0)}`).join(', ')}` : ''}`,
  );
  // Baseline-free, no pair is compared with a baseline: the repeat pairs are the comparison, said with their own figures.
  if (d.baselineFree > 0)
    for (const r of d.repeats) {
      const compared = r.verdicts.identical + r.verdicts.noise + r.verdicts.self_inconsistent;
      out.push(
        `  baseline-free: ${int(r.pairs)} repeat pairs on the ${r.backend} (cold, then warm), ${int(compared)} compared, ${int(r.verdicts.self_inconsistent)} self_inconsistent; self shift max ${r.positionShift.max === null ? '—' : formatNats(r.positionShift.max)}; ${selfDetectorText(r, d)}`,
      );
    }
  // Why they were not compared: the causes are in the capture's records, and said here.
  for (const [k] of unc)
    for (const r of d.uncomparedReasons[k as keyof SummaryData['uncomparedReasons']] ?? [])
      out.push(`  ${k}: ${r.reason} (${int(r.count)})`);
  out.push(`thresholds: ${ctx.thresholds}`);
  return out;
}

/** The verdict mix over the compared pairs, and how many differ from the online verdicts. */
function verdictLines(d: SummaryData): string[] {
  const out: string[] = [];
  out.push('', 'verdicts');
  const vmax = Math.max(0, ...Object.values(d.verdicts));
  for (const v of VERDICT_ORDER) {
    const n = d.verdicts[v];
    out.push(`  ${v.padEnd(19)}${int(n).padStart(9)}  ${pct(n, d.compared).padStart(6)}  ${bar(n, vmax)}`);
  }
  if (d.changed !== null)
    out.push(`  ${int(d.changed)} of ${int(d.pairs)} verdicts differ from the ones captured online`);
  return out;
}

/**
 * A label and its count in `width` columns, the count's last digit in the last column: a label
 * too long for its share (a decade such as `(0.0001, 0.001]`) takes room from the count's padding
 * and keeps the column straight, with at least one space between them.
 */
export function countCell(label: string, count: string, width: number): string {
  return `${label} ${count.padStart(Math.max(0, width - label.length - 1))}`;
}

/** The free-running position shift by decade, its quantiles, and each pair's largest. */
function shiftLines(d: SummaryData): string[] {
  const out: string[] = [];
  const ps = coarsen(d.positionShift, SHIFT_DECADES);
  out.push(
    '',
    `position shift, nats (${int(d.positionShift.n)} comparable free-running positions; noise floor ${d.noiseFloors.map((f) => formatNats(f)).join(', ') || '—'}${d.moreFloors ? ', …' : ''})`,
  );
  const smax = Math.max(0, ...ps.counts);
  ps.counts.forEach((n, i) => out.push(`  ${countCell(decadeLabel(ps.edges, i), int(n), 24)}  ${bar(n, smax)}`));
  out.push(
    `  ${quantiles(d.positionShift, [
      ['p50', 0.5],
      ['p90', 0.9],
      ['p99', 0.99],
    ])}`,
  );
  out.push(
    `per-pair free-running max shift: ${quantiles(d.pairMaxShift, [
      ['p50', 0.5],
      ['p90', 0.9],
    ])}`,
  );
  return out;
}

/** The first divergences by the class of their gap. */
function flipLines(d: SummaryData, ctx: ReportContext): string[] {
  const out: string[] = [];
  const flips = FLIP_CLASSES.reduce((s, c) => s + d.flips[c].n, 0);
  out.push('', `flips: ${int(flips)} pairs diverged (gap = lp_b(A) − lp_b(B), the force a flip needs)`);
  const bounds: Record<string, string> = {
    ambiguous: `gap < ${ctx.gapAmbiguous}`,
    gray: `${ctx.gapAmbiguous}–${ctx.gapSystematic}`,
    systematic: `gap > ${ctx.gapSystematic}`,
  };
  for (const c of FLIP_CLASSES) {
    const h = d.flips[c];
    out.push(
      `  ${c.padEnd(11)} ${`(${bounds[c]})`.padEnd(14)}${int(h.n).padStart(8)}  ${h.n > 0 ? `median ${quantiles(h, [['', 0.5]]).replace(/^ /, '')}` : ''}`.trimEnd(),
    );
  }
  if (d.flips.lowerBound > 0)
    out.push(
      `  ${d.flips.lowerBound === 1 ? '1 gap is a lower bound' : `${int(d.flips.lowerBound)} gaps are lower bounds`} (the candidate's token outside the baseline's top-k)`,
    );
  return out;
}

/** Teacher-forced scoring past the divergence, the prompt's positions, the locus. */
function scoringLines(d: SummaryData): string[] {
  const out: string[] = [];
  const sc = d.scoring;
  const scoredPairs = sc.outcomes.ok + sc.outcomes.unsupported + sc.outcomes.skipped + sc.outcomes.failed;
  if (scoredPairs > 0) {
    out.push(
      '',
      `scoring past the divergence: ${int(sc.outcomes.ok)} of ${int(scoredPairs)} pairs scored${sc.methods.length ? ` (${sc.methods.join('; ')})` : ''}; unsupported ${int(sc.outcomes.unsupported)}, skipped ${int(sc.outcomes.skipped)}, failed ${int(sc.outcomes.failed)}`,
    );
    for (const r of sc.reasons) out.push(`  ${int(r.count)}× ${r.reason}`);
    if (sc.positionShift.n > 0)
      out.push(
        `  teacher-forced position shift (${int(sc.positionShift.n)} positions): ${quantiles(sc.positionShift, [
          ['p50', 0.5],
          ['p90', 0.9],
          ['p99', 0.99],
        ])}`,
      );
  }
  if (sc.prompt.pairs > 0) {
    out.push(
      `prompt positions: ${int(sc.prompt.pairs)} pairs compared, ${int(sc.prompt.shifted)} with a shifted prompt position; ${quantiles(
        sc.prompt.positionShift,
        [
          ['p50', 0.5],
          ['p99', 0.99],
        ],
      )}`,
    );
  }
  const loci = (['compute', 'decode_state', 'unknown'] as const).filter((l) => sc.loci[l] > 0);
  if (loci.length > 0)
    out.push(
      `locus: ${loci.map((l) => `${l} ${int(sc.loci[l])}`).join(', ')} (compute: the prompt already moved; decode_state: the prompt agrees, the continuation moved)`,
    );
  return out;
}

/** The self detector's figures after the last pair: its window's pooled share (and what fires it) and CUSUM. */
function selfDetectorText(r: SummaryData['repeats'][number], d: SummaryData): string {
  const cfg = d.alertConfig;
  const fires = cfg ? ` (fires at ≥ ${cfg.fireFraction} over ≥ ${cfg.minRequests})` : '';
  return `self detector: window share ${r.detector.share.toFixed(2)} over the last ${int(r.detector.requests)} cold→warm pair${r.detector.requests === 1 ? '' : 's'}${fires}, CUSUM ${r.detector.cusum.toFixed(1)}`;
}

/** The repeat probes of each backend (cold, then warm), and the baseline-free note. */
function repeatLines(d: SummaryData): string[] {
  const out: string[] = [];
  if (d.baselineFree > 0)
    out.push('', `baseline-free: ${int(d.baselineFree)} pairs had no baseline; their repeats below are the comparison`);
  for (const r of d.repeats) {
    const mix =
      SELF_VERDICTS.filter((v) => r.verdicts[v] > 0)
        .map((v) => `${v} ${int(r.verdicts[v])}`)
        .join(', ') || 'none compared';
    out.push(
      '',
      `repeats on the ${r.backend} (the same request twice: cold, then warm from its cache): ${int(r.pairs)} pairs, ${int(r.flushed)} with the cache emptied first${r.notCold > 0 ? `, ${int(r.notCold)} whose first run already reused a cached prefix (warm↔warm)` : ''}${r.notWarm > 0 ? `, ${int(r.notWarm)} whose second run found its prefix evicted (cold↔cold)` : ''}${r.unprobed > 0 ? `, ${int(r.unprobed)} unprobed (the engine reported no cache hits and no flush was confirmed: nothing says either run touched the cache)` : ''}${r.notCold + r.notWarm + r.unprobed > 0 ? ' — the alert counts only cold→warm pairs' : ''}; ${mix}`,
    );
    if (r.positionShift.n > 0)
      out.push(
        `  shift between the runs (${int(r.positionShift.n)} positions): ${quantiles(r.positionShift, [
          ['p50', 0.5],
          ['p90', 0.9],
          ['p99', 0.99],
        ])}`,
      );
    if (d.alertConfig && r.detector.requests > 0) out.push(`  ${selfDetectorText(r, d)}`);
    if (r.verdicts.self_inconsistent > 0)
      out.push(
        `  self_inconsistent: the ${r.backend} disagrees with itself between a cold and a warm run: suspect the cache path — compare the state where it is written, in the medium and where it is read back`,
      );
  }
  return out;
}

/** A verdict mix in a few words: the verdicts present, most alarming first (`none` when empty). */
function mix(verdicts: Readonly<Record<string, number>>, order: readonly string[]): string {
  return (
    order
      .filter((v) => (verdicts[v] ?? 0) > 0)
      .map((v) => `${v} ${int(verdicts[v]!)}`)
      .join(', ') || 'none'
  );
}

/** Pairs of a model with a shift verdict. */
function shiftedOf(m: ModelFigures): number {
  return SHIFT_VERDICTS.reduce((n, v) => n + m.verdicts[v], 0);
}

/** Each model's own figures, one row each: only when the input had more than one model (one model's are the report itself). */
function modelLines(d: SummaryData): string[] {
  if (d.models.length < 2) return [];
  const withPaths = d.paths.length > 0;
  const out = [
    '',
    `by model (${d.models.length} models, each with its own detectors as online; window share, CUSUM and permutation p-value after the last pair)`,
    `  ${'model'.padEnd(20)} ${'compared'.padStart(8)} ${'shifted'.padStart(8)} ${'prompt_mismatch'.padStart(15)}${withPaths ? ` ${'path_inconsistent'.padStart(17)}` : ''}  ${'window'.padStart(6)} ${'CUSUM'.padStart(6)} ${'p-value'.padStart(7)}  alerts`,
  ];
  for (const m of d.models) {
    const det = m.detector;
    const path = d.paths.reduce(
      (n, p) => n + (p.models.find((x) => x.model === m.model)?.verdicts.path_inconsistent ?? 0),
      0,
    );
    const alerts = d.alerts
      .filter((a) => a.model === m.model)
      .map((a) => `${a.alert}${a.backend ? ` (${a.backend})` : ''} at pair ${int(a.atPair)}`);
    out.push(
      `  ${m.model.padEnd(20)} ${int(m.compared).padStart(8)} ${int(shiftedOf(m)).padStart(8)} ${int(m.verdicts.prompt_mismatch).padStart(15)}${withPaths ? ` ${int(path).padStart(17)}` : ''}  ${(det ? det.share.toFixed(2) : '—').padStart(6)} ${(det ? det.cusum.toFixed(1) : '—').padStart(6)} ${(det ? det.pValue.toFixed(3) : '—').padStart(7)}  ${alerts.join('; ') || '—'}`.trimEnd(),
    );
  }
  return out;
}

/** The sentence of a model whose shifts concentrate on cache hits (the rule: src/report/slices.ts CACHE_RULE, docs/detection.md). */
export function cacheSentence(m: ModelFigures): string {
  const { hit, miss } = m.cache;
  return `model ${m.model}: shifted on ${int(hit.shifted)} of ${int(hit.compared)} cache hits, ${int(miss.shifted)} of ${int(miss.compared)} misses: suspect the cache path (prefix cache / KV reuse)`;
}

/** The rule in words, for the reports. */
export function cacheRuleText(d: Pick<SummaryData, 'cacheRule'>): string {
  const r = d.cacheRule;
  return `at least ${r.minPairs} hits and ${r.minPairs} misses compared, the hits' shifted share at least ${r.minShare} and at least ${r.ratio}× the misses'`;
}

/** The pair verdicts by whether the candidate's copy read from its prefix cache, per model; the sentence where shifts concentrate on hits. */
function cacheLines(d: SummaryData): string[] {
  const known = d.models.filter((m) => m.cache.hit.compared + m.cache.miss.compared > 0);
  if (known.length === 0) return [];
  const out = [
    '',
    "cache split (whether the candidate's copy read part of its prompt from its prefix cache, as its engine reported): pairs compared (not incomparable, not prompt_mismatch), shifted, verdicts",
  ];
  for (const m of known)
    for (const c of CACHE_SPLITS) {
      const cell = m.cache[c];
      if (cell.compared === 0 && c === 'unknown') continue;
      out.push(
        `  ${d.models.length > 1 ? `${m.model.padEnd(20)} ` : ''}${c.padEnd(7)} ${int(cell.compared).padStart(7)} compared ${int(cell.shifted).padStart(7)} shifted  (${mix(cell.verdicts, VERDICT_ORDER)})`,
      );
    }
  const suspects = d.models.filter((m) => m.cacheSuspect);
  for (const m of suspects) out.push(`  ${cacheSentence(m)}`);
  if (suspects.length === 0 && known.some((m) => m.cache.hit.shifted + m.cache.miss.shifted > 0))
    out.push(`  the shifts do not concentrate on cache hits (${cacheRuleText(d)})`);
  return out;
}

/** Each backend's path checks: decode-time logprobs against its own prefill of the same tokens. */
function pathLines(d: SummaryData): string[] {
  const out: string[] = [];
  for (const p of d.paths) {
    const checked = p.outcomes.ok;
    const all = checked + p.outcomes.unsupported + p.outcomes.skipped + p.outcomes.failed;
    out.push(
      '',
      `path check on the ${p.backend} (its decode-time logprobs against its own prefill of the same tokens): ${int(checked)} of ${int(all)} checked (unsupported ${int(p.outcomes.unsupported)}, skipped ${int(p.outcomes.skipped)}, failed ${int(p.outcomes.failed)}); ${mix(p.verdicts, [...PATH_VERDICTS].reverse())}`,
    );
    if (p.pairMaxShift.n > 0)
      out.push(
        `  per-pair path max shift: ${quantiles(p.pairMaxShift, [
          ['p50', 0.5],
          ['p90', 0.9],
        ])}`,
      );
    const bad = p.models.filter((m) => m.verdicts.path_inconsistent > 0);
    if (d.models.length > 1 && bad.length > 0)
      out.push(
        `  path_inconsistent by model: ${bad.map((m) => `${m.model} ${int(m.verdicts.path_inconsistent)} of ${int(PATH_VERDICTS.reduce((n, v) => n + m.verdicts[v], 0))}`).join(', ')}`,
      );
    if (p.verdicts.path_inconsistent > 0)
      out.push(
        `  path_inconsistent: the ${p.backend}'s decode path and its prefill disagree on the same tokens: suspect speculative/MTP decoding, prompt logprobs computed another way (an adapter's head), stale prefill buffers or decode-only kernels (docs/detection.md "Decode vs prefill")`,
      );
  }
  return out;
}

/** What a backend alert's pooled share is over. */
const ALERT_OVER: Partial<Record<string, string>> = {
  LogprobSelfInconsistency: ' of the cold→warm repeat pairs',
  LogprobPathInconsistency: ' of the path pairs',
};

/**
 * An alert as the mirror's log line names it: `LogprobGlobalShift (model a3)`,
 * `LogprobPathInconsistency (candidate, model a3)`; the model only when the input had more than one.
 */
export function alertName(a: SummaryData['alerts'][number], d: Pick<SummaryData, 'models'>): string {
  const parts = [...(a.backend ? [a.backend] : []), ...(d.models.length > 1 ? [`model ${a.model}`] : [])];
  return parts.length > 0 ? `${a.alert} (${parts.join(', ')})` : a.alert;
}

/** What the detectors would have raised over the pairs in input order. */
function alertLines(d: SummaryData): string[] {
  const out: string[] = [];
  const cfg = d.alertConfig;
  if (d.alerts.length > 0 && cfg) {
    // How the offline run relates to the online one: the same pairs in the same order, the same
    // floors; the alert section is this run's (--config), which need not be the one serve ran with.
    const timing =
      cfg.forSeconds > 0
        ? `for ${cfg.forSeconds} s over the pairs' capture times (the mirror's ticker runs once a second: online it may fire a pair or so apart)`
        : 'for 0 s';
    out.push(
      '',
      `offline detectors (${d.models.length > 1 ? "each model's own, as online; " : ''}the pairs in capture order, each with the noise floor it was judged with above — the one in force online unless --config or --noise-floor replaced it; alert window ${cfg.window}, min ${cfg.minRequests}, fraction ${cfg.fireFraction}, ${timing} — the alert section of --config or the defaults: give serve's own to match its alerts):`,
    );
    for (const a of d.alerts)
      out.push(
        `  ${alertName(a, d)} would fire at pair ${int(a.atPair)}, id ${a.id} (${a.where}) (pooled share ${a.pooledShare.toFixed(2)}${ALERT_OVER[a.alert] ?? `, CUSUM ${a.cusum.toFixed(1)}`})`,
      );
  }
  return out;
}

/** The worst notable pairs with their explanation (or the largest shift when none is notable). */
function worstLines(d: SummaryData, ctx: ReportContext): string[] {
  const out: string[] = [];
  const top = notableWorst(d, ctx.top ?? 10);
  if (top.length > 0) {
    out.push('', 'worst pairs');
    top.forEach((s, i) => {
      out.push(
        `  ${i + 1}. ${s.at}  ${s.id}  ${s.route}  ${s.verdict}  ${stripFigures(s)}  ${describeFlip(s)}${s.similar ? `  (×${s.similar + 1} with this prompt and verdict)` : ''}`,
      );
      out.push(`     ${s.explanation}`);
    });
  } else if (d.worst[0] && (ctx.top ?? 10) > 0) {
    const s = d.worst[0];
    out.push(
      '',
      `worst pairs: none with a shift, a tokenizer mismatch or a systematic flip (largest free-running max shift ${formatNats(s.maxShift)}, ${s.at})`,
    );
  }
  return out;
}

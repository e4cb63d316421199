/**
 * `npm run bench:detect -- --arl`: the alerts' run lengths, measured. The simulated
 * engines of packages/engine run in this process, with their noise calibrated to what llama.cpp
 * numerics give here (docs/detection.md's table: flash attention, f16 weights, batch 8); every
 * pair goes through the code `serve` runs on it — parseResponse, compare, detectorEvidence, the
 * detectors of src/core/detector.ts and src/core/self.ts, the permutation test of
 * src/core/permutation.ts and the calibration of src/mirror/calibration.ts — without HTTP, so
 * 20,000 pairs take seconds, not hours. Free-running comparison only (no teacher-forced scoring:
 * it needs a second HTTP call per pair). The in-control count (300,000 pairs per class for an
 * ARL0 bound of 100,000) runs on `--jobs` worker processes (bench/arl-worker.ts), each class's
 * pairs cut into one run of consecutive prompts per process.
 */
import { writeFile, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { createSimModel, type SimOptions } from '@logprobe/engine';
import type { EngineModel } from '@logprobe/engine';
import { buildConfig } from '../src/config/load.js';
import type { ConfigInput } from '../src/config/schema.js';
import { compare, detectorEvidence, parseResponse, pickThresholds } from '../src/core/index.js';
import { initialDetectorState, observe, type AlertConfig, type DetectorState } from '../src/core/detector.js';
import { observeSelf, selfEvidence } from '../src/core/self.js';
import { PermutationWindow } from '../src/core/permutation.js';
import { mulberry32 } from '../src/core/random.js';
import { Calibration } from '../src/mirror/calibration.js';

const TOP = 5;

export interface ArlOptions {
  /** In-control pairs per noise class at the config under test. */
  pairs: number;
  /** In-control pairs per noise class at its `noiseFloor: auto` variant (0: none). */
  autoPairs: number;
  /** Worker processes for the in-control count (one per core). */
  jobs: number;
  maxTokens: number;
  seed: number;
  /** Out-of-control runs per case (median and p95 over them). */
  runs: number;
  /** Give up on a run after this many pairs. */
  cap: number;
  alpha: number;
  /** In control, the candidate's repeat (cold → warm) on every this many pairs (the self alert's in-control sample). */
  repeatEvery: number;
  write: boolean;
  /** The config under test (the defaults unless given). */
  config: ConfigInput;
}

/** One engine side: a simulated model and how a request is run on it. */
interface Side {
  model: EngineModel;
  coResident?: number;
  cache?: boolean;
}

/** A greedy completion on one side, as the legacy completions body the mirror parses. */
async function greedy(
  side: Side,
  prompt: readonly number[],
  requestSeed: number,
  maxTokens: number,
  cache?: boolean,
): Promise<unknown> {
  const useCache = cache ?? side.cache ?? false;
  const seq = await side.model.start(prompt, {
    requestSeed,
    addBos: false,
    cache: { read: useCache, write: useCache },
    ...(side.coResident ? { coResident: () => side.coResident! } : {}),
  });
  const tokens: string[] = [];
  const lps: number[] = [];
  const tops: Array<Record<string, number>> = [];
  for (let i = 0; i < maxTokens; i++) {
    const d = await seq.next();
    const id = d.ids[0] as number;
    if (id === side.model.eosToken) break;
    tokens.push(`${id}`);
    lps.push(d.logprobs[0] as number);
    const top: Record<string, number> = {};
    for (let j = 0; j < TOP && j < d.ids.length; j++) top[`${d.ids[j] as number}`] = d.logprobs[j] as number;
    tops.push(top);
    await seq.push(id);
  }
  await seq.dispose();
  return {
    object: 'text_completion',
    choices: [
      {
        index: 0,
        text: tokens.join(' '),
        finish_reason: 'length',
        logprobs: { tokens, token_logprobs: lps, top_logprobs: tops },
      },
    ],
  };
}

/** A distinct prompt per request (no two pairs share a context). */
function promptOf(model: EngineModel, i: number): number[] {
  return model.tokenize(`Request ${i}: tell me about the number ${(i * 7919) % 100003} and its neighbours`);
}

function quantile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] as number;
}

/** The per-position shifts of `pairs` pairs between two sides (for calibration). */
async function shiftsOf(cand: Side, base: Side, pairs: number, maxTokens: number, from: number): Promise<number[]> {
  const out: number[] = [];
  const t = pickThresholds(buildConfig({}).analysis, 0.1);
  for (let i = 0; i < pairs; i++) {
    const p = promptOf(base.model, from + i);
    const c = compare(
      parseResponse(await greedy(cand, p, 1_000_003 + i, maxTokens)),
      parseResponse(await greedy(base, p, 2_000_003 + i, maxTokens)),
      t,
    );
    for (const r of c.positions) if (r.shift !== null) out.push(r.shift);
  }
  return out;
}

/**
 * The knob value whose statistic (a quantile of the per-position shifts) is `target`: the shift
 * is close to linear in a small knob, so two passes of scaling suffice.
 */
async function calibrate(
  make: (v: number) => Side,
  base: Side,
  stat: (s: number[]) => number,
  target: number,
  maxTokens: number,
): Promise<number> {
  let v = 1e-3;
  for (let pass = 0; pass < 3; pass++) {
    const got = stat(await shiftsOf(make(v), base, 120, maxTokens, 900_000 + pass * 1000));
    if (!(got > 0)) {
      v *= 10;
      continue;
    }
    v *= target / got;
  }
  return v;
}

/** What a detector run counts. */
type AlertKey = 'window' | 'cusum' | 'self' | 'permutation';
const ALERTS: AlertKey[] = ['window', 'cusum', 'self', 'permutation'];

interface Feed {
  cfg: ReturnType<typeof buildConfig>;
  /** Mirrored share of client requests (forSeconds runs on the clock of one client request a second). */
  sampleRate: number;
  auto: boolean;
}

/** The detectors' state over a run of {@link feed}. */
interface FeedState {
  alert: AlertConfig;
  det: DetectorState;
  self: DetectorState;
  perm: PermutationWindow;
  permFiring: boolean;
}

/** How {@link feed} runs: the prompts' seeds and length, the repeats, the test level and when to stop. */
interface FeedOptions {
  seed: number;
  maxTokens: number;
  repeat: boolean;
  repeatEvery?: number;
  alpha: number;
  stop: (n: number, fired: Set<AlertKey>) => boolean;
  from: number;
  /** The sampler's and the calibration's draws (default `seed`): one per chunk of a class. */
  rndSeed?: number;
  /** Takes the largest CUSUM statistic S the run reached (how close it came to h). */
  peak?: { peakS: number };
}

/** A compared pair into the window and CUSUM detector and the permutation test; what starts firing goes to `fired`. */
function observePair(
  st: FeedState,
  c: ReturnType<typeof compare>,
  floor: number,
  i: number,
  now: number,
  opts: FeedOptions,
  fired: Set<AlertKey>,
): void {
  const r = observe(st.det, { ...detectorEvidence(c), noiseFloor: floor, requestId: String(i) }, st.alert, now);
  st.det = r.state;
  if (opts.peak && st.det.cusum > opts.peak.peakS) opts.peak.peakS = st.det.cusum;
  for (const tr of r.transitions)
    if (tr.to === 'firing') fired.add(tr.alert === 'LogprobGlobalShift' ? 'window' : 'cusum');
  st.perm.add(c);
  const p = st.perm.pValue();
  if (p <= 0 || p > 1) throw new Error(`p-value ${p}`);
  const below = p <= opts.alpha;
  if (below && !st.permFiring) fired.add('permutation');
  st.permFiring = below;
}

/** The candidate's repeat of the prompt into the self detector: whether it started firing. */
async function repeatFires(
  st: FeedState,
  r: {
    cand: Side;
    prompt: number[];
    cBody: Awaited<ReturnType<typeof greedy>>;
    t: ReturnType<typeof pickThresholds>;
    floor: number;
    i: number;
    now: number;
  },
  opts: FeedOptions,
): Promise<boolean> {
  const { cand, prompt, cBody, t, floor, i, now } = r;
  const second = await greedy(cand, prompt, opts.seed * 7 + i * 2 + 1_000_000, opts.maxTokens, true);
  const first = cand.cache ? cBody : await greedy(cand, prompt, opts.seed * 7 + i * 2, opts.maxTokens, true);
  const rc = compare(parseResponse(second), parseResponse(cand.cache ? cBody : first), t);
  if (rc.verdict === 'incomparable' || rc.comparable === 0) return false;
  const o = observeSelf(
    st.self,
    { ...selfEvidence(rc), noiseFloor: floor, requestId: String(i) },
    st.alert,
    now,
    'candidate',
  );
  st.self = o.state;
  return o.transitions.some((tr) => tr.to === 'firing');
}

/**
 * Runs pairs through the detectors as the mirror does. `onPair` gets each pair's fires; returns
 * when `stop` says so. The clock advances one second per client request; at sampleRate r a pair
 * comes every 1/r requests on average (drawn from a seeded generator, as the sampler draws).
 */
async function feed(
  f: Feed,
  cand: Side,
  base: Side,
  opts: FeedOptions,
): Promise<{ pairs: number; requests: number; floor: number }> {
  const cfg = f.cfg;
  const alert: AlertConfig = cfg.alert;
  const st: FeedState = {
    alert,
    det: initialDetectorState(),
    self: initialDetectorState(),
    perm: new PermutationWindow({ window: alert.window, ...cfg.alert.permutation }),
    permFiring: false,
  };
  const cal = new Calibration(cfg.calibration);
  const rnd = mulberry32(opts.rndSeed ?? opts.seed);
  let now = 0;
  let requests = 0;
  for (let n = 1; ; n++) {
    // The client requests until the sampler picks one.
    do {
      requests++;
      now += 1;
    } while (f.sampleRate < 1 && rnd() >= f.sampleRate);
    const floor = f.auto
      ? cal.autoFloor()
      : cfg.analysis.noiseFloor === 'auto' || cfg.analysis.noiseFloor === 'exact'
        ? 0.1
        : cfg.analysis.noiseFloor;
    const t = pickThresholds(cfg.analysis, floor);
    const i = opts.from + n;
    const prompt = promptOf(base.model, i);
    const cBody = await greedy(cand, prompt, opts.seed * 7 + i * 2, opts.maxTokens);
    const bBody = await greedy(base, prompt, opts.seed * 7 + i * 2 + 1, opts.maxTokens);
    const c = compare(parseResponse(cBody), parseResponse(bBody), t);
    const fired = new Set<AlertKey>();
    if (c.verdict !== 'incomparable' && c.comparable > 0) observePair(st, c, floor, i, now, opts, fired);
    // The candidate's repeat (cold → warm: the same prompt again right after, its prefix cached).
    if (opts.repeat && n % (opts.repeatEvery ?? 1) === 0) {
      const r = { cand, prompt, cBody, t, floor, i, now };
      if (await repeatFires(st, r, opts)) fired.add('self');
    }
    // The floor learns from the baseline's repeats (calibration.rate of the pairs).
    if (f.auto && rnd() < cfg.calibration.rate) {
      const again = await greedy(base, prompt, opts.seed * 7 + i * 2 + 2_000_000, opts.maxTokens);
      const rc = compare(parseResponse(again), parseResponse(bBody), t);
      if (rc.verdict !== 'incomparable')
        cal.add(
          'baseline',
          rc.positions.map((p) => p.shift).filter((s): s is number => s !== null),
          { trusted: true },
        );
    }
    if (opts.stop(n, fired)) return { pairs: n, requests, floor };
  }
}

/** The sim's knobs, scaled to llama.cpp at the start of a run (the same in every worker process). */
export interface Calibrated {
  sFa: number;
  sF16: number;
  sBatch: number;
  perNat: number;
  localPerNat: number;
}

/** The noise-only classes: the candidate's knobs against a clean baseline, calibrated to llama.cpp. */
export const NOISE_CLASSES = [
  'clean twins',
  'flash attention',
  'f16 weights',
  'batch 8 vs 1',
  'prefix cache on vs off',
] as const;
export type NoiseClassName = (typeof NOISE_CLASSES)[number];

function noiseSide(name: NoiseClassName, cal: Calibrated, sim: (o: SimOptions) => EngineModel): Side {
  switch (name) {
    case 'clean twins':
      return { model: sim({}) };
    case 'flash attention':
      return { model: sim({ noise: cal.sFa }) };
    case 'f16 weights':
      return { model: sim({ noise: cal.sF16 }) };
    case 'batch 8 vs 1':
      return { model: sim({ batchNoise: cal.sBatch }), coResident: 8 };
    case 'prefix cache on vs off':
      return { model: sim({ cacheSlots: 1 }), cache: true };
  }
}

/**
 * The config of the "auto" rows: `noiseFloor: auto`, a quarter of the pairs repeated on the
 * baseline, and `calibration.minFloor` 0.04 unless the config under test sets one (on
 * deterministic numerics the repeats agree bit for bit, so the floor is minFloor).
 */
function autoConfig(c: ConfigInput): ConfigInput {
  return {
    ...c,
    analysis: { ...(c.analysis ?? {}), noiseFloor: 'auto' },
    calibration: { ...(c.calibration ?? {}), rate: 0.25, minFloor: c.calibration?.minFloor ?? 0.04 },
  };
}

/** The config as the bench runs it: free-running comparison only (no teacher-forced scoring call). */
function freeRunning(c: ConfigInput): ReturnType<typeof buildConfig> {
  return buildConfig({ ...c, analysis: { ...(c.analysis ?? {}), scoring: { when: 'never' } } });
}

/** One piece of an in-control count: `pairs` pairs of one class from prompt `from` on. */
export interface InControlJob {
  className: NoiseClassName;
  auto: boolean;
  cal: Calibrated;
  seed: number;
  maxTokens: number;
  alpha: number;
  repeatEvery: number;
  config: ConfigInput;
  from: number;
  pairs: number;
  chunk: number;
}

/** Fires per alert, and the largest CUSUM statistic S reached (its headroom below h). */
export type Counts = Record<AlertKey, number> & { peakS: number };

/** Runs one in-control chunk: the alerts' fires over its pairs, each chunk from a fresh detector state. */
export async function runInControlChunk(job: InControlJob): Promise<Counts> {
  const sim = (x: SimOptions): EngineModel => createSimModel({ seed: job.seed, ...x });
  const base: Side = { model: sim({}) };
  const cand = noiseSide(job.className, job.cal, sim);
  const counts: Counts = { window: 0, cusum: 0, self: 0, permutation: 0, peakS: 0 };
  const cfg = freeRunning(job.auto ? autoConfig(job.config) : job.config);
  await feed({ cfg, sampleRate: 1, auto: job.auto }, cand, base, {
    seed: job.seed,
    rndSeed: job.seed + 7919 * job.chunk,
    maxTokens: job.maxTokens,
    alpha: job.alpha,
    repeat: true,
    repeatEvery: job.repeatEvery,
    from: job.from,
    peak: counts,
    stop: (n, fired) => {
      for (const k of fired) counts[k]++;
      return n >= job.pairs;
    },
  });
  return counts;
}

/**
 * A class's `pairs` cut into `parts` runs of consecutive prompts (the first gets the remainder),
 * so that `parts` processes share the count evenly. Distinct prompts and request seeds throughout.
 */
export function chunksOf(pairs: number, parts: number): Array<{ from: number; pairs: number }> {
  const n = Math.max(1, Math.min(parts, pairs));
  const size = Math.floor(pairs / n);
  const out: Array<{ from: number; pairs: number }> = [];
  let from = 0;
  for (let c = 0; c < n; c++) {
    const p = c === 0 ? pairs - size * (n - 1) : size;
    out.push({ from, pairs: p });
    from += p;
  }
  return out;
}

/**
 * Runs the jobs on `jobs` worker processes (bench/arl-worker.ts, each its own core), or in this
 * process when `jobs` is 1. Returns the counts in the order of the jobs.
 */
export async function runJobs(list: InControlJob[], jobs: number, log: (s: string) => void): Promise<Counts[]> {
  const started = performance.now();
  const out: Counts[] = new Array(list.length);
  const done = (i: number, c: Counts): void => {
    out[i] = c;
    const j = list[i]!;
    log(
      `  ${j.className}${j.auto ? ' (auto)' : ''} pairs ${j.from}–${j.from + j.pairs - 1}: ${JSON.stringify(c)} ${((performance.now() - started) / 1000).toFixed(0)} s`,
    );
  };
  if (jobs <= 1) {
    for (let i = 0; i < list.length; i++) done(i, await runInControlChunk(list[i]!));
    return out;
  }
  const { fork } = await import('node:child_process');
  const script = fileURLToPath(new URL('./arl-worker.ts', import.meta.url));
  let next = 0;
  const worker = async (): Promise<void> => {
    const child = fork(script, [], { execArgv: process.execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    try {
      while (next < list.length) {
        const i = next++;
        const reply = new Promise<Counts>((resolve, reject) => {
          const onExit = (code: number | null): void => reject(new Error(`arl worker exited (${code}) on job ${i}`));
          child.once('exit', onExit);
          child.once('message', (m) => {
            child.off('exit', onExit);
            const r = m as { counts?: Counts; error?: string };
            if (r.error !== undefined) reject(new Error(r.error));
            else resolve(r.counts!);
          });
        });
        child.send(list[i]!);
        done(i, await reply);
      }
    } finally {
      if (child.connected) child.disconnect();
    }
  };
  await Promise.all(Array.from({ length: Math.min(jobs, list.length) }, worker));
  return out;
}

const sumCounts = (cs: Counts[]): Counts =>
  cs.reduce(
    (a, c) => ({
      window: a.window + c.window,
      cusum: a.cusum + c.cusum,
      self: a.self + c.self,
      permutation: a.permutation + c.permutation,
      peakS: Math.max(a.peakS, c.peakS),
    }),
    { window: 0, cusum: 0, self: 0, permutation: 0, peakS: 0 },
  );

type Sim = (x: SimOptions) => EngineModel;

const fmtN = (v: number): string =>
  Number.isFinite(v) ? (v >= 10_000 ? Math.round(v).toLocaleString('en-US') : String(Math.round(v))) : '—';

export async function runArl(o: ArlOptions): Promise<string> {
  const started = performance.now();
  const sim: Sim = (x) => createSimModel({ seed: o.seed, ...x });
  const base: Side = { model: sim({}) };
  const log = (s: string): void => console.log(s);
  const cal = await calibrateSim(o, sim, base, log);
  const defaults = buildConfig(o.config);
  const autoDefaults = buildConfig(autoConfig(o.config));
  const inControl = await inControlTable(o, cal, log);
  const { ooc, chart } = await outOfControl(o, sim, base, cal, log);
  const conv = await floorConvergence(o, sim, cal);
  const svg = chartSvg(chart, o.cap);
  const seconds = ((performance.now() - started) / 1000).toFixed(0);
  const c = defaults;
  const autoPart =
    o.autoPairs > 0
      ? ` and ${fmtN(o.autoPairs)} at \`noiseFloor: auto\` (calibration.rate 0.25, minFloor ${autoDefaults.calibration.minFloor})`
      : '';
  const head =
    `${fmtN(o.pairs)} noise-only pairs per class at the config${autoPart}, and ${o.runs} out-of-control runs per case (capped at ${o.cap} pairs), max_tokens ${o.maxTokens}, seed ${o.seed}, on the simulated engines in-process (${seconds} s on this machine, ${inControl.seconds.toFixed(0)} s of it in control on ${o.jobs} process${o.jobs === 1 ? '' : 'es'}: each class's pairs cut into ${o.jobs} runs of consecutive prompts, each from a fresh detector state). ` +
    `Config: window ${c.alert.window}, minRequests ${c.alert.minRequests}, fireFraction ${c.alert.fireFraction}, forSeconds ${c.alert.forSeconds} (one client request a second), CUSUM k ${c.alert.cusum.k} h ${c.alert.cusum.h}, floor ${c.analysis.noiseFloor}; ` +
    `the permutation test fires when p ≤ ${o.alpha}; a fire counts once per excursion (an alert already firing does not count again). Run lengths are mirrored pairs (at rate r, about 1/r client requests each).`;
  const out = [
    head,
    '',
    '**In control** (false fires):',
    '',
    ...inControl.rows,
    '',
    '**Out of control** (pairs to the first fire):',
    '',
    ...ooc,
    '',
    '**`noiseFloor: auto`** (calibration on the baseline side only):',
    '',
    ...conv,
    '',
    '![Median pairs to fire against the state shift, one line per alert](detection-arl.svg)',
  ].join('\n');
  if (o.write) {
    await writeFile(fileURLToPath(new URL('../docs/detection-arl.svg', import.meta.url)), `${svg}\n`);
    await writeBlock('bench:arl', out);
  }
  return out;
}

/**
 * Calibration of the simulated noise to the llama.cpp figures of the table below (median
 * per-position shift for flash attention and f16 weights; the largest shift for batch 8).
 */
async function calibrateSim(o: ArlOptions, sim: Sim, base: Side, log: (s: string) => void): Promise<Calibrated> {
  const med = (s: number[]): number => quantile(s, 0.5);
  const max = (s: number[]): number => quantile(s, 1);
  const sFa = await calibrate((v) => ({ model: sim({ noise: v }) }), base, med, 3.9e-3, o.maxTokens);
  const sF16 = await calibrate((v) => ({ model: sim({ noise: v }) }), base, med, 5.5e-3, o.maxTokens);
  const sBatch = await calibrate(
    (v) => ({ model: sim({ batchNoise: v }), coResident: 8 }),
    base,
    max,
    1.8e-6,
    o.maxTokens,
  );
  // The state shift's knob per nat of median position shift (near linear for small shifts).
  const perNat = (await calibrate((v) => ({ model: sim({ stateShift: v }) }), base, med, 0.1, o.maxTokens)) / 0.1;
  const localPerNat =
    (await calibrate(
      (v) => ({ model: sim({ localShift: v, localShiftRate: 0.1 }) }),
      base,
      (s) => quantile(s, 0.95),
      0.3,
      o.maxTokens,
    )) / 0.3;
  const cal: Calibrated = { sFa, sF16, sBatch, perNat, localPerNat };
  log(
    `calibrated: flash-attention σ ${sFa.toExponential(2)}, f16 σ ${sF16.toExponential(2)}, batch-8 σ ${sBatch.toExponential(2)}, state shift ${perNat.toFixed(3)}/nat, local ${localPerNat.toFixed(3)}/nat`,
  );
  return cal;
}

/**
 * In control: every class at the config under test and at its auto variant, each class's pairs
 * cut into one chunk per worker process; the table of false fires.
 */
async function inControlTable(
  o: ArlOptions,
  cal: Calibrated,
  log: (s: string) => void,
): Promise<{ rows: string[]; seconds: number }> {
  const defaults = buildConfig(o.config);
  const autoDefaults = buildConfig(autoConfig(o.config));
  const inControl: Array<{ auto: boolean; pairs: number }> = [
    { auto: false, pairs: o.pairs },
    ...(o.autoPairs > 0 ? [{ auto: true, pairs: o.autoPairs }] : []),
  ];
  const jobList: InControlJob[] = [];
  for (const set of inControl)
    for (const className of NOISE_CLASSES)
      chunksOf(set.pairs, o.jobs).forEach((c, chunk) =>
        jobList.push({
          className,
          auto: set.auto,
          cal,
          seed: o.seed,
          maxTokens: o.maxTokens,
          alpha: o.alpha,
          repeatEvery: o.repeatEvery,
          config: o.config,
          from: c.from,
          pairs: c.pairs,
          chunk,
        }),
      );
  log(`in control: ${jobList.length} chunks on ${o.jobs} process${o.jobs === 1 ? '' : 'es'}`);
  const inControlStarted = performance.now();
  const results = await runJobs(jobList, o.jobs, log);
  const inControlSeconds = (performance.now() - inControlStarted) / 1000;
  const rows: string[] = [];
  rows.push(
    `| noise class (sim, calibrated) | floor | pairs | window fires | CUSUM fires | self fires (repeat pairs) | largest CUSUM S (h ${defaults.alert.cusum.h}) | permutation p ≤ ${o.alpha} | ARL0 (pairs, 95% bound when none fired) |`,
  );
  rows.push('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const set of inControl)
    for (const className of NOISE_CLASSES) {
      const counts = sumCounts(
        results.filter((_, i) => jobList[i]!.className === className && jobList[i]!.auto === set.auto),
      );
      const alertFires = counts.window + counts.cusum + counts.self;
      const arl0 = alertFires === 0 ? `≥ ${fmtN(set.pairs / 3)} (rule of three)` : `≈ ${fmtN(set.pairs / alertFires)}`;
      const floor = set.auto
        ? `auto (minFloor ${autoDefaults.calibration.minFloor})`
        : String(defaults.analysis.noiseFloor);
      const repeats = chunksOf(set.pairs, o.jobs).reduce((a, c) => a + Math.floor(c.pairs / o.repeatEvery), 0);
      rows.push(
        `| ${className} | ${floor} | ${fmtN(set.pairs)} | ${counts.window} | ${counts.cusum} | ${counts.self} (${fmtN(repeats)}) | ${counts.peakS.toFixed(2)} | ${counts.permutation} | ${arl0} |`,
      );
    }

  return { rows, seconds: inControlSeconds };
}

/** The out-of-control candidates: state shifts of several sizes, a local shift, the cache-hit fault. */
function oocCases(sim: Sim, cal: Calibrated): OocCase[] {
  const { perNat, localPerNat, sFa } = cal;
  // The demo's cache-hit fault (packages/engine/src/demo/engines.ts).
  const cacheHit = 0.6;
  const shifts = [0.02, 0.05, 0.1, 0.2, 0.5];
  return [
    ...shifts.map((s) => ({
      name: `state ${s}`,
      x: s,
      cand: { model: sim({ stateShift: s * perNat, noise: sFa }) },
      repeat: false,
    })),
    {
      name: 'local 10% × 0.3',
      x: null,
      cand: { model: sim({ localShift: 0.3 * localPerNat, localShiftRate: 0.1, noise: sFa }) },
      repeat: false,
    },
    {
      name: 'cache-hit',
      x: null,
      cand: { model: sim({ cacheHitShift: cacheHit, cacheSlots: 1, noise: sFa }) },
      repeat: true,
    },
  ];
}

interface OocCase {
  name: string;
  x: number | null;
  cand: Side;
  repeat: boolean;
}

interface OocSetting {
  label: string;
  sampleRate: number;
  auto: boolean;
  alert?: ConfigInput['alert'];
}

/** Out of control: pairs to the first fire, per alert, per shift; the table and the chart's points. */
async function outOfControl(
  o: ArlOptions,
  sim: Sim,
  base: Side,
  cal: Calibrated,
  log: (s: string) => void,
): Promise<{ ooc: string[]; chart: Record<AlertKey, Array<[number, number]>> }> {
  const sampleDefault = buildConfig(o.config).mirror.sampleRate;
  const settings: OocSetting[] = [
    { label: 'rate 1', sampleRate: 1, auto: false },
    // The window alert's defaults before they were set from these figures, for comparison.
    {
      label: 'rate 1, minRequests 20, forSeconds 60 (the earlier defaults)',
      sampleRate: 1,
      auto: false,
      alert: { minRequests: 20, forSeconds: 60 },
    },
    { label: `rate ${sampleDefault}`, sampleRate: sampleDefault, auto: false },
    { label: 'rate 1, auto', sampleRate: 1, auto: true },
  ];
  const ooc: string[] = [];
  ooc.push(`| candidate | setting | ${ALERTS.map((a) => `${a} median / p95`).join(' | ')} |`);
  ooc.push(`| --- | --- | ${ALERTS.map(() => '---').join(' | ')} |`);
  const chart: Record<AlertKey, Array<[number, number]>> = { window: [], cusum: [], self: [], permutation: [] };
  for (const cs of oocCases(sim, cal)) {
    for (const st of settings) {
      const runLengths = await runLengthsOf(o, cs, st, base);
      const cell = (k: AlertKey): string => {
        if (k === 'self' && !cs.repeat) return '—';
        const m = quantile(runLengths[k], 0.5);
        const p = quantile(runLengths[k], 0.95);
        const f = (v: number): string => (Number.isFinite(v) ? String(v) : `> ${o.cap}`);
        return `${f(m)} / ${f(p)}`;
      };
      ooc.push(`| ${cs.name} | ${st.label} | ${ALERTS.map(cell).join(' | ')} |`);
      if (cs.x !== null && st.label === 'rate 1')
        for (const k of ALERTS) if (k !== 'self') chart[k].push([cs.x, quantile(runLengths[k], 0.5)]);
      log(`${cs.name} ${st.label}: ${ALERTS.map(cell).join(' | ')}`);
    }
  }
  return { ooc, chart };
}

/** One case under one setting, `runs` times: the pairs to each alert's first fire (Infinity: none by the cap). */
async function runLengthsOf(
  o: ArlOptions,
  cs: OocCase,
  st: OocSetting,
  base: Side,
): Promise<Record<AlertKey, number[]>> {
  const runLengths: Record<AlertKey, number[]> = { window: [], cusum: [], self: [], permutation: [] };
  const base0: ConfigInput = st.auto ? autoConfig(o.config) : o.config;
  const cfg = freeRunning(st.alert ? { ...base0, alert: { ...(base0.alert ?? {}), ...st.alert } } : base0);
  for (let run = 0; run < o.runs; run++) {
    const first: Partial<Record<AlertKey, number>> = {};
    await feed({ cfg, sampleRate: st.sampleRate, auto: st.auto }, cs.cand, base, {
      seed: o.seed + 1000 * (run + 1),
      maxTokens: o.maxTokens,
      alpha: o.alpha,
      repeat: cs.repeat,
      from: 100_000 * (run + 1),
      stop: (n, fired) => {
        for (const k of fired) first[k] ??= n;
        return n >= o.cap || ALERTS.every((k) => first[k] !== undefined || (k === 'self' && !cs.repeat));
      },
    });
    for (const k of ALERTS) runLengths[k].push(first[k] ?? Infinity);
  }
  return runLengths;
}

/** `noiseFloor: auto` — pairs until the floor stays within 20% of the true one, baseline with run-to-run noise. */
async function floorConvergence(o: ArlOptions, sim: Sim, cal: Calibrated): Promise<string[]> {
  const { sFa, sF16 } = cal;
  const conv: string[] = [
    '| baseline run-to-run noise (σ) | true floor (margin × p99) | repeat pairs to within 20% (median / p95 of 20) |',
    '| --- | --- | --- |',
  ];
  for (const [label, sigma] of [
    ['flash-attention-sized', sFa],
    ['f16-sized', sF16],
  ] as const) {
    const noisy: Side = { model: sim({ noise: sigma }) };
    const cfg = buildConfig({ ...o.config, calibration: { ...(o.config.calibration ?? {}), minFloor: 1e-6 } });
    const all = await shiftsOf(noisy, noisy, 1500, o.maxTokens, 500_000);
    const truth = quantile(all, 0.99) * cfg.calibration.margin;
    const reach: number[] = [];
    for (let s = 0; s < 20; s++) {
      const cal = new Calibration(cfg.calibration);
      let ok: number | null = null;
      for (let n = 1; n <= 300; n++) {
        const sh = await shiftsOf(noisy, noisy, 1, o.maxTokens, 600_000 + s * 1000 + n);
        cal.add('baseline', sh, { trusted: true });
        const within = Math.abs(cal.autoFloor() - truth) <= 0.2 * truth;
        if (within && ok === null) ok = n;
        if (!within) ok = null;
      }
      reach.push(ok ?? Infinity);
    }
    conv.push(
      `| ${label} (${sigma.toExponential(1)}) | ${truth.toExponential(2)} | ${quantile(reach, 0.5)} / ${quantile(reach, 0.95)} (minSamples ${cfg.calibration.minSamples}) |`,
    );
  }

  return conv;
}

/** Rewrites docs/detection.md between `<!-- NAME begin -->` and `<!-- NAME end -->`. */
async function writeBlock(name: string, out: string): Promise<void> {
  const DOC = fileURLToPath(new URL('../docs/detection.md', import.meta.url));
  const BEGIN = `<!-- ${name} begin -->`;
  const END = `<!-- ${name} end -->`;
  const doc = await readFile(DOC, 'utf8');
  const from = doc.indexOf(BEGIN);
  const to = doc.indexOf(END);
  if (from < 0 || to < from) throw new Error(`docs/detection.md has no ${BEGIN} … ${END} markers`);
  await writeFile(DOC, `${doc.slice(0, from + BEGIN.length)}\n${out}\n${doc.slice(to)}`);
}

/**
 * The confirmation on llama.cpp numerics (`--llama-pairs N`): the same in-control count with the
 * candidate and the baseline both the tiny llama.cpp model of packages/engine (threads 1), the
 * candidate with each noise-only fault, through the same detectors; and the per-position shifts
 * the sim was calibrated to, measured again.
 */
export async function runLlamaConfirm(o: ArlOptions & { llamaPairs: number }): Promise<string> {
  const started = performance.now();
  const { createLlamaModel } = await import('@logprobe/engine/llama');
  const base: Side = { model: await createLlamaModel({ seed: o.seed }) };
  const classes: Array<{ name: string; fault: string | null; cache?: boolean }> = [
    { name: 'clean twins', fault: null },
    { name: 'flash attention', fault: 'flash-attention' },
    { name: 'f16 weights', fault: 'weights:f16' },
    { name: 'batch 8 vs 1', fault: 'batch:8' },
    { name: 'prefix cache on vs off', fault: null, cache: true },
  ];
  const cfg = freeRunning(o.config);
  const rows = [
    `| llama.cpp candidate | pairs | median / max position shift | window fires | CUSUM fires | permutation p ≤ ${o.alpha} | ARL0 (pairs, 95% bound when none fired) |`,
    '| --- | --- | --- | --- | --- | --- | --- |',
  ];
  const fmt = (x: number): string => (x === 0 ? '0' : x < 0.01 ? x.toExponential(1) : x.toFixed(3));
  for (const c of classes) {
    const model = await createLlamaModel({ seed: o.seed, fault: c.fault });
    const cand: Side = { model, ...(c.cache ? { cache: true } : {}) };
    const shifts = await shiftsOf(cand, base, 100, o.maxTokens, 700_000);
    const counts: Record<AlertKey, number> = { window: 0, cusum: 0, self: 0, permutation: 0 };
    await feed({ cfg, sampleRate: 1, auto: false }, cand, base, {
      seed: o.seed,
      maxTokens: o.maxTokens,
      alpha: o.alpha,
      repeat: false,
      from: 0,
      stop: (n, fired) => {
        for (const k of fired) counts[k]++;
        return n >= o.llamaPairs;
      },
    });
    await (model as unknown as { close(): Promise<void> }).close();
    const alertFires = counts.window + counts.cusum;
    const arl0 =
      alertFires === 0
        ? `≥ ${Math.round(o.llamaPairs / 3)} (rule of three)`
        : `≈ ${Math.round(o.llamaPairs / alertFires)}`;
    rows.push(
      `| ${c.name} | ${o.llamaPairs.toLocaleString('en-US')} | ${fmt(quantile(shifts, 0.5))} / ${fmt(quantile(shifts, 1))} | ${counts.window} | ${counts.cusum} | ${counts.permutation} | ${arl0} |`,
    );
    console.log(rows[rows.length - 1]);
  }
  await (base.model as unknown as { close(): Promise<void> }).close();
  const seconds = ((performance.now() - started) / 1000).toFixed(0);
  const out = [
    `${o.llamaPairs.toLocaleString('en-US')} pairs per class on llama.cpp numerics (the tiny generated model, threads 1, in-process), max_tokens ${o.maxTokens}, seed ${o.seed}, the config (window ${cfg.alert.window}, minRequests ${cfg.alert.minRequests}, forSeconds ${cfg.alert.forSeconds}, CUSUM k ${cfg.alert.cusum.k} h ${cfg.alert.cusum.h}, floor ${cfg.analysis.noiseFloor}), ${seconds} s. No repeats (the self alert's in-control figures are the sim's).`,
    '',
    ...rows,
  ].join('\n');
  if (o.write) await writeBlock('bench:arl-llama', out);
  return out;
}

/** Run length against shift size, one line per alert (log-log): docs/detection-arl.svg, linked from the block. */
function chartSvg(lines: Record<AlertKey, Array<[number, number]>>, cap: number): string {
  const W = 560;
  const H = 300;
  const L = 60;
  const B = 40;
  const xs = [0.02, 0.5];
  const x = (v: number): number =>
    L + ((Math.log(v) - Math.log(xs[0]!)) / (Math.log(xs[1]!) - Math.log(xs[0]!))) * (W - L - 20);
  const y = (v: number): number => H - B - (Math.log10(Math.max(1, Math.min(cap, v))) / Math.log10(cap)) * (H - B - 20);
  const colors: Record<AlertKey, string> = {
    window: '#2471a3',
    cusum: '#7d3c98',
    self: '#999',
    permutation: '#c0392b',
  };
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
  ];
  parts.push(
    `<line x1="${L}" y1="${H - B}" x2="${W - 10}" y2="${H - B}" stroke="#333"/><line x1="${L}" y1="10" x2="${L}" y2="${H - B}" stroke="#333"/>`,
  );
  for (const v of [0.02, 0.05, 0.1, 0.2, 0.5])
    parts.push(`<text x="${x(v).toFixed(1)}" y="${H - B + 15}" text-anchor="middle">${v}</text>`);
  for (const v of [1, 10, 100, 1000, 10_000].filter((t) => t <= cap))
    parts.push(`<text x="${L - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${v}</text>`);
  parts.push(
    `<text x="${(W + L) / 2}" y="${H - 5}" text-anchor="middle">state shift (nats, median per position)</text>`,
  );
  parts.push(
    `<text x="14" y="${(H - B) / 2}" transform="rotate(-90 14 ${(H - B) / 2})" text-anchor="middle">median pairs to fire (cap ${cap})</text>`,
  );
  let ly = 20;
  for (const k of Object.keys(lines) as AlertKey[]) {
    const pts = lines[k];
    if (pts.length === 0) continue;
    parts.push(
      `<polyline fill="none" stroke="${colors[k]}" stroke-width="2" points="${pts.map(([a, b]) => `${x(a).toFixed(1)},${y(b).toFixed(1)}`).join(' ')}"/>`,
    );
    parts.push(`<text x="${W - 120}" y="${ly}" fill="${colors[k]}">${k}</text>`);
    ly += 14;
  }
  parts.push('</svg>');
  return parts.join('');
}

/**
 * The race (`npm run bench:detect -- --canary`): how many probe tokens Log Probability Tracking
 * (LT, arXiv 2512.03816), Black-Box Border Input Tracking (B3IT, arXiv 2602.11083) and
 * logprobe's canaries (src/canary) spend on a changed server before they say so, at one
 * false-alarm rate, and whether they say so on servers that did not change. The methods and
 * their settings are in bench/canary-methods.ts; what is measured:
 *
 * - Engines: `logprobe engine --llama` processes (threads 1, seed --seed) from @logprobe/engine.
 *   A trusted clean engine is recorded once (every method's reference: LT's rows, B3IT's border
 *   tokens, the canaries' golden answers; recording is not counted). Each class's candidate is
 *   then probed alone, one query at a time, each method judging after every query, until it
 *   fires or has spent --budget tokens.
 * - Cost: the candidate's `usage.total_tokens` (prompt + generated) summed over the queries up
 *   to and including the one that fired.
 * - LT: prompt "x" (completions), 1 token, top-20 logprobs; after m queries the last m rows
 *   against m reference rows (two equal samples, as the paper's two snapshots), 999
 *   permutations, fires at p ≤ α. The variant "LT, 100 ref." tests all queries so far against
 *   100 reference rows.
 * - B3IT: from the probe pool (DEFAULT_PROBES, the 95 printable one-character prompts — B3IT's
 *   one-token inputs — and the 676 two-letter lowercase ones), the 20 with the smallest reference gap; each query 1 token at
 *   temperature 0 without logprobs, round-robin; fires at the first flip (the paper's flip rule
 *   at T = 0; the website's daily series rule — window 14, σ_k 4, |Δ| 0.2, persistence 3,
 *   cooldown 10 — needs ≥ 3 daily rounds of 200 queries and is not what is raced).
 * - Canaries: the pool measured and chosen as `logprobe canary build --generated --count 12`
 *   chooses (src/canary/build.ts measureGaps, chooseProbes; `--canary-rank cost`, the default:
 *   the most worth per token first — a canary fires when its first token moves by the floor (the
 *   comparison) or by its gap (the border rule), so it needs a move of min(floor, gap), and costs
 *   its prompt + generated tokens; gaps below --flip-noise skipped): 9 first-token probes of one
 *   token and 3 decode probes of `canary.maxTokens` (4) tokens, chosen by their second token's
 *   gap, placed evenly among the others, the first second in line. CanaryRunner against the
 *   recorded reference (candidate-only mode, no baseline spent), topLogprobs 20, judgeRound over
 *   the last 12 pairs after every probe (alpha α, fireFraction 0.5, 999 permutations), the
 *   comparisons at a noise floor of --canary-floor (default 0.002 nats: the same flip-noise
 *   figure `canary build` assumes, above the 1.3e-3 nats at which llama.cpp noise flipped a token
 *   here, docs/detection.md). Ablations (--canary-tokens, default 1,4): the same probes in the
 *   same order, every one that many tokens long, a column each.
 * - decode-state:0 is a change only later tokens show (the first generated token is clean): what
 *   the decode probes are for, and the price of a set of 1-token canaries.
 * - A method that fires on a no-change class is marked † in the change table: its detections are
 *   not at the others' false-alarm rate (n/a at α).
 * - No-change classes run the whole budget and count every evaluation that fired.
 */
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { spawnLlamaEngine, type LlamaEngineProcess } from '@logprobe/engine';
import { Backends } from '../src/backend/client.js';
import type { BackendResult } from '../src/backend/dispatch.js';
import { createUpstreamPool } from '../src/backend/pool.js';
import { isDecodeProbe, probeCopy, withLength, type CanaryProbe } from '../src/canary/probes.js';
import { chooseProbes, generatedInput, measureGaps, type Measured } from '../src/canary/build.js';
import { CanaryRunner, judgeRound, spent, type CanaryPair } from '../src/canary/runner.js';
import { buildConfig } from '../src/config/load.js';
import { DEFAULT_THRESHOLDS, type Thresholds } from '../src/core/index.js';
import { mulberry32 } from '../src/core/random.js';
import { PairPipeline } from '../src/pair/pipeline.js';
import { goldenKey, type GoldenIndex, type GoldenRecord } from '../src/replay/golden.js';
import { writeSection } from './lib/sections.js';
import {
  asciiChart,
  b3itChanged,
  b3itFlipped,
  ltPValue,
  selectBorderInputs,
  type BorderInput,
  type TopK,
} from './canary-methods.js';

export interface RaceOptions {
  seed: number;
  /** Candidate tokens each method may spend per class. */
  budget: number;
  alpha: number;
  /** The noise floor the canaries' comparisons are made at (nats). */
  floor: number;
  /** Reference gaps below this are flip noise: `canary build` does not pick them. */
  flipNoise: number;
  /** Ablations: the same canaries, every probe this many tokens long, one column each. */
  canaryTokens: number[];
  /** How the canaries are chosen: by gap alone, or by gap × cost (prompt + generated tokens). */
  rank: 'gap' | 'cost';
  write: boolean;
}

const PERMUTATIONS = 999;
const LT_REF = 100;
const B3IT_K = 20;
/** As many canaries as the built-in set holds, a quarter of them decode probes (`canary build`'s default share). */
const CANARIES = 12;
const DECODE = Math.ceil(CANARIES / 4);
/** `canary.maxTokens` as shipped: a decode probe's length, every probe's cap. */
const MAX_TOKENS = buildConfig().canary.maxTokens;
const canaryCopy = (maxTokens: number) => ({ topLogprobs: 20, maxTokens, seed: 0, extraParams: {} });
const CANARY = 'canaries';
/** The race scores nothing: every method reads the answers as they come. */
const NO_SCORING = {
  when: 'never',
  maxPositions: 0,
  topK: 20,
  engines: { candidate: 'auto', baseline: 'auto' },
} as const;
const ablation = (t: number): string => `canaries, every probe ${t} token${t === 1 ? '' : 's'}`;
const canaryColumns = (o: RaceOptions): string[] => [CANARY, ...o.canaryTokens.map(ablation)];
const methods = (o: RaceOptions): string[] => ['LT', 'LT, 100 ref.', 'B3IT', ...canaryColumns(o)];
type Method = string;

const CHANGES = [
  'weight-noise:0.01',
  'weight-noise:0.003',
  'weight-noise:0.001',
  'weights:f16',
  'kv:q8_0',
  'zero-layer:1',
  'decode-state:0',
];
const NO_CHANGE = ['twin (same seed, clean)', 'batch:8 vs batch:1', 'restarted server'] as const;

async function post(url: string, path: string, body: Record<string, unknown>): Promise<BackendResult> {
  const t = performance.now();
  const res = await request(url + path, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' },
  });
  const json = (await res.body.json()) as unknown;
  if (res.statusCode !== 200) throw new Error(`${path} answered ${res.statusCode}: ${JSON.stringify(json)}`);
  return { status: 200, latencyMs: performance.now() - t, body: json, serverHeaders: {}, error: null };
}

/** The first output token's top-k (completions or chat), token → logprob. */
function firstTopK(body: unknown): TopK {
  const choice = (body as { choices: Array<Record<string, unknown>> }).choices[0]!;
  const lp = choice.logprobs as
    | {
        top_logprobs?: Array<Record<string, number>>;
        content?: Array<{ top_logprobs: Array<{ token: string; logprob: number }> }>;
      }
    | undefined;
  if (lp?.top_logprobs) return lp.top_logprobs[0] ?? {};
  return Object.fromEntries((lp?.content?.[0]?.top_logprobs ?? []).map((e) => [e.token, e.logprob]));
}

function textOf(body: unknown): string {
  const c = (body as { choices: Array<{ text?: string; message?: { content?: string } }> }).choices[0]!;
  return c.text ?? c.message?.content ?? '';
}

const LT_BODY = { model: 'm', prompt: 'x', max_tokens: 1, temperature: 0, logprobs: 20 };
const b3itBody = (p: CanaryProbe): Record<string, unknown> => ({
  ...p.body,
  model: 'm',
  max_tokens: 1,
  temperature: 0,
});

/** A canary column: its probes in the order sent, and their answers recorded on the trusted engine. */
interface CanaryColumn {
  probes: CanaryProbe[];
  golden: GoldenIndex;
  /** `canary.maxTokens` for this column: the length of a probe that names none, every probe's cap. */
  cap: number;
}

/** Everything recorded once from a trusted engine. */
interface Reference {
  lt: TopK[];
  b3it: BorderInput<CanaryProbe>[];
  /** The canaries `canary build` chooses (src/canary/build.ts chooseProbes), in its order, with each one's cost a query. */
  canaries: Array<{ probe: CanaryProbe; cost: number | null }>;
  /** Each canary column (the built set; the same probes at one length each), by name. */
  columns: Map<string, CanaryColumn>;
}

/** `probe` at `maxTokens` tokens whatever its kind (an ablation column). */
function atLength(probe: CanaryProbe, maxTokens: number): CanaryProbe {
  return { ...probe, body: withLength(probe.body, maxTokens) };
}

/** The answers of `probes` on the trusted engine, as a golden index (the canaries' reference). */
async function recordColumn(url: string, probes: CanaryProbe[], cap: number): Promise<CanaryColumn> {
  const byKey = new Map<string, GoldenRecord & { line: number }>();
  for (const [i, probe] of probes.entries()) {
    const copy = probeCopy(probe, { ...canaryCopy(cap), model: 'm' });
    const baseline = await post(url, probe.route, copy.body);
    const rec = { request: copy.body, baseline, line: i + 1 };
    byKey.set(goldenKey(probe.route, probe.body), rec as unknown as GoldenRecord & { line: number });
  }
  const golden = {
    file: '(recorded in memory)',
    records: byKey.size,
    byKey,
    problems: [],
    minTopK: 20,
    minScoredTopK: null,
    minMaxTokens: 1,
  };
  return { probes, golden, cap };
}

/**
 * The pool both B3IT and the canaries choose from — `canary build --generated`'s: the built-in
 * canaries, every printable one-character prompt (B3IT's one-token inputs) and every two-letter
 * lowercase prompt — measured as `canary build` measures it (two greedy tokens, their gaps).
 */
async function measurePool(url: string): Promise<Measured[]> {
  return measureGaps(generatedInput().candidates, {
    backend: { url, timeoutMs: 30_000, connectTimeoutMs: 5_000, idleTimeoutMs: 30_000, apiKey: null },
    tlsInsecure: false,
    rewrite: canaryCopy(2),
    scoring: NO_SCORING,
    concurrency: 1,
  });
}

async function record(url: string, o: RaceOptions): Promise<Reference> {
  const lt: TopK[] = [];
  for (let i = 0; i < LT_REF; i++) lt.push(firstTopK((await post(url, '/v1/completions', LT_BODY)).body));
  const measured = await measurePool(url);
  const border: BorderInput<CanaryProbe>[] = [];
  for (const m of measured) {
    if ('error' in m) continue;
    const probe: CanaryProbe = { id: m.candidate.id, route: m.candidate.route, body: m.candidate.body, gap: m.gap };
    const token = textOf((await post(url, probe.route, b3itBody(probe))).body);
    border.push({ probe, token, gap: m.gap });
  }
  const chosen = chooseProbes(measured, {
    count: CANARIES,
    decode: DECODE,
    perSlice: null,
    minGap: o.flipNoise,
    rank: o.rank === 'cost' ? { by: 'cost', floor: o.floor, maxTokens: MAX_TOKENS } : { by: 'gap' },
  }).probes;
  const columns = new Map([[CANARY, await recordColumn(url, chosen, MAX_TOKENS)]]);
  for (const t of o.canaryTokens)
    columns.set(
      ablation(t),
      await recordColumn(
        url,
        chosen.map((p) => atLength(p, t)),
        Math.max(t, MAX_TOKENS),
      ),
    );
  const promptTokens = new Map(measured.map((m) => [m.candidate.id, 'error' in m ? null : m.promptTokens]));
  return {
    lt,
    b3it: selectBorderInputs(border, B3IT_K),
    canaries: chosen.map((probe) => {
      const prompt = promptTokens.get(probe.id) ?? null;
      return { probe, cost: prompt === null ? null : prompt + (isDecodeProbe(probe) ? MAX_TOKENS : 1) };
    }),
    columns,
  };
}

/** One method on one candidate: its per-query step, run until it fires (or through the budget). */
type Step = () => Promise<{ tokens: number; fired: boolean; shift?: number | null }>;

interface Outcome {
  /** Tokens spent up to the first fire, or null. */
  detectedAt: number | null;
  evaluations: number;
  fires: number;
  spent: number;
  /** The largest position shift the method saw (canaries only), nats. */
  maxShift: number | null;
}

async function race(step: Step, budget: number, toTheEnd: boolean): Promise<Outcome> {
  const out: Outcome = { detectedAt: null, evaluations: 0, fires: 0, spent: 0, maxShift: null };
  while (out.spent < budget) {
    const s = await step();
    out.spent += s.tokens;
    out.evaluations++;
    if (s.shift != null) out.maxShift = Math.max(out.maxShift ?? 0, s.shift);
    if (s.fired) {
      out.fires++;
      out.detectedAt ??= out.spent;
      if (!toTheEnd) break;
    }
  }
  return out;
}

function ltStep(url: string, ref: Reference, o: RaceOptions, variant: 'equal' | 'all'): Step {
  const rows: TopK[] = [];
  return async () => {
    const r = await post(url, '/v1/completions', LT_BODY);
    rows.push(firstTopK(r.body));
    const m = Math.min(rows.length, LT_REF);
    const [a, b] = variant === 'equal' ? [ref.lt.slice(0, m), rows.slice(-m)] : [ref.lt, rows];
    const p = ltPValue(a, b, PERMUTATIONS, mulberry32(o.seed));
    return { tokens: spent(r, LT_BODY), fired: p <= o.alpha };
  };
}

function b3itStep(url: string, ref: Reference): Step {
  const flips: boolean[] = [];
  let i = 0;
  return async () => {
    const bi = ref.b3it[i++ % ref.b3it.length]!;
    const body = b3itBody(bi.probe);
    const r = await post(url, bi.probe.route, body);
    flips.push(b3itFlipped(bi.token, textOf(r.body)));
    return { tokens: spent(r, body), fired: b3itChanged(flips) };
  };
}

function canaryStep(url: string, column: CanaryColumn, o: RaceOptions): { step: Step; close: () => Promise<unknown> } {
  const upstream = { url, timeoutMs: 30_000, connectTimeoutMs: 5_000, idleTimeoutMs: 30_000 };
  const p = createUpstreamPool(upstream, { tlsInsecure: false, connections: 1, maxHeaderSize: 64 * 1024 });
  const backends = new Backends(
    { candidate: { ...upstream, pool: p, ownsPool: true, headers: { role: 'candidate' } }, baseline: null },
    NO_SCORING,
  );
  const runner = new CanaryRunner({
    pipeline: new PairPipeline(backends),
    reference: column.golden,
    copy: canaryCopy(column.cap),
  });
  const thresholds: Thresholds = { ...DEFAULT_THRESHOLDS, noiseFloor: o.floor };
  const pairs: CanaryPair[] = [];
  let i = 0;
  const step: Step = async () => {
    const probe = column.probes[i++ % column.probes.length]!;
    const pair = await runner.one(probe, 'm', thresholds);
    pairs.push(pair);
    const j = judgeRound(pairs.slice(-CANARIES), {
      alpha: o.alpha,
      fireFraction: 0.5,
      permutations: PERMUTATIONS,
      seed: o.seed,
    });
    return { tokens: pair.tokens, fired: j.verdict === 'changed', shift: pair.result.comparison?.maxShift ?? null };
  };
  return { step, close: () => backends.close() };
}

async function allMethods(
  url: string,
  ref: Reference,
  o: RaceOptions,
  toTheEnd: boolean,
): Promise<Record<Method, Outcome>> {
  const out: Record<Method, Outcome> = {
    LT: await race(ltStep(url, ref, o, 'equal'), o.budget, toTheEnd),
    'LT, 100 ref.': await race(ltStep(url, ref, o, 'all'), o.budget, toTheEnd),
    B3IT: await race(b3itStep(url, ref), o.budget, toTheEnd),
  };
  for (const [name, column] of ref.columns) {
    const canary = canaryStep(url, column, o);
    try {
      out[name] = await race(canary.step, o.budget, toTheEnd);
    } finally {
      await canary.close();
    }
  }
  return out;
}

async function withEngine<T>(seed: number, fault: string | null, f: (e: LlamaEngineProcess) => Promise<T>): Promise<T> {
  const e = await spawnLlamaEngine({ seed, fault, api: 'vllm' });
  try {
    return await f(e);
  } finally {
    await e.stop();
  }
}

type Results = { changes: Map<string, Record<Method, Outcome>>; quiet: Map<string, Record<Method, Outcome>> };

async function measure(o: RaceOptions): Promise<{ results: Results; refs: Reference }> {
  const results: Results = { changes: new Map(), quiet: new Map() };
  const log = (s: string): void => void console.error(s);
  let trusted = await spawnLlamaEngine({ seed: o.seed, fault: null, api: 'vllm' });
  try {
    const ref = await record(trusted.url, o);
    log(`recorded: LT ${ref.lt.length} rows, B3IT gaps ${ref.b3it.map((b) => b.gap.toExponential(1)).join(' ')}`);
    log(`canaries: ${ref.canaries.map((c) => canaryLabel(c.probe, c.cost)).join(', ')}`);
    for (const fault of CHANGES) {
      results.changes.set(fault, await withEngine(o.seed, fault, (e) => allMethods(e.url, ref, o, false)));
      log(`${fault}: done`);
    }
    results.quiet.set(NO_CHANGE[0], await withEngine(o.seed, null, (e) => allMethods(e.url, ref, o, true)));
    const batchRef = await withEngine(o.seed, 'batch:1', (e) => record(e.url, o));
    results.quiet.set(NO_CHANGE[1], await withEngine(o.seed, 'batch:8', (e) => allMethods(e.url, batchRef, o, true)));
    await trusted.stop();
    trusted = await spawnLlamaEngine({ seed: o.seed, fault: null, api: 'vllm' });
    results.quiet.set(NO_CHANGE[2], await allMethods(trusted.url, ref, o, true));
    log('no-change classes: done');
    return { results, refs: ref };
  } finally {
    await trusted.stop();
  }
}

const canaryLabel = (p: CanaryProbe, cost: number | null): string =>
  `${p.id}${isDecodeProbe(p) ? ' (decode)' : ''} ${cost ?? '?'}`;

const cell = (x: Outcome, budget: number, mark: string): string =>
  x.detectedAt === null ? `not within ${budget}` : `**${x.detectedAt}**${mark}`;

/**
 * How each canary column compares, change by change, with every other method — the false-alarming
 * ones included (the stricter reading): strictly fewer tokens, a tie, or more.
 */
function verdicts(r: Results, all: readonly Method[], o: RaceOptions): string[] {
  const others = all.filter((k) => !k.startsWith('canaries'));
  return canaryColumns(o).map((c) => {
    const won: string[] = [];
    const not: string[] = [];
    for (const [f, m] of r.changes) {
      const mine = m[c]!.detectedAt ?? Infinity;
      const best = Math.min(...others.map((k) => m[k]!.detectedAt ?? Infinity));
      if (mine < best) won.push(f);
      else if (mine === Infinity) not.push(`${f} (no method within ${o.budget})`);
      else not.push(`${f} (${mine} against ${best}${mine === best ? ', a tie' : ''})`);
    }
    return `- ${c}: fewer tokens than every other method on ${won.length} of ${r.changes.size} changes${not.length > 0 ? `; not on ${not.join(', ')}` : ''}.`;
  });
}

function report(r: Results, refs: Reference, o: RaceOptions, seconds: number): string {
  const all = methods(o);
  // A method that fired on a no-change class is not at the others' false-alarm rate: its
  // detections are marked †, n/a at α (they are shown, not compared as equals).
  const alarmed = new Set(all.filter((k) => [...r.quiet.values()].some((m) => m[k]!.fires > 0)));
  const mark = (k: Method): string => (alarmed.has(k) ? ' †' : '');
  const canaries = all.filter((k) => k.startsWith('canaries'));
  const head = `| change | ${all.join(' | ')} | canaries' largest shift (nats) |\n| --- |${all.map(() => ' --- |').join('')} --- |`;
  const shift = (m: Record<Method, Outcome>): string =>
    canaries.map((k) => (m[k]!.maxShift === null ? '—' : m[k]!.maxShift.toExponential(1))).join(' / ');
  const rows = [...r.changes].map(
    ([f, m]) => `| ${f} | ${all.map((k) => cell(m[k]!, o.budget, mark(k))).join(' | ')} | ${shift(m)} |`,
  );
  const quiet = [...r.quiet].map(
    ([c, m]) =>
      `| ${c} | ${all.map((k) => `${m[k]!.fires} of ${m[k]!.evaluations} (${m[k]!.spent} tokens)`).join(' | ')} | ${shift(m)} |`,
  );
  const chart = asciiChart(
    [...r.changes].map(([f, m]) => ({
      label: f,
      values: all.map((k) => ({ series: k, value: m[k]!.detectedAt })),
    })),
    { width: 40, max: o.budget, unit: 'tokens' },
  );
  const range = (g: number[]): string =>
    g.length === 0 ? '—' : `${Math.min(...g).toExponential(1)}–${Math.max(...g).toExponential(1)}`;
  const b3itGaps = range(refs.b3it.map((b) => b.gap));
  const canaryGaps = range(refs.canaries.map((c) => c.probe.gap ?? NaN).filter(Number.isFinite));
  const evals = canaries.map((k) => [...r.quiet.values()].reduce((n, m) => n + m[k]!.evaluations, 0));
  return [
    `${new Date().toISOString().slice(0, 10)}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, shared), Node ${process.version}; llama.cpp engines threads 1, seed ${o.seed}; α = ${o.alpha} per test for LT and the canaries' permutation test; budget ${o.budget} candidate tokens per method and class; canary floor ${o.floor} nats, flip noise ${o.flipNoise}, canaries chosen by ${o.rank === 'cost' ? 'worth per token (min(floor, gap) × (prompt + generated tokens), smallest first)' : 'gap'}; B3IT border gaps ${b3itGaps}; the canaries as \`canary build\` chose them (${CANARIES}, ${DECODE} of them decode probes of canary.maxTokens ${MAX_TOKENS} tokens, the rest 1 token), first-token gaps ${canaryGaps}, in the order sent: ${refs.canaries.map((c) => canaryLabel(c.probe, c.cost)).join(', ')} (id, tokens a query). ${seconds.toFixed(0)} s in all.`,
    '',
    'Probe tokens (prompt + generated, candidate side) spent up to the query that fired:',
    '',
    head,
    ...rows,
    '',
    alarmed.size > 0
      ? `† fired on a no-change class below (${[...alarmed].join('; ')}): not at the others' false-alarm rate, so n/a at α — shown, not counted as a win.`
      : 'No method fired on a no-change class.',
    '',
    'No-change classes, the whole budget: evaluations that fired, of all evaluations (every evaluation after a query):',
    '',
    head.replace('| change |', '| no-change class |'),
    ...quiet,
    '',
    `The canaries' in-control run: ${canaries.map((k, i) => `${k} ${[...r.quiet.values()].reduce((n, m) => n + m[k]!.fires, 0)} fires in ${evals[i]} evaluations`).join(', ')} over the ${r.quiet.size} no-change classes.`,
    '',
    'Each canary column against every other method (the † ones included):',
    '',
    ...verdicts(r, all, o),
    '',
    '```text',
    chart,
    '```',
    '',
  ].join('\n');
}

/** Runs the race, prints its table, and writes it into docs/detection.md (between the `bench:canary` markers). */
export async function runCanaryRace(o: RaceOptions): Promise<string> {
  const started = performance.now();
  const { results, refs } = await measure(o);
  const text = report(results, refs, o, (performance.now() - started) / 1000);
  if (o.write) {
    const doc = fileURLToPath(new URL('../docs/detection.md', import.meta.url));
    writeSection(doc, '<!-- bench:canary begin -->', '<!-- bench:canary end -->', text, '');
    console.error(`written to ${doc}`);
  }
  return text;
}

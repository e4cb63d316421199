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
 * - Canaries: the pool ranked by worth per token (`--canary-rank cost`, the default): a canary
 *   fires when its first token moves by the floor (the comparison) or by its gap (the border
 *   rule), so it needs a move of min(floor, gap), and costs its prompt + generated tokens; the 12
 *   smallest min(floor, gap) × cost at or above --flip-noise, ties by gap (`--canary-rank gap`:
 *   the 12 smallest gaps, as before). CanaryRunner against the recorded reference (candidate-only
 *   mode, no baseline spent), topLogprobs 20, each length of --canary-tokens (default 1 and 2)
 *   its own column, judgeRound over the last 12 pairs after every probe (alpha α, fireFraction
 *   0.5, 999 permutations), the comparisons at a noise floor of --canary-floor (default 0.002
 *   nats: the same flip-noise figure `canary build` assumes, above the 1.3e-3 nats at which
 *   llama.cpp noise flipped a token here, docs/detection.md).
 * - decode-state:0 is a change only later tokens show (the first generated token is clean): the
 *   price of a 1-token canary.
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
import { probeCopy, type CanaryProbe } from '../src/canary/probes.js';
import { generatedInput } from '../src/canary/build.js';
import { CanaryRunner, costBound, judgeRound, spent, type CanaryPair } from '../src/canary/runner.js';
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
  selectCanaries,
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
  /** The canaries' lengths raced (`canary.maxTokens`), one column each. */
  canaryTokens: number[];
  /** How the canaries are chosen: by gap alone, or by gap × cost (prompt + generated tokens). */
  rank: 'gap' | 'cost';
  write: boolean;
}

const PERMUTATIONS = 999;
const LT_REF = 100;
const B3IT_K = 20;
const CANARIES = 12;
const canaryCopy = (maxTokens: number) => ({ topLogprobs: 20, maxTokens, seed: 0, extraParams: {} });
const canaryMethod = (t: number): string => `canaries, ${t} token${t === 1 ? '' : 's'}`;
const methods = (o: RaceOptions): string[] => ['LT', 'LT, 100 ref.', 'B3IT', ...o.canaryTokens.map(canaryMethod)];
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

/**
 * The pool both B3IT and `canary build` choose from: the built-in canaries, every printable
 * one-character prompt (B3IT's one-token inputs) and every two-letter lowercase prompt.
 */
function pool(): CanaryProbe[] {
  // The same set `logprobe canary build --generated` measures.
  return generatedInput().candidates.map((c) => ({ id: c.id, route: c.route, body: c.body, gap: null }));
}

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

function gapOf(top: TopK): number {
  const v = Object.values(top).sort((a, b) => b - a);
  return v.length >= 2 ? v[0]! - v[1]! : Infinity;
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

/** Everything recorded once from a trusted engine. */
interface Reference {
  lt: TopK[];
  b3it: BorderInput<CanaryProbe>[];
  canaries: BorderInput<CanaryProbe>[];
  /** The canaries' recorded answers, per length raced. */
  golden: Map<number, GoldenIndex>;
}

async function record(url: string, o: RaceOptions): Promise<Reference> {
  const lt: TopK[] = [];
  for (let i = 0; i < LT_REF; i++) lt.push(firstTopK((await post(url, '/v1/completions', LT_BODY)).body));
  const byKey = new Map(o.canaryTokens.map((t) => [t, new Map<string, GoldenRecord & { line: number }>()]));
  const ranked: BorderInput<CanaryProbe>[] = [];
  let line = 0;
  for (const probe of pool()) {
    const token = textOf((await post(url, probe.route, b3itBody(probe))).body);
    line++;
    let measured: BorderInput<CanaryProbe> | null = null;
    for (const t of o.canaryTokens) {
      const copy = probeCopy(probe, { ...canaryCopy(t), model: 'm' });
      const answer = await post(url, probe.route, copy.body);
      const gap = gapOf(firstTopK(answer.body));
      // The cost `canary build` ranks by: prompt tokens + the tokens the shortest length asks.
      measured ??= { probe: { ...probe, gap }, token, gap, cost: costBound(answer, copy.body) };
      const rec = { request: copy.body, baseline: answer, line };
      byKey.get(t)!.set(goldenKey(probe.route, probe.body), rec as unknown as GoldenRecord & { line: number });
    }
    ranked.push(measured!);
  }
  const golden = new Map(
    [...byKey].map(([t, k]): [number, GoldenIndex] => [
      t,
      {
        file: '(recorded in memory)',
        records: k.size,
        byKey: k,
        problems: [],
        minTopK: 20,
        minScoredTopK: null,
        minMaxTokens: t,
      },
    ]),
  );
  return {
    lt,
    b3it: selectBorderInputs(ranked, B3IT_K),
    canaries: selectCanaries(ranked, CANARIES, o.flipNoise, o.rank === 'cost' ? { floor: o.floor } : undefined),
    golden,
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

function canaryStep(
  url: string,
  ref: Reference,
  o: RaceOptions,
  maxTokens: number,
): { step: Step; close: () => Promise<unknown> } {
  const upstream = { url, timeoutMs: 30_000, connectTimeoutMs: 5_000, idleTimeoutMs: 30_000 };
  const p = createUpstreamPool(upstream, { tlsInsecure: false, connections: 1, maxHeaderSize: 64 * 1024 });
  const backends = new Backends(
    { candidate: { ...upstream, pool: p, ownsPool: true, headers: { role: 'candidate' } }, baseline: null },
    { when: 'never', maxPositions: 0, topK: 20, engines: { candidate: 'auto', baseline: 'auto' } },
  );
  const runner = new CanaryRunner({
    pipeline: new PairPipeline(backends),
    reference: ref.golden.get(maxTokens)!,
    copy: canaryCopy(maxTokens),
  });
  const thresholds: Thresholds = { ...DEFAULT_THRESHOLDS, noiseFloor: o.floor };
  const pairs: CanaryPair[] = [];
  let i = 0;
  const step: Step = async () => {
    const probe = ref.canaries[i++ % ref.canaries.length]!.probe;
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
  for (const t of o.canaryTokens) {
    const canary = canaryStep(url, ref, o, t);
    try {
      out[canaryMethod(t)] = await race(canary.step, o.budget, toTheEnd);
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
    log(`canaries: ${ref.canaries.map((b) => `${b.probe.id} ${b.gap.toExponential(1)}`).join(', ')}`);
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

const cell = (x: Outcome, budget: number, mark: string): string =>
  x.detectedAt === null ? `not within ${budget}` : `**${x.detectedAt}**${mark}`;

/**
 * How each canary column compares, change by change, with every other method — the false-alarming
 * ones included (the stricter reading): strictly fewer tokens, a tie, or more.
 */
function verdicts(r: Results, all: readonly Method[], o: RaceOptions): string[] {
  const others = all.filter((k) => !k.startsWith('canaries'));
  return o.canaryTokens.map((t) => {
    const c = canaryMethod(t);
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
  const gaps = (b: BorderInput<CanaryProbe>[]): string =>
    `${b[0]?.gap.toExponential(1) ?? '—'}–${b.at(-1)?.gap.toExponential(1) ?? '—'}`;
  const evals = canaries.map((k) => [...r.quiet.values()].reduce((n, m) => n + m[k]!.evaluations, 0));
  return [
    `${new Date().toISOString().slice(0, 10)}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, shared), Node ${process.version}; llama.cpp engines threads 1, seed ${o.seed}; α = ${o.alpha} per test for LT and the canaries' permutation test; budget ${o.budget} candidate tokens per method and class; canary floor ${o.floor} nats, flip noise ${o.flipNoise}, canaries chosen by ${o.rank === 'cost' ? 'worth per token (min(floor, gap) × (prompt + generated tokens), smallest first)' : 'gap'}; B3IT border gaps ${gaps(refs.b3it)}, canary gaps ${gaps(refs.canaries)} (${refs.canaries.map((c) => `${c.probe.id} ${c.cost ?? '?'}`).join(', ')}: id and tokens a query at the shortest length). ${seconds.toFixed(0)} s in all.`,
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
    'Each canary length against every other method (the † ones included):',
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

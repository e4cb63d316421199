/**
 * Every llama.cpp engine fault through logprobe: a clean baseline and a candidate with the fault,
 * each `logprobe engine --llama` in its own process (threads 1), logprobe in front at sampleRate
 * 1 with a small alert window, N greedy requests. Reports per fault the verdict mix, the median
 * and largest position shift, the flips with their gap classes, and after how many mirrored
 * requests each alert fired. Prints a markdown table and writes it into docs/detection.md
 * (between the `bench:detect` markers). Needs the built CLI (`npm run build`).
 *
 *   npm run bench:detect -- [--requests 40] [--seed 1] [--max-tokens 32] [--faults 'a;b'] [--no-write]
 *   npm run bench:detect -- --canary [--budget 600] [--canary-alpha 0.01] [--canary-floor 0.002] [--flip-noise 0.002]
 *     [--canary-tokens 1,4] [--canary-rank cost|gap]
 */
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { buildConfig } from '../src/config/load.js';
import type { ConfigInput } from '../src/config/schema.js';
import type { AlertTransition } from '../src/core/detector.js';
import { spawnLlamaEngine, type LlamaEngineProcess } from '@logprobe/engine';
import { DEMO_PROMPTS } from '../src/demo/traffic.js';
import { createLogger } from '../src/log/logger.js';
import type { MirroredPair } from '../src/pair/types.js';
import { createRuntime } from '../src/server/server.js';

/** A row: the candidate's fault and the analysis settings it is judged with. */
interface Case {
  fault: string;
  /** How the row's floor is described. */
  floor: string;
  config: ConfigInput;
}

const DEFAULT_FLOOR: ConfigInput = {};
/** Calibration on; repeats on a deterministic engine are bitwise equal, so the floor is `minFloor`. */
const calibrated = (minFloor: number): ConfigInput => ({
  analysis: { noiseFloor: 'auto' },
  calibration: { rate: 0.25, margin: 3, minSamples: 5, minFloor },
});

const DEFAULT_FAULTS =
  'none;batch:8;flash-attention;weights:f16;kv:q8_0;weight-noise:0.01;kv:q4_0;drop-prompt-token:3;zero-layer:1;flash-attention@auto;weights:f16@auto;kv:q8_0@auto;weight-noise:0.01@auto';

const { values } = parseArgs({
  options: {
    requests: { type: 'string', default: '40' },
    seed: { type: 'string', default: '1' },
    'max-tokens': { type: 'string', default: '32' },
    /** `;`-separated; `FAULT@auto` judges with a calibrated floor (minFloor --min-floor). */
    faults: { type: 'string', default: DEFAULT_FAULTS },
    'min-floor': { type: 'string', default: '0.04' },
    'no-write': { type: 'boolean', default: false },
    /** The API the engines play (`vllm`: scoring by prompt_logprobs; `logprobe`: none, free-running only). */
    api: { type: 'string', default: 'vllm' },
    /** Run lengths in-process on the simulated engines (bench/arl.ts) instead of the llama table. */
    arl: { type: 'boolean', default: false },
    pairs: { type: 'string', default: '20000' },
    /** In-control pairs per class at the `noiseFloor: auto` variant (0: none). */
    'auto-pairs': { type: 'string', default: '20000' },
    /** Worker processes for the in-control count (default: one per core). */
    jobs: { type: 'string', default: String(availableParallelism()) },
    runs: { type: 'string', default: '20' },
    cap: { type: 'string', default: '500' },
    alpha: { type: 'string', default: '0.001' },
    'repeat-every': { type: 'string', default: '10' },
    /** With --arl: the confirmation on llama.cpp numerics instead, this many pairs per class. */
    'llama-pairs': { type: 'string', default: '0' },
    /** A config to measure instead of the defaults, as JSON (`{"alert":{"minRequests":10}}`). */
    'config-json': { type: 'string', default: '{}' },
    /** The race of LT, B3IT and logprobe's canaries (bench/canary-race.ts) instead of the fault table. */
    canary: { type: 'boolean', default: false },
    budget: { type: 'string', default: '600' },
    'canary-alpha': { type: 'string', default: '0.01' },
    'canary-floor': { type: 'string', default: '0.002' },
    'flip-noise': { type: 'string', default: '0.002' },
    'canary-tokens': { type: 'string', default: '1,4' },
    'canary-rank': { type: 'string', default: 'cost' },
  },
});
if (values.canary) {
  const lengths = values['canary-tokens'].split(',').map(Number);
  if (lengths.some((t) => !Number.isInteger(t) || t < 1) || !['cost', 'gap'].includes(values['canary-rank'])) {
    console.error('bench:detect: --canary-tokens is a list of whole numbers ≥ 1 (1,4); --canary-rank cost or gap');
    process.exit(2);
  }
  const { runCanaryRace } = await import('./canary-race.js');
  console.log(
    await runCanaryRace({
      seed: Number(values.seed),
      budget: Number(values.budget),
      alpha: Number(values['canary-alpha']),
      floor: Number(values['canary-floor']),
      flipNoise: Number(values['flip-noise']),
      canaryTokens: lengths,
      rank: values['canary-rank'] === 'cost' ? 'cost' : 'gap',
      write: !values['no-write'],
    }),
  );
  process.exit(0);
}
if (values.arl) {
  for (const name of ['pairs', 'auto-pairs', 'jobs', 'runs', 'cap', 'max-tokens', 'repeat-every'] as const) {
    const v = Number(values[name]);
    if (!Number.isInteger(v) || v < (name === 'auto-pairs' ? 0 : 1)) {
      console.error(
        `bench:detect: --${name} must be a whole number${name === 'auto-pairs' ? '' : ' ≥ 1'}, got ${values[name]}`,
      );
      process.exit(2);
    }
  }
  const { runArl, runLlamaConfirm } = await import('./arl.js');
  const run =
    Number(values['llama-pairs']) > 0
      ? (o: Parameters<typeof runArl>[0]) => runLlamaConfirm({ ...o, llamaPairs: Number(values['llama-pairs']) })
      : runArl;
  console.log(
    await run({
      pairs: Number(values.pairs),
      autoPairs: Number(values['auto-pairs']),
      jobs: Number(values.jobs),
      maxTokens: Number(values['max-tokens']),
      seed: Number(values.seed),
      runs: Number(values.runs),
      cap: Number(values.cap),
      alpha: Number(values.alpha),
      repeatEvery: Number(values['repeat-every']),
      write: !values['no-write'],
      config: JSON.parse(values['config-json']) as ConfigInput,
    }),
  );
  process.exit(0);
}
const api = values.api as 'vllm' | 'llamacpp' | 'sglang' | 'logprobe';
const requests = Number(values.requests);
const seed = Number(values.seed);
const maxTokens = Number(values['max-tokens']);
const minFloor = Number(values['min-floor']);
const cases: Case[] = values.faults.split(';').map((item) => {
  const [fault = '', how] = item.split('@');
  return how === 'auto'
    ? { fault, floor: 'auto', config: calibrated(minFloor) }
    : { fault, floor: '0.1', config: DEFAULT_FLOOR };
});
const DOC = fileURLToPath(new URL('../docs/detection.md', import.meta.url));

/** What one case measured. */
interface Row {
  c: Case;
  verdicts: Map<string, number>;
  shifts: number[];
  flips: { ambiguous: number; gray: number; systematic: number; minGap: number; maxGap: number };
  firing: Partial<Record<AlertTransition['alert'], number>>;
  floorUsed: number;
  pairs: number;
  /** Pairs scored teacher-forced, and the loci found. */
  scored: number;
  scoredPositions: number;
  scoredShifted: number;
  loci: Map<string, number>;
}

function body(i: number): { path: string; json: Record<string, unknown> } {
  const base = DEMO_PROMPTS[i % DEMO_PROMPTS.length] ?? '';
  const round = Math.floor(i / DEMO_PROMPTS.length);
  // Later rounds vary the text, so no two requests share a context.
  const prompt = round === 0 ? base : `${base} (take ${round + 1})`;
  return i % 2 === 0
    ? {
        path: '/v1/chat/completions',
        json: { model: 'm', messages: [{ role: 'user', content: prompt }], max_tokens: maxTokens, temperature: 0 },
      }
    : { path: '/v1/completions', json: { model: 'm', prompt, max_tokens: maxTokens, temperature: 0 } };
}

/** A mirrored pair into the case's row: its verdict, shifts, teacher-forced scoring, locus and flip. */
function tally(row: Row, pair: MirroredPair): void {
  row.pairs++;
  const a = pair.analysis;
  const key = a?.verdict ?? pair.outcome;
  row.verdicts.set(key, (row.verdicts.get(key) ?? 0) + 1);
  row.floorUsed = pair.noiseFloor;
  if (!a) return;
  for (const p of a.positions) if (p.shift !== null) row.shifts.push(p.shift);
  // Teacher-forced: every position of the baseline's tokens, scored on both sides.
  if (a.scored?.outcome === 'ok' && a.scored.comparable !== undefined) {
    row.scored++;
    row.scoredPositions += a.scored.comparable;
    row.scoredShifted += a.scored.shifted ?? 0;
  }
  if (a.locus) row.loci.set(a.locus, (row.loci.get(a.locus) ?? 0) + 1);
  if (a.flip) {
    row.flips[a.flip.class]++;
    if (a.flip.gap !== null) {
      row.flips.minGap = Math.min(row.flips.minGap, a.flip.gap);
      row.flips.maxGap = Math.max(row.flips.maxGap, a.flip.gap);
    }
  }
}

async function runCase(c: Case, baseline: LlamaEngineProcess): Promise<Row> {
  const candidate = await spawnLlamaEngine({ seed, fault: c.fault === 'none' ? null : c.fault, api });
  const row: Row = {
    c,
    verdicts: new Map(),
    shifts: [],
    flips: { ambiguous: 0, gray: 0, systematic: 0, minGap: Infinity, maxGap: -Infinity },
    firing: {},
    floorUsed: NaN,
    pairs: 0,
    scored: 0,
    scoredPositions: 0,
    scoredShifted: 0,
    loci: new Map(),
  };
  const config = buildConfig({
    ...c.config,
    listen: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1, concurrency: 1, queueSize: 1024, maxTokens },
    alert: { window: 20, minRequests: 10, fireFraction: 0.5, forSeconds: 0, cusum: { k: 0.5, h: 5 } },
    capture: { enabled: false },
    probe: { atStart: 'off' },
    log: { level: 'error' },
  });
  const runtime = createRuntime(config, {
    // Run from the .ts sources (tsx): the mirror worker needs tsx's loader registered in it.
    mirrorWorkerUrl: new URL('../test/helpers/mirror-worker.mjs', import.meta.url),
    logger: createLogger({ level: 'error' }),
    listeners: {
      onPair: (pair: MirroredPair) => tally(row, pair),
      onAlert(t) {
        // Reported before the pair that caused it: that pair is number pairs + 1.
        if (t.to === 'firing') row.firing[t.alert] ??= row.pairs + 1;
      },
    },
  });
  try {
    const { proxyUrl } = await runtime.listen();
    for (let i = 0; i < requests; i++) {
      const { path, json } = body(i);
      const res = await request(proxyUrl + path, {
        method: 'POST',
        body: JSON.stringify(json),
        headers: { 'content-type': 'application/json' },
      });
      await res.body.dump();
      if (res.statusCode !== 200) throw new Error(`${c.fault}: request ${i} answered ${res.statusCode}`);
    }
    await runtime.mirror?.idle();
  } finally {
    await runtime.close();
    await candidate.stop();
  }
  return row;
}

const num = (x: number): string =>
  !Number.isFinite(x) ? '—' : x === 0 ? '0' : x < 0.01 ? x.toExponential(1) : x.toFixed(x < 1 ? 3 : 2);

function median(xs: number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

const ORDER = [
  'identical',
  'noise',
  'local_shift',
  'global_shift',
  'early_shift',
  'tokenizer_mismatch',
  'incomparable',
];

function line(r: Row): string {
  const mix = [...r.verdicts.entries()]
    .sort(([a], [b]) => ((ORDER.indexOf(a) + 99) % 99) - ((ORDER.indexOf(b) + 99) % 99))
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  const f = r.flips;
  const flips = f.ambiguous + f.gray + f.systematic;
  const flipText =
    flips === 0
      ? '0'
      : `${flips}: ${f.ambiguous} amb · ${f.gray} gray · ${f.systematic} sys (gaps ${num(f.minGap)}–${num(f.maxGap)})`;
  const alert = (name: AlertTransition['alert']): string =>
    r.firing[name] === undefined ? 'none' : `#${r.firing[name]}`;
  const floor = r.c.floor.startsWith('auto') ? `auto → ${num(r.floorUsed)}` : r.c.floor;
  const loci = [...r.loci.entries()].map(([k, v]) => `${k} ${v}`).join(', ') || '—';
  const scored = r.scored === 0 ? '0' : `${r.scored} (${r.scoredShifted}/${r.scoredPositions} shifted)`;
  return `| ${r.c.fault === 'none' ? 'none (two clean processes)' : r.c.fault} | ${floor} | ${mix} | ${scored} | ${loci} | ${num(median(r.shifts))} | ${num(Math.max(...r.shifts, 0))} | ${flipText} | ${alert('LogprobGlobalShift')} | ${alert('LogprobSustainedShift')} |`;
}

if (!existsSync(fileURLToPath(new URL('../dist/cli/main.js', import.meta.url)))) {
  console.error('bench:detect starts engines with the built CLI: run npm run build first');
  process.exit(2);
}
const started = performance.now();
const baseline = await spawnLlamaEngine({ seed, api });
const rows: Row[] = [];
try {
  for (const c of cases) {
    const r = await runCase(c, baseline);
    rows.push(r);
    console.error(`${c.fault} (floor ${c.floor}): ${r.pairs} pairs`);
  }
} finally {
  await baseline.stop();
}

const table = [
  `${requests} greedy requests per fault (chat and completions alternating, max_tokens ${maxTokens}), seed ${seed}, threads 1, engines playing the ${api} API (teacher-forced scoring when a pair diverges: scored pairs, with their shifted/comparable positions, and the locus; shifts and flips are the free-running positions'), ${cpus()[0]?.model.trim() ?? 'unknown CPU'}, Node ${process.version}; alert window 20, minRequests 10, fireFraction 0.5, forSeconds 0, CUSUM k 0.5 h 5. Alert columns: the mirrored request at which it fired. ${((performance.now() - started) / 1000).toFixed(0)} s in all.`,
  '',
  '| candidate fault | noise floor | verdicts | scored pairs (positions shifted) | locus | median shift | max shift | flips (gap classes) | LogprobGlobalShift | LogprobSustainedShift |',
  '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ...rows.map(line),
].join('\n');
console.log(table);

if (!values['no-write']) {
  const BEGIN = '<!-- bench:detect begin -->';
  const END = '<!-- bench:detect end -->';
  const doc = await readFile(DOC, 'utf8');
  const from = doc.indexOf(BEGIN);
  const to = doc.indexOf(END);
  if (from < 0 || to < from) throw new Error(`${DOC} has no ${BEGIN} … ${END} section`);
  await writeFile(DOC, `${doc.slice(0, from + BEGIN.length)}\n${table}\n${doc.slice(to)}`);
  console.error(`written to ${DOC}`);
}

/**
 * `npm run bench` (issue #8): the same workload, side by side in one run, against the upstream
 * directly, logprobe (mirroring off, sampleRate 0.1 and 1.0), nginx, haproxy and
 * @portkey-ai/gateway; load generator, upstream and proxies each in their own process.
 * Writes bench/RESULTS.md and bench/out/results.json.
 *
 *   npm run bench                 full run (~12 minutes)
 *   npm run bench -- --quick      under 2 minutes, one line per figure (regression checks)
 *   options: --no-portkey  --profile (cpu-prof logprobe, mirroring off)  --no-build
 *
 * Lanes: `--lane json` (the default: the fixed-JSON lane above), `--lane streams` (only the
 * streaming lane, bench/streams.ts: long SSE streams, N = 100, 1,000, 5,000 concurrent clients;
 * with --quick N = 100 and 1,000, one round; writes bench/out/streams.json and the "Streaming
 * lane" section of bench/RESULTS.md), `--lane all` (both). Streaming-lane options:
 *   --n 100,1000        the Ns (default 100,1000,5000; quick 100,1000)
 *   --rounds R          rounds per N (default 5; quick 1): each figure is reported as median (min–max) over the
 *                       rounds, and a target gets PASS/FAIL only when the 90 % interval of the median is on one
 *                       side of it (up to 5 rounds: every round; 9 rounds: all but the lowest and the highest)
 *   --targets a,b       of direct,nginx,node-floor,logprobe-off,logprobe-0.1,nginx-w2,logprobe-off-w2,logprobe-0.1-w2,nginx-shadow
 *   --shadow            the targets nginx and nginx-shadow (nginx with `mirror` to logprobe in shadow mode, sampleRate 1)
 *                       (node-floor: bench/node-floor.ts, node:http + undici and nothing else)
 *                       (default all but logprobe-0.1-w2; -w2: nginx with 2 workers, logprobe with listen.workers 2)
 *   --logprobe-root DIR run (and build, unless --no-build) the logprobe of another checkout
 *   --mirror-delay-ms MS  the upstream's delay for the mirror's non-streaming copies (default 64 × 20)
 *   --harness-nice K    nice value of the upstream and the load generator (default -5; 0: none)
 *   --streams K         streams per client per run (default 3): more kept-alive streams per round for the
 *                       floor's TTFB check (its p99 is over each client's streams after the first)
 *   --pin               the targets on the upper half of the CPUs it may use, the upstreams, the load generators and the
 *                       bench itself on the rest (taskset): on a 2-core machine the scheduler then cannot put a
 *                       target's work on the core its load is made on
 * RESULTS.md gets the streaming section only from a run of the default Ns and targets without --quick.
 * LOGPROBE_BENCH_NODE_ARGS="--flag …" starts every logprobe target with these node flags (to try V8 or
 * GC settings side by side with a run without them).
 */
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { setPriority } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { killAll, runToEnd } from './lib/proc.js';
import { machine } from './lib/machine.js';
import { measure, mirrorAB, type MirrorAB, type Plan } from './measure.js';
import { startLogprobe } from './proxies/logprobe.js';
import { startNginx } from './proxies/nginx.js';
import { startHaproxy } from './proxies/haproxy.js';
import { startPortkey } from './proxies/portkey.js';
import { isRunning, type Running, type Unavailable } from './proxies/types.js';
import { captureResponses, startFixed, startSim, type Upstream } from './upstreams.js';
import { coreBench } from './core.js';
import { summarize, verdicts, type Summary } from './figures.js';
import { quickLines, writeResults } from './report.js';
import { profileTop } from './lib/profile.js';
import {
  DEFAULT_TARGETS,
  FULL_NS,
  QUICK_NS,
  runStreams,
  SHADOW_TARGETS,
  STREAMS_PER_CLIENT,
  TARGET_KEYS,
} from './streams.js';
import { streamsChecks, streamsMarkdown, streamsText, writeStreamsSection } from './streams-report.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUT = join(ROOT, 'bench', 'out');
const argv = process.argv.slice(2);
const quick = argv.includes('--quick');
const wantPortkey = !argv.includes('--no-portkey');
const profile = argv.includes('--profile');
const QUEUE_SIZE = 128;
const flag = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
/** Rounds per N of the streaming lane: with 3, two runs on a shared 2-core machine disagreed (#27); a verdict needs the 90 % interval of the median on one side of the target (at 5 rounds: every round). */
const STREAMS_ROUNDS = 5;
const lane = flag('--lane') ?? 'json';
if (!['json', 'streams', 'all'].includes(lane)) {
  process.stderr.write(`--lane ${lane}: expected json, streams or all\n`);
  process.exit(2);
}

const log = (s: string) => process.stdout.write(`${s}\n`);

const FULL: Plan = {
  rounds: 3,
  probeRounds: 3,
  seconds: 5,
  connections: 32,
  rate: 400,
  sseRate: 100,
  probeSeconds: 5,
  sse: true,
  latency: true,
  warmSse: true,
  abPairs: 8,
};
const QUICK: Plan = {
  rounds: 2,
  probeRounds: 1,
  seconds: 2,
  connections: 32,
  rate: 400,
  sseRate: 100,
  probeSeconds: 2,
  sse: true,
  latency: true,
  warmSse: false,
  abPairs: 3,
};
const ENGINE: Plan = {
  rounds: 3,
  probeRounds: 0,
  seconds: 5,
  connections: 32,
  rate: 0,
  sseRate: 0,
  probeSeconds: 0,
  sse: false,
  latency: false,
  warmSse: false,
  abPairs: 0,
};

/** Starts the targets in front of `upstream`; the unavailable ones say why. */
async function startTargets(
  upstream: Upstream,
  baseline: Upstream,
  set: 'all' | 'quick' | 'engine',
): Promise<Array<Running | Unavailable>> {
  const out: Array<Running | Unavailable> = [];
  const pids = async () => [upstream.proc.pid];
  out.push({
    key: 'direct',
    label: 'upstream directly',
    url: upstream.url,
    headers: {},
    pids,
    stop: async () => undefined,
  });
  out.push(await startNginx({ upstream: upstream.url, outDir: OUT, workers: 1 }));
  out.push(await startHaproxy({ upstream: upstream.url, outDir: OUT }));
  const lp = (key: string, label: string, sampleRate: number, logLevel: 'warn' | 'info' = 'warn') =>
    startLogprobe({
      key,
      label,
      candidate: upstream.url,
      baseline: baseline.url,
      sampleRate,
      logLevel,
      outDir: OUT,
      profile: profile && key === 'logprobe-off',
    });
  out.push(await lp('logprobe-off', 'logprobe, mirroring off', 0));
  if (set === 'all') out.push(await lp('logprobe-off-info', 'logprobe, mirroring off, log info', 0, 'info'));
  if (set !== 'engine') {
    if (set === 'all') out.push(await lp('logprobe-0.1', 'logprobe, sampleRate 0.1', 0.1));
    out.push(await lp('logprobe-1.0', 'logprobe, sampleRate 1.0', 1));
  }
  out.push(await startPortkey({ upstream: upstream.url, skip: wantPortkey ? undefined : 'skipped (--no-portkey)' }));
  return out;
}

async function scenario(
  name: string,
  upstream: Upstream,
  baseline: Upstream,
  set: 'all' | 'quick' | 'engine',
  plan: Plan,
) {
  log(`\n${name}: starting targets`);
  const all = await startTargets(upstream, baseline, set);
  const running = all.filter(isRunning);
  for (const t of all) if (!isRunning(t)) log(`  ${t.label}: ${t.reason}`);
  try {
    const raw = await measure(running, plan, log);
    const off = running.find((t) => t.key === 'logprobe-off');
    const on = running.find((t) => t.key === 'logprobe-1.0');
    let ab: { shared: MirrorAB; remote: MirrorAB } | null = null;
    if (off && on && plan.abPairs > 0) {
      log('  mirror a/b, the baseline stand-in at normal priority (it shares these 2 CPUs with the proxy)');
      const shared = await mirrorAB(off, on, plan, log);
      // The baseline is a remote server in production: at nice 19 here, its CPU stops counting
      // against the proxy, and what is left is logprobe's own cost.
      setPriority(baseline.proc.pid, 19);
      log('  mirror a/b, the baseline stand-in at nice 19 (as if on its own machine)');
      const remote = await mirrorAB(off, on, plan, log);
      setPriority(baseline.proc.pid, 0);
      ab = { shared, remote };
    }
    const sums = new Map<string, Summary>([...raw.values()].map((r) => [r.key, summarize(r)]));
    return { sums, ab, unavailable: all.filter((t): t is Unavailable => !isRunning(t)), raw: [...raw.values()] };
  } finally {
    for (const t of running) await t.stop();
  }
}

async function build(root: string): Promise<void> {
  const b = await runToEnd('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: root, timeoutMs: 180_000 });
  if (b.code !== 0)
    log(
      `build${root === ROOT ? '' : ` of ${root}`} reported errors (bench runs the emitted dist/ anyway):\n${b.stdout.split('\n').slice(0, 5).join('\n')}`,
    );
}

/** The fixed-JSON lane (`--lane json`, the default). */
async function jsonLane(): Promise<void> {
  const began = Date.now();
  rmSync(OUT, { recursive: true, force: true });
  mkdirSync(OUT, { recursive: true });
  const info = machine();
  log(
    `logprobe bench${quick ? ' --quick' : ''}: ${info.nproc} cpu ${info.cpu}, node ${info.versions.node}, load ${info.load}`,
  );

  const sim = await startSim('sim-engine', 1);
  const canned = await captureResponses(sim.url, OUT);
  const up = await startFixed('upstream', canned);
  const base = await startFixed('baseline', canned);

  const fixed = await scenario('fixed-response upstream', up, base, quick ? 'quick' : 'all', quick ? QUICK : FULL);
  await up.proc.stop();
  await base.proc.stop();

  let engine: Awaited<ReturnType<typeof scenario>> | null = null;
  if (!quick) {
    const simB = await startSim('sim-baseline', 1);
    engine = await scenario('simulated engine upstream', sim, simB, 'engine', ENGINE);
    await simB.proc.stop();
  }
  await sim.proc.stop();

  const core = await coreBench(quick ? 300 : 1500);
  const checks = verdicts(fixed.sums, core.rows, QUEUE_SIZE, fixed.ab);
  const lines = quickLines(fixed.sums, engine?.sums ?? null, core.rows, checks, fixed.ab);
  log('');
  for (const l of lines) log(l);
  const top = profile ? profileTop(join(OUT, 'prof', 'logprobe-off'), 25) : null;
  if (top) log(`\nCPU profile of logprobe (mirroring off), top self time:\n${top}`);
  const elapsed = (Date.now() - began) / 1000;
  writeFileSync(
    join(OUT, 'results.json'),
    JSON.stringify(
      { info, quick, fixed: fixed.raw, ab: fixed.ab, engine: engine?.raw ?? null, core, checks, elapsed },
      null,
      2,
    ),
  );
  if (!quick) {
    writeResults(join(ROOT, 'bench', 'RESULTS.md'), {
      info,
      plan: FULL,
      engine: ENGINE,
      fixed: fixed.sums,
      unavailable: fixed.unavailable,
      engineSums: engine?.sums ?? null,
      core,
      checks,
      elapsed,
      queueSize: QUEUE_SIZE,
      ab: fixed.ab,
    });
    log('\nwrote bench/RESULTS.md');
  }
  log(`bench took ${elapsed.toFixed(0)} s`);
}

/** The commit of the logprobe that ran, and whether its src/ had uncommitted changes. */
function commitOf(root: string): string {
  const head = spawnSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
  if (head.status !== 0) return `the checkout at ${root}`;
  const dirty =
    spawnSync('git', ['-C', root, 'status', '--porcelain', '--', 'src'], { encoding: 'utf8' }).stdout.trim() !== '';
  return `commit ${head.stdout.trim()}${dirty ? ' with uncommitted changes in src/' : ''}`;
}

/** The streaming lane (`--lane streams`). */
async function streamsLane(logprobeRoot: string): Promise<void> {
  mkdirSync(OUT, { recursive: true });
  rmSync(join(OUT, 'streams'), { recursive: true, force: true });
  const list = (v: string | undefined) =>
    v
      ?.split(',')
      .map((x) => x.trim())
      .filter(Boolean);
  const ns = list(flag('--n'))?.map(Number) ?? (quick ? QUICK_NS : FULL_NS);
  const targets = list(flag('--targets')) ?? (argv.includes('--shadow') ? [...SHADOW_TARGETS] : [...DEFAULT_TARGETS]);
  const bad = [
    ...ns.filter((n) => !Number.isInteger(n) || n < 1 || n > 5000).map(String),
    ...targets.filter((t) => !(TARGET_KEYS as readonly string[]).includes(t)),
  ];
  if (bad.length > 0)
    throw new Error(
      `streams lane: bad --n or --targets value(s): ${bad.join(', ')} (N from 1 to 5000; targets ${TARGET_KEYS.join(', ')})`,
    );
  const rounds = Number(flag('--rounds') ?? (quick ? 1 : STREAMS_ROUNDS));
  const delay = flag('--mirror-delay-ms');
  const info = machine();
  const commit = commitOf(logprobeRoot);
  log(
    `logprobe bench --lane streams${quick ? ' --quick' : ''}: ${info.nproc} cpu ${info.cpu}, node ${info.versions.node}, nginx ${info.versions.nginx}, load ${info.load}; logprobe ${commit}`,
  );
  const nice = flag('--harness-nice');
  const perClient = flag('--streams');
  if (perClient !== undefined && !(Number.isInteger(Number(perClient)) && Number(perClient) >= 1))
    throw new Error(`streams lane: --streams must be a whole number ≥ 1, got ${perClient}`);
  const r = await runStreams({
    root: ROOT,
    outDir: OUT,
    quick,
    ns,
    rounds,
    targets,
    logprobeRoot,
    jsonDelayMs: delay === undefined ? null : Number(delay),
    ...(nice !== undefined ? { harnessNice: Number(nice) } : {}),
    ...(perClient !== undefined ? { streamsPerClient: Number(perClient) } : {}),
    pin: argv.includes('--pin'),
    log,
  });
  const checks = streamsChecks(r);
  log(streamsText(r, checks));
  writeFileSync(join(OUT, 'streams.json'), JSON.stringify({ info, commit, ...r, checks }, null, 2));
  log('\nwrote bench/out/streams.json');
  const complete =
    !quick &&
    ns.join() === FULL_NS.join() &&
    DEFAULT_TARGETS.every((k) => targets.includes(k)) &&
    r.unavailable.length === 0 &&
    rounds >= 3 &&
    r.options.streamsPerClient === STREAMS_PER_CLIENT;
  if (complete) {
    writeStreamsSection(join(ROOT, 'bench', 'RESULTS.md'), streamsMarkdown(r, checks, info, commit));
    log('wrote the "Streaming lane" section of bench/RESULTS.md');
  } else log('bench/RESULTS.md not written (a quick or partial streams run)');
  log(`streams lane took ${r.elapsedS} s`);
}

async function main(): Promise<void> {
  const logprobeRoot = resolve(flag('--logprobe-root') ?? ROOT);
  if (!existsSync(join(logprobeRoot, 'bin', 'logprobe.js')))
    throw new Error(`--logprobe-root ${logprobeRoot}: no bin/logprobe.js there`);
  if (!argv.includes('--no-build')) {
    if (lane !== 'streams') await build(ROOT);
    if (lane !== 'json' && (lane === 'streams' || resolve(logprobeRoot) !== resolve(ROOT))) await build(logprobeRoot);
  }
  if (lane !== 'streams') await jsonLane();
  if (lane !== 'json') await streamsLane(logprobeRoot);
}

main().then(
  () => {
    killAll();
    process.exit(0);
  },
  (err: unknown) => {
    process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`);
    killAll();
    process.exit(1);
  },
);

/**
 * The streaming lane (`npm run bench -- --lane streams`): LLM-shaped traffic, long SSE streams,
 * hundreds to thousands at once. Side by side in one run, rounds alternating the order of the
 * targets: the upstream directly, nginx, the transport's floor (node:http + undici alone), logprobe
 * with mirroring off and at sampleRate 0.1.
 *
 * Processes, each its own (and each with `ulimit -n 20000`): the upstream (bench/streams-upstream.ts:
 * 64 chunks 20 ms apart), a second one as the mirror's baseline, the targets, and per run a load
 * generator (bench/streams-load.ts: N clients × 3 streams one after the other). For every N
 * the targets are started afresh and warmed up, so "idle RSS" is a warmed-up process that has
 * not yet held N streams.
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { setPriority } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { start } from './lib/proc.js';
import {
  allowedCpus,
  cpuMsOf,
  NOFILE,
  pinning,
  rssKBOf,
  rssSampler,
  splitCpus,
  ticksPerSecond,
  withNofile,
} from './lib/procstat.js';
import { mirrorCounters, type MirrorCounters } from './lib/metrics.js';
import { startNginx } from './proxies/nginx.js';
import { startLogprobe } from './proxies/logprobe.js';
import { startNodeFloor } from './proxies/node-floor.js';
import { isRunning, type Running, type Unavailable } from './proxies/types.js';
import type { LoadResult, LoadSpec } from './streams-load.js';

export const CHUNKS = 64;
export const GAP_MS = 20;
export const STREAMS_PER_CLIENT = 3;
export const FULL_NS = [100, 1000, 5000];
export const QUICK_NS = [100, 1000];
/**
 * Every target: the upstream directly, nginx with 1 and 2 worker processes, the transport's floor
 * (bench/node-floor.ts: node:http + undici and nothing else), logprobe with mirroring off and at
 * sampleRate 0.1, each as one process and with `listen.workers: 2` (the
 * `-w2` ones, compared with nginx-w2: equal worker counts).
 */
export const TARGET_KEYS = [
  'direct',
  'nginx',
  'node-floor',
  'logprobe-off',
  'logprobe-0.1',
  'nginx-w2',
  'logprobe-off-w2',
  'logprobe-0.1-w2',
  'nginx-shadow',
] as const;
/**
 * `--shadow`: nginx alone beside nginx with `mirror` to a logprobe in shadow mode comparing every
 * copy it gets (sampleRate 1): what the clients of an nginx pay for a logprobe behind it.
 */
export const SHADOW_TARGETS: readonly string[] = ['nginx', 'nginx-shadow'];
/** What a run without --targets measures (logprobe-0.1-w2 on request: it adds a fifth of the run's time). */
export const DEFAULT_TARGETS: readonly string[] = [
  'direct',
  'nginx',
  'node-floor',
  'logprobe-off',
  'logprobe-0.1',
  'nginx-w2',
  'logprobe-off-w2',
];
/** The worker count a target key names (`-w2`: 2), 1 otherwise. */
export const workersOf = (key: string): number => Number(/-w(\d+)$/.exec(key)?.[1] ?? 1);
/**
 * The candidate upstream and the load generator run at this nice value by default (root only;
 * ignored otherwise; `--harness-nice 0` turns it off): on a shared 2-core machine the harness then gets its CPU first and the target under
 * test bears the shortage, so "direct" shows the harness's own floor and the targets' figures
 * are theirs. The baseline upstream and the targets run at 0.
 */
export const HARNESS_NICE_DEFAULT = -5;
/**
 * The upstream closes connections idle this long. Every target keeps its upstream pool between
 * its runs, and under load a node-based pool holds up to ~2N connections for N streams (see
 * bench/RESULTS.md): with 65 s, the idle pools of the targets run before used up the upstream's
 * 20,000 descriptors at N = 5,000, and libuv's EMFILE fallback (accept, then close) cut streams
 * of whichever target ran next. {@link quiesce} waits for room before each run.
 */
export const UPSTREAM_KEEPALIVE_MS = 10_000;
/** How long after a run the mirror's queue may take to drain before its counters are read anyway. */
export const MIRROR_DRAIN_MAX_MS = 180_000;
/** Other processes' CPU (cores) above which a run is done again. */
export const FOREIGN_MAX_CORES = 0.3;

let harnessNice = HARNESS_NICE_DEFAULT;
function prioritize(pid: number): boolean {
  if (harnessNice === 0) return false;
  try {
    setPriority(pid, harnessNice);
    return true;
  } catch {
    return false;
  }
}

export interface StreamsOptions {
  root: string;
  outDir: string;
  quick: boolean;
  ns: number[];
  rounds: number;
  targets: string[];
  /** The checkout whose logprobe runs (bin/logprobe.js and its dist/). */
  logprobeRoot: string;
  /** The upstream's delay before a non-streaming answer (the mirror's copies); null: chunks × gap. */
  jsonDelayMs: number | null;
  /** Nice value of the upstream and the load generator (default HARNESS_NICE_DEFAULT; 0: none). */
  harnessNice?: number;
  /** Streams each client does one after the other per run (default STREAMS_PER_CLIENT). */
  streamsPerClient?: number;
  /** `--pin`: the targets on the upper half of the CPUs this process may use, the harness and this process on the rest ({@link splitCpus}). */
  pin?: boolean;
  log: (s: string) => void;
}

/** What the upstream counted over one run (bench/streams-upstream.ts). */
export interface UpstreamStats {
  acceptedStream: number;
  acceptedJson: number;
  open: number;
  peakOpen: number;
  streamsStarted: number;
  streamsFinished: number;
  streamsAborted: number;
  live: number;
  peakLive: number;
  jsonRequests: number;
  chunksWritten: number;
  lateMs: { p50: number; p99: number; max: number; count: number };
  memoryKB: number;
}

export interface RunResult {
  key: string;
  n: number;
  round: number;
  /** Position of the target in this round's order (0 = first). */
  order: number;
  load: LoadResult;
  /** Summed VmRSS of the target's processes right before the run, and the peak sampled during it (every 100 ms). KB. */
  idleKB: number;
  peakKB: number;
  /** utime + stime of the target's processes over the run, ms. */
  cpuMs: number;
  /** The same of the upstream (candidate) and of the baseline upstream, ms. */
  upstreamCpuMs: number;
  baselineCpuMs: number;
  upstream: UpstreamStats;
  mirror?: { ok: number; dropped: number; other: number; queueDepth: number };
  /** The machine over the run (/proc/stat), in cores: busy, of it softirq (the network stack), steal. */
  machine: {
    wallMs: number;
    busyCores: number;
    softirqCores: number;
    stealCores: number;
    oursCores: number;
    foreignCores: number;
  };
  /** Listen-queue overflows + drops on the machine during the run (a SYN or ACK dropped: 1 s, 3 s, 7 s … of retransmission for that connection). */
  listenOverflows: number;
  /** 1 when the run was done twice because other processes took too much CPU (the quieter kept). */
  repeated: number;
}

export interface TargetSummary {
  key: string;
  label: string;
  n: number;
  rounds: number;
  completed: number;
  cut: number;
  cutReasons: Record<string, number>;
  ttfbP50: number;
  ttfbP99: number;
  /** TTFB p99 of the clients' first streams only (the first request on each connection). */
  ttfbFirstP99: number;
  /** TTFB p99 of the other streams (the kept-alive ones). */
  ttfbWarmP99: number;
  addedP50: number;
  addedP99: number;
  addedMax: number;
  /** RSS right before the target's first run at this N (a fresh, warmed-up process), KB. */
  idleKB: number;
  /** Median over rounds of the peak RSS, KB. */
  peakKB: number;
  /** (peak − idle) ÷ N, KB. */
  kbPerStream: number;
  cpuMsPerStream: number;
  /** Median over rounds of the stream connections the upstream accepted during the run. */
  upstreamConns: number;
  /** Median over rounds of the connections the mirror opened to the candidate (first request non-streaming). */
  mirrorConns: number;
  /** Median over rounds: streams live at the upstream at once, at the peak; connections open at the peak. */
  upstreamPeakStreams: number;
  upstreamPeakOpen: number;
  /** Harness: the upstream's lateness p99 and the load generator's CPU share (medians), ms / cores. */
  upstreamLateP99: number;
  loadCpuShare: number;
  loadLoopP99: number;
  machineBusyCores: number;
  /** Other processes of the shared machine during the runs (median), cores. */
  foreignCores: number;
  wallS: number;
  mirror?: { ok: number; dropped: number; other: number };
}

export interface StreamsResult {
  options: {
    quick: boolean;
    ns: number[];
    rounds: number;
    targets: string[];
    chunks: number;
    gapMs: number;
    streamsPerClient: number;
    jsonDelayMs: number;
    logprobeRoot: string;
    harnessNice: number | null;
    /** The CPU sets of `--pin` (taskset lists), or null without it. */
    pin: { target: string; harness: string } | null;
  };
  unavailable: Unavailable[];
  runs: RunResult[];
  summaries: TargetSummary[];
  labels: Record<string, string>;
  elapsedS: number;
}

/** A run's CPU per completed stream, ms (its summary's `cpuMsPerStream` is the median over rounds). */
export const cpuMsPerStream = (r: RunResult): number => r.cpuMs / Math.max(1, r.load.completed);

export const median = (xs: readonly number[]): number => {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

function rotated<T>(xs: readonly T[], r: number): T[] {
  const k = xs.length === 0 ? 0 : r % xs.length;
  return [...xs.slice(k), ...xs.slice(0, k)];
}

interface Upstream {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

async function startUpstream(o: StreamsOptions, name: string, nice: boolean): Promise<Upstream> {
  const args = [
    '--import',
    'tsx',
    'bench/streams-upstream.ts',
    '--chunks',
    String(CHUNKS),
    '--gap-ms',
    String(GAP_MS),
    '--keep-alive-ms',
    String(UPSTREAM_KEEPALIVE_MS),
    ...(o.jsonDelayMs !== null ? ['--json-delay-ms', String(o.jsonDelayMs)] : []),
  ];
  const { proc, match } = await start({
    name,
    ...withNofile('node', args, NOFILE, 'harness'),
    cwd: o.root,
    ready: /listening on (http:\/\/\S+)/,
    logFile: join(o.outDir, 'streams', `${name}.log`),
  });
  if (nice) prioritize(proc.pid);
  return { url: match[1] as string, pid: proc.pid, stop: () => proc.stop() };
}

async function upstreamCall(u: Upstream, what: 'stats' | 'reset'): Promise<UpstreamStats> {
  const res = await fetch(`${u.url}/__${what}`, {
    method: what === 'reset' ? 'POST' : 'GET',
    signal: AbortSignal.timeout(10_000),
  });
  return (await res.json()) as UpstreamStats;
}

/** TcpExt ListenOverflows + ListenDrops so far (/proc/net/netstat): connections a listen queue could not take. */
function listenOverflows(): number {
  try {
    const lines = readFileSync('/proc/net/netstat', 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('TcpExt:'));
    const names = lines[0]?.split(/\s+/) ?? [];
    const values = lines[1]?.split(/\s+/).map(Number) ?? [];
    return (values[names.indexOf('ListenOverflows')] ?? 0) + (values[names.indexOf('ListenDrops')] ?? 0);
  } catch {
    return NaN;
  }
}

/** Machine-wide CPU ticks from /proc/stat's first line. */
function machineTicks(): { busy: number; softirq: number; steal: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = f;
  return { busy: user + nice + system + irq + softirq + steal, softirq, steal };
}

async function startTargets(
  o: StreamsOptions,
  up: Upstream,
  base: Upstream,
  n: number,
): Promise<Array<Running | Unavailable>> {
  const out: Array<Running | Unavailable> = [];
  const dir = join(o.outDir, 'streams', `n${n}`);
  mkdirSync(dir, { recursive: true });
  for (const key of o.targets) {
    if (key === 'direct')
      out.push({
        key,
        label: 'upstream directly',
        url: up.url,
        headers: {},
        pids: async () => [up.pid],
        stop: async () => undefined,
      });
    else if (key === 'nginx' || key === 'nginx-w2')
      out.push(
        await startNginx({
          upstream: up.url,
          outDir: dir,
          key,
          workers: workersOf(key),
          workerConnections: 12_000,
          nofile: NOFILE,
        }),
      );
    else if (key === 'node-floor') out.push(await startNodeFloor({ upstream: up.url, outDir: dir, nofile: NOFILE }));
    else if (key === 'nginx-shadow') out.push(await startShadow(o, up, base, dir));
    else if (/^logprobe-(off|0\.1)(-w2)?$/.test(key)) {
      const rate = key.startsWith('logprobe-off') ? 0 : 0.1;
      const workers = workersOf(key);
      try {
        out.push(
          await startLogprobe({
            key,
            label: `logprobe, ${rate === 0 ? 'mirroring off' : 'sampleRate 0.1'}${workers > 1 ? `, ${workers} workers` : ''}`,
            ...(workers > 1 ? { workers } : {}),
            candidate: up.url,
            baseline: base.url,
            sampleRate: rate,
            logLevel: 'warn',
            outDir: dir,
            root: o.logprobeRoot,
            nofile: NOFILE,
          }),
        );
      } catch (err) {
        out.push({ key, label: key, reason: `did not start: ${(err as Error).message.split('\n')[0]}` });
      }
    } else out.push({ key, label: key, reason: 'unknown target' });
  }
  return out;
}

/**
 * nginx in front of the upstream with `mirror` to logprobe in shadow mode (sampleRate 1, both
 * upstreams as candidate and baseline). The clients' figures, CPU and RSS are nginx's (the client
 * path); the mirror counters are logprobe's (its admin port).
 */
async function startShadow(
  o: StreamsOptions,
  up: Upstream,
  base: Upstream,
  dir: string,
): Promise<Running | Unavailable> {
  const key = 'nginx-shadow';
  let lp: Running;
  try {
    lp = await startLogprobe({
      key: 'logprobe-shadow',
      label: 'logprobe (shadow mode, sampleRate 1)',
      candidate: up.url,
      baseline: base.url,
      sampleRate: 1,
      mode: 'shadow',
      logLevel: 'warn',
      outDir: dir,
      root: o.logprobeRoot,
      nofile: NOFILE,
    });
  } catch (err) {
    return { key, label: key, reason: `logprobe (shadow) did not start: ${(err as Error).message.split('\n')[0]}` };
  }
  const ng = await startNginx({
    upstream: up.url,
    outDir: dir,
    key,
    label: 'nginx (1 worker) mirroring to logprobe in shadow mode',
    workers: 1,
    // Three connections per stream (the client's, the candidate's, the mirror's to logprobe): at
    // 12,000 nginx ran out at N = 5,000 ("worker_connections are not enough") and cut 424 streams.
    workerConnections: 18_000,
    nofile: NOFILE,
    mirrorTo: lp.url,
  });
  if (!isRunning(ng)) {
    await lp.stop();
    return ng;
  }
  return {
    ...ng,
    adminUrl: lp.adminUrl,
    stop: async () => {
      await ng.stop();
      await lp.stop();
    },
  };
}

/** One load-generator process against one target; resolves with its result. */
async function load(
  o: StreamsOptions,
  t: Running,
  spec: Omit<LoadSpec, 'url' | 'out' | 'headers'>,
  tag: string,
  onStart: () => void = () => undefined,
): Promise<LoadResult> {
  const out = join(o.outDir, 'streams', `load-${tag}.json`);
  const full: LoadSpec = { ...spec, url: `${t.url}/v1/chat/completions`, out, headers: t.headers };
  const { proc } = await start({
    name: `load-${tag}`,
    ...withNofile('node', ['--import', 'tsx', 'bench/streams-load.ts', JSON.stringify(full)], NOFILE, 'harness'),
    cwd: o.root,
    ready: /load ready/,
    timeoutMs: 60_000,
    logFile: join(o.outDir, 'streams', `load-${tag}.log`),
  });
  const exited = new Promise<number | null>((resolve) => {
    if (proc.child.exitCode !== null) resolve(proc.child.exitCode);
    else proc.child.once('exit', (code) => resolve(code));
  });
  prioritize(proc.pid);
  onStart();
  process.kill(proc.pid, 'SIGUSR2');
  const code = await exited;
  try {
    return JSON.parse(readFileSync(out, 'utf8')) as LoadResult;
  } catch {
    throw new Error(
      `load generator ${tag} exited (${code}) without a result; see ${join(o.outDir, 'streams', `load-${tag}.log`)}`,
    );
  }
}

const nominalMs = (n: number, streams: number) => n / 5 + streams * CHUNKS * GAP_MS;
const specFor = (n: number, streams: number) => ({
  clients: n,
  streams,
  chunks: CHUNKS,
  gapMs: GAP_MS,
  rampMs: Math.round(n / 5),
  deadlineMs: Math.round(30_000 + 15 * nominalMs(n, streams)),
});

/**
 * Waits until the upstream has no live stream (the previous run is over on its side too) and has
 * descriptors for a run of N streams (up to ~2N connections and their replacements: 3N), which
 * the other targets' idle pools free within {@link UPSTREAM_KEEPALIVE_MS}.
 */
async function quiesce(up: Upstream, n: number, log: (s: string) => void): Promise<void> {
  const room = NOFILE - 3 * n - 500;
  const end = Date.now() + UPSTREAM_KEEPALIVE_MS + 15_000;
  let s: UpstreamStats | null = null;
  while (Date.now() < end) {
    s = await upstreamCall(up, 'stats').catch(() => null);
    if (s && s.live === 0 && s.open <= room) break;
    await sleep(200);
  }
  if (s && s.open > room)
    log(`  (the upstream still holds ${s.open} connections, more than the ${room} that leave room for N = ${n})`);
  await sleep(500);
}

/**
 * What the mirror counted over the run, read once its queue is drained (see below).
 */
async function mirrorDelta(
  o: StreamsOptions,
  t: Running,
  adminUrl: string,
  mirrorBefore: MirrorCounters,
): Promise<RunResult['mirror']> {
  // The mirror's queue drains after the clients are done (the copies wait for the candidate's
  // answers): its counters are read once it is empty, and the next run does not start under
  // its backlog (in shadow mode the backlog is logprobe's, beside nginx alone's next run).
  const drainEnd = Date.now() + MIRROR_DRAIN_MAX_MS;
  // Drained: the queue empty and no outcome counted for 2 s (the copies in flight answered).
  const total = (m: MirrorCounters) => m.ok + m.dropped + m.other;
  let after = await mirrorCounters(adminUrl).catch(() => null);
  let stableSince = Date.now();
  while (after && Date.now() < drainEnd && (after.queueDepth > 0 || Date.now() - stableSince < 2000)) {
    await sleep(250);
    const next = await mirrorCounters(adminUrl).catch(() => null);
    if (!next || total(next) !== total(after) || next.queueDepth > 0) stableSince = Date.now();
    after = next;
  }
  if (after && after.queueDepth > 0)
    o.log(
      `  ${t.key}: the mirror's queue still held ${after.queueDepth} copies ${MIRROR_DRAIN_MAX_MS / 1000} s after the run`,
    );
  if (!after) return undefined;
  return {
    ok: after.ok - mirrorBefore.ok,
    dropped: after.dropped - mirrorBefore.dropped,
    other: after.other - mirrorBefore.other,
    queueDepth: after.queueDepth,
  };
}

/** The machine over the run (/proc/stat ticks) in cores: busy, softirq, steal, ours and the rest. */
function machineFigures(
  wallMs: number,
  m0: ReturnType<typeof machineTicks>,
  m1: ReturnType<typeof machineTicks>,
  oursMs: number,
): RunResult['machine'] {
  const tick = 1000 / ticksPerSecond(); // ms per /proc/stat tick
  const cores = (ticks: number) => Math.round(((ticks * tick) / wallMs) * 100) / 100;
  return {
    wallMs: Math.round(wallMs),
    busyCores: cores(m1.busy - m0.busy),
    softirqCores: cores(m1.softirq - m0.softirq),
    stealCores: cores(m1.steal - m0.steal),
    oursCores: Math.round((oursMs / wallMs) * 100) / 100,
    // Busy, less the network stack and ours: other processes of this shared machine.
    foreignCores: Math.max(
      0,
      Math.round((((m1.busy - m0.busy - (m1.softirq - m0.softirq)) * tick - oursMs) / wallMs) * 100) / 100,
    ),
  };
}

/** The counters read when the load starts streaming (before: zeros, and the machine now). */
function runMarks() {
  return {
    cpu: 0,
    up: 0,
    base: 0,
    machine: machineTicks(),
    self: process.cpuUsage(),
    t0: 0,
    sampler: null as ReturnType<typeof rssSampler> | null,
  };
}

function markStart(mk: ReturnType<typeof runMarks>, pids: number[], up: Upstream, base: Upstream): void {
  mk.cpu = cpuMsOf(pids);
  mk.up = cpuMsOf([up.pid]);
  mk.base = cpuMsOf([base.pid]);
  mk.machine = machineTicks();
  mk.self = process.cpuUsage();
  mk.t0 = performance.now();
  mk.sampler = rssSampler(pids, 100);
}

/** What the run took since {@link markStart}: its wall time, peak RSS, CPU of each process, the machine's ticks. */
function measured(mk: ReturnType<typeof runMarks>, pids: number[], up: Upstream, base: Upstream) {
  const wallMs = performance.now() - mk.t0;
  const peak = mk.sampler?.stop() ?? { peakKB: NaN };
  const cpuMs = cpuMsOf(pids) - mk.cpu;
  const upstreamCpuMs = cpuMsOf([up.pid]) - mk.up;
  const baselineCpuMs = cpuMsOf([base.pid]) - mk.base;
  const m1 = machineTicks();
  const self = process.cpuUsage(mk.self);
  return { wallMs, peak, cpuMs, upstreamCpuMs, baselineCpuMs, m0: mk.machine, m1, self };
}

async function oneRun(
  o: StreamsOptions,
  t: Running,
  up: Upstream,
  base: Upstream,
  n: number,
  round: number,
  order: number,
): Promise<RunResult> {
  await quiesce(up, n, o.log);
  const pids = await t.pids();
  const mirrorBefore: MirrorCounters | null =
    t.adminUrl && !t.key.startsWith('logprobe-off') ? await mirrorCounters(t.adminUrl).catch(() => null) : null;
  await upstreamCall(up, 'reset');
  const idleKB = rssKBOf(pids);
  const lo0 = listenOverflows();
  const mk = runMarks();
  const result = await load(
    o,
    t,
    specFor(n, o.streamsPerClient ?? STREAMS_PER_CLIENT),
    `${t.key}-n${n}-r${round + 1}`,
    () => markStart(mk, pids, up, base),
  );
  const { wallMs, peak, cpuMs, upstreamCpuMs, baselineCpuMs, m0, m1, self } = measured(mk, pids, up, base);
  const upstream = await upstreamCall(up, 'stats');
  const mirror = mirrorBefore && t.adminUrl ? await mirrorDelta(o, t, t.adminUrl, mirrorBefore) : undefined;
  // Ours: the target, both upstreams, the load generator (its streaming phase) and this process.
  const oursMs =
    (t.key === 'direct' ? 0 : cpuMs) + upstreamCpuMs + baselineCpuMs + result.cpuMs + (self.user + self.system) / 1000;
  return {
    key: t.key,
    n,
    round,
    order,
    load: result,
    idleKB,
    peakKB: peak.peakKB,
    cpuMs,
    upstreamCpuMs,
    baselineCpuMs,
    upstream,
    ...(mirror ? { mirror } : {}),
    machine: machineFigures(wallMs, m0, m1, oursMs),
    listenOverflows: listenOverflows() - lo0,
    repeated: 0,
  };
}

function summarize(key: string, label: string, n: number, runs: RunResult[], idleKB: number): TargetSummary {
  const med = (f: (r: RunResult) => number) => median(runs.map(f));
  const cutReasons: Record<string, number> = {};
  for (const r of runs)
    for (const [k, v] of Object.entries(r.load.cutReasons)) cutReasons[k] = (cutReasons[k] ?? 0) + v;
  const peakKB = med((r) => r.peakKB);
  const mirrors = runs.map((r) => r.mirror).filter((m): m is NonNullable<RunResult['mirror']> => m !== undefined);
  return {
    key,
    label,
    n,
    rounds: runs.length,
    completed: runs.reduce((a, r) => a + r.load.completed, 0),
    cut: runs.reduce((a, r) => a + r.load.cut, 0),
    cutReasons,
    ttfbP50: med((r) => r.load.ttfb.p50),
    ttfbP99: med((r) => r.load.ttfb.p99),
    ttfbFirstP99: med((r) => r.load.ttfbFirst.p99),
    ttfbWarmP99: med((r) => r.load.ttfbWarm.p99),
    addedP50: med((r) => r.load.added.p50),
    addedP99: med((r) => r.load.added.p99),
    addedMax: med((r) => r.load.added.max),
    idleKB,
    peakKB,
    kbPerStream: (peakKB - idleKB) / n,
    cpuMsPerStream: med(cpuMsPerStream),
    upstreamConns: med((r) => r.upstream.acceptedStream),
    mirrorConns: med((r) => r.upstream.acceptedJson),
    upstreamPeakStreams: med((r) => r.upstream.peakLive),
    upstreamPeakOpen: med((r) => r.upstream.peakOpen),
    upstreamLateP99: med((r) => r.upstream.lateMs.p99),
    loadCpuShare: med((r) => r.load.cpuShare),
    loadLoopP99: med((r) => r.load.loopDelay.p99),
    machineBusyCores: med((r) => r.machine.busyCores),
    foreignCores: med((r) => r.machine.foreignCores),
    wallS: med((r) => r.machine.wallMs / 1000),
    ...(mirrors.length > 0
      ? {
          mirror: {
            ok: mirrors.reduce((a, m) => a + m.ok, 0),
            dropped: mirrors.reduce((a, m) => a + m.dropped, 0),
            other: mirrors.reduce((a, m) => a + m.other, 0),
          },
        }
      : {}),
  };
}

const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '–');

/** With --pin: the targets on some of this process's CPUs, the harness (this process too) on the others. */
function pinHarness(o: StreamsOptions): ReturnType<typeof splitCpus> | null {
  const pin = o.pin ? splitCpus(allowedCpus()) : null;
  pinning.target = pin?.target ?? null;
  pinning.harness = pin?.harness ?? null;
  if (pin) {
    // This process samples /proc and polls the upstream and the mirror: harness work too.
    const r = spawnSync('taskset', ['-a', '-cp', pin.harness, String(process.pid)], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`--pin: taskset failed: ${(r.stderr || r.error?.message || '').trim()}`);
    o.log(
      `pinned: targets on CPU ${pin.target}, the harness (upstreams, load generators, this process) on CPU ${pin.harness}`,
    );
  }
  return pin;
}

/** What the lane gathers over every N. */
interface LaneRuns {
  runs: RunResult[];
  summaries: TargetSummary[];
  unavailable: Map<string, Unavailable>;
  labels: Record<string, string>;
}

/** One N: the targets started, warmed up, run `rounds` times in rotated order, summarized and stopped. */
async function runN(o: StreamsOptions, up: Upstream, base: Upstream, n: number, acc: LaneRuns): Promise<void> {
  o.log(
    `\nstreams lane, N = ${n}: ${n} clients × ${o.streamsPerClient ?? STREAMS_PER_CLIENT} streams of ${CHUNKS} chunks ${GAP_MS} ms apart; starting targets`,
  );
  const all = await startTargets(o, up, base, n);
  const running = all.filter(isRunning);
  for (const t of all) {
    acc.labels[t.key] = t.label;
    if (!isRunning(t)) {
      acc.unavailable.set(t.key, t);
      o.log(`  ${t.label}: ${t.reason}`);
    }
  }
  try {
    // Warm-up: JIT, the proxies' upstream keep-alive pools; then the idle RSS.
    for (const t of running) {
      await quiesce(up, n, o.log);
      const w = await load(o, t, specFor(Math.min(n, 100), 1), `${t.key}-n${n}-warm`);
      if (w.cut > 0)
        o.log(`  warm-up ${t.key}: ${w.cut} of ${w.planned} streams cut (${Object.keys(w.cutReasons).join(', ')})`);
    }
    await sleep(1000);
    const firstIdle = new Map<string, number>();
    const mine = new Map<string, RunResult[]>(running.map((t) => [t.key, []]));
    for (let r = 0; r < o.rounds; r++) {
      for (const [i, t] of rotated(running, r).entries()) {
        const res = await quietRun(o, t, up, base, n, r, i, firstIdle);
        acc.runs.push(res);
        mine.get(t.key)!.push(res);
        o.log(runLine(r, t, res));
      }
    }
    // Idle: the RSS right before the target's first run at this N (warmed up, never yet holding N streams).
    for (const t of running)
      acc.summaries.push(summarize(t.key, t.label, n, mine.get(t.key)!, firstIdle.get(t.key) ?? NaN));
  } finally {
    for (const t of running) await t.stop();
  }
}

/**
 * One run; a run during which other processes of this shared machine took more than
 * FOREIGN_MAX_CORES is done once more after a pause, and the quieter one is kept.
 */
async function quietRun(
  o: StreamsOptions,
  t: Running,
  up: Upstream,
  base: Upstream,
  n: number,
  r: number,
  i: number,
  firstIdle: Map<string, number>,
): Promise<RunResult> {
  let res = await oneRun(o, t, up, base, n, r, i);
  if (!firstIdle.has(t.key)) firstIdle.set(t.key, res.idleKB);
  if (res.machine.foreignCores > FOREIGN_MAX_CORES) {
    o.log(
      `  round ${r + 1} ${t.key}: other processes took ${res.machine.foreignCores} cores during the run; once more`,
    );
    await sleep(3000);
    const again = await oneRun(o, t, up, base, n, r, i);
    if (again.machine.foreignCores < res.machine.foreignCores) res = again;
    res.repeated = 1;
  }
  return res;
}

/** A run's line in the log. */
function runLine(r: number, t: Running, res: RunResult): string {
  const l = res.load;
  return (
    `  round ${r + 1} ${t.key.padEnd(15)} ${String(l.completed).padStart(5)} done ${String(l.cut).padStart(4)} cut` +
    `  ttfb p50/p99 ${f1(l.ttfb.p50)}/${f1(l.ttfb.p99)} ms  added p50/p99/max ${f1(l.added.p50)}/${f1(l.added.p99)}/${f1(l.added.max)} ms` +
    `  rss ${f1(res.idleKB / 1024)}→${f1(res.peakKB / 1024)} MB  cpu ${f1(cpuMsPerStream(res))} ms/stream` +
    `  up conns ${res.upstream.acceptedStream} (peak streams ${res.upstream.peakLive})` +
    `  first-stream ttfb p99 ${f1(l.ttfbFirst.p99)} ms, kept-alive ${f1(l.ttfbWarm.p99)} ms, listen overflows ${res.listenOverflows}, connect ${l.connectMs} ms` +
    `  [wall ${f1(res.machine.wallMs / 1000)} s, machine ${res.machine.busyCores} cores busy (others ${res.machine.foreignCores}), load gen ${l.cpuShare} core, loop p99 ${l.loopDelay.p99} ms, upstream late p99 ${res.upstream.lateMs.p99} ms]` +
    (res.mirror ? `  mirror ${res.mirror.ok} compared, ${res.mirror.dropped} dropped, ${res.mirror.other} other` : '') +
    (l.cut > 0 ? `  cut: ${JSON.stringify(l.cutReasons)}` : '')
  );
}

export async function runStreams(o: StreamsOptions): Promise<StreamsResult> {
  const began = Date.now();
  harnessNice = o.harnessNice ?? HARNESS_NICE_DEFAULT;
  const pin = pinHarness(o);
  mkdirSync(join(o.outDir, 'streams'), { recursive: true });
  const up = await startUpstream(o, 'streams-upstream', true);
  const niced = prioritize(up.pid);
  const base = await startUpstream(o, 'streams-baseline', false);
  const acc: LaneRuns = { runs: [], summaries: [], unavailable: new Map(), labels: {} };
  const { runs, summaries, unavailable, labels } = acc;
  try {
    for (const n of o.ns) await runN(o, up, base, n, acc);
  } finally {
    await up.stop();
    await base.stop();
  }
  return {
    options: {
      quick: o.quick,
      ns: o.ns,
      rounds: o.rounds,
      targets: o.targets,
      chunks: CHUNKS,
      gapMs: GAP_MS,
      streamsPerClient: o.streamsPerClient ?? STREAMS_PER_CLIENT,
      jsonDelayMs: o.jsonDelayMs ?? CHUNKS * GAP_MS,
      logprobeRoot: o.logprobeRoot,
      harnessNice: niced ? harnessNice : null,
      pin,
    },
    unavailable: [...unavailable.values()],
    runs,
    summaries,
    labels,
    elapsedS: Math.round((Date.now() - began) / 1000),
  };
}

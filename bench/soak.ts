/**
 * `npm run soak -- --minutes N` (issue #9): a bounded soak test, on demand (never in CI). Starts,
 * each in its own process, a fast candidate (`logprobe engine --sim`), a slow baseline (the same
 * engine answering 300 ms late, so the mirror's queue fills and drops), `logprobe serve` at
 * sampleRate 1 (capture off, log level warn) and a saturating load generator
 * (bench/soak-load.ts: autocannon, chat and completions, JSON and SSE). Every few seconds it prints
 * logprobe's RSS, event-loop lag, mirror outcomes, queue depth, req/s and client errors; at the
 * end a summary and PASS/FAIL (peak RSS under the ceiling, zero client errors, pairs compared),
 * and it writes the Soak section of bench/RESULTS.md. Exit 0 PASS, 1 FAIL, 2 usage.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Command, InvalidArgumentError } from 'commander';
import { killAll, memoryMB, runToEnd, start } from './lib/proc.js';
import { machine, type Machine } from './lib/machine.js';
import { eventLoopLagMs, parseMirrorCounters, scrape } from './lib/metrics.js';
import { writeSection } from './lib/sections.js';
import { fmt, median } from './lib/stats.js';
import { startLogprobe } from './proxies/logprobe.js';
import { startSim } from './upstreams.js';
import { table } from './report.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUT = join(ROOT, 'bench', 'out', 'soak');
const RESULTS = join(ROOT, 'bench', 'RESULTS.md');
/** Peak RSS (VmHWM) of the logprobe process, worker threads included, must stay below this. */
const RSS_CEILING_MB = 250;
const BASELINE_DELAY_MS = 300;
const MAX_MINUTES = 240;

const log = (s: string) => process.stdout.write(`${s}\n`);

interface Options {
  minutes: number;
  connections: number;
  interval: number;
  build: boolean;
  write: boolean;
}

interface Sample {
  t: number;
  rps: number;
  rss: number;
  peak: number;
  lagP50: number;
  lagP99: number;
  ok: number;
  dropped: number;
  other: number;
  queue: number;
  clientErrors: number;
}

interface LoadCounts {
  /** Seconds since the load began. */
  t: number;
  ok: number;
  non2xx: number;
  errors: number;
  total?: number;
  done?: boolean;
}

function positive(max: number, what: string) {
  return (v: string): number => {
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0 || n > max) throw new InvalidArgumentError(`expected ${what} in (0, ${max}]`);
    return n;
  };
}

/** Least-squares slope of RSS over time, in MB per minute. */
function slopePerMinute(xs: Sample[]): number {
  if (xs.length < 2) return NaN;
  const mt = xs.reduce((a, s) => a + s.t, 0) / xs.length;
  const mr = xs.reduce((a, s) => a + s.rss, 0) / xs.length;
  const num = xs.reduce((a, s) => a + (s.t - mt) * (s.rss - mr), 0);
  const den = xs.reduce((a, s) => a + (s.t - mt) ** 2, 0);
  return den === 0 ? NaN : (num / den) * 60;
}

/** Reads the load generator's count lines; `finished` resolves when it says it is done or exits. */
function followLoad(child: ChildProcess): { live: LiveCounts; finished: Promise<void> } {
  const live: LiveCounts = { counts: { t: 0, ok: 0, non2xx: 0, errors: 0 }, ended: false };
  const finished = new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    createInterface({ input: child.stdout! }).on('line', (line) => {
      try {
        live.counts = JSON.parse(line) as LoadCounts;
      } catch {
        return; // a partial first line
      }
      if (live.counts.done) resolve();
    });
  });
  void finished.then(() => (live.ended = true));
  return { live, finished };
}

/** The load generator's latest counts, and whether it has ended. */
interface LiveCounts {
  counts: LoadCounts;
  ended: boolean;
}

/** Samples logprobe's RSS, event-loop lag and mirror counters every interval until the load ends or logprobe is gone. */
async function sampleRun(
  o: Options,
  pid: number,
  adminUrl: string,
  live: LiveCounts,
  finished: Promise<void>,
): Promise<{ samples: Sample[]; alive: boolean; began: number }> {
  const began = performance.now();
  const samples: Sample[] = [];
  let alive = true;
  let prev = live.counts;
  log('   elapsed    req/s   RSS MB  lag p99 ms  pairs ok   dropped  queue  client errors');
  while (!live.ended && alive) {
    await Promise.race([sleep(o.interval * 1000), finished]);
    const t = (performance.now() - began) / 1000;
    const mem = await memoryMB([pid]);
    if (!mem) {
      alive = false;
      log(`  ${fmt(t, 0).padStart(5)} s  logprobe (pid ${pid}) is gone`);
      break;
    }
    const text = await scrape(adminUrl).catch(() => '');
    const lag = eventLoopLagMs(text);
    const m = parseMirrorCounters(text);
    const { counts } = live;
    const rps = (counts.ok - prev.ok) / (counts.t - prev.t);
    prev = counts;
    const s: Sample = {
      t,
      rps,
      rss: mem.rss,
      peak: mem.peak,
      lagP50: lag.p50,
      lagP99: lag.p99,
      ok: m.ok,
      dropped: m.dropped,
      other: m.other,
      queue: m.queueDepth,
      clientErrors: counts.errors + counts.non2xx,
    };
    samples.push(s);
    log(
      `  ${fmt(t, 0).padStart(6)} s ${fmt(rps, 0).padStart(8)} ${fmt(s.rss, 0).padStart(8)} ${fmt(s.lagP99, 1).padStart(11)} ${String(s.ok).padStart(9)} ${String(s.dropped).padStart(9)} ${String(s.queue).padStart(6)} ${String(s.clientErrors).padStart(14)}`,
    );
  }
  return { samples, alive, began };
}

/** The soak's figures and its failures (exited, RSS at the ceiling, client errors, nothing compared). */
function summarize(
  o: Options,
  info: Machine,
  counts: LoadCounts,
  samples: Sample[],
  alive: boolean,
  began: number,
): Summary {
  const elapsed = counts.done ? counts.t : (performance.now() - began) / 1000;
  const last = samples.at(-1);
  const peak = Math.max(...samples.map((s) => s.peak));
  const clientErrors = counts.errors + counts.non2xx;
  const failures: string[] = [];
  if (!alive || !counts.done)
    failures.push(alive ? 'the load generator did not finish' : 'logprobe exited during the soak');
  if (!(peak < RSS_CEILING_MB)) failures.push(`peak RSS ${fmt(peak, 0)} MB ≥ ceiling ${RSS_CEILING_MB} MB`);
  if (clientErrors !== 0)
    failures.push(`${clientErrors} client errors (${counts.errors} errors/timeouts, ${counts.non2xx} non-2xx)`);
  if (!last || last.ok === 0) failures.push('no pair compared');
  const half = samples.filter((s) => s.t >= elapsed / 2);
  return {
    info,
    o,
    elapsed,
    requests: counts.total ?? counts.ok + counts.non2xx + counts.errors,
    rps: counts.ok / elapsed,
    rssStart: samples[0]?.rss ?? NaN,
    rssEnd: last?.rss ?? NaN,
    growth: slopePerMinute(half),
    peak,
    lagP50Max: Math.max(...samples.map((s) => s.lagP50).filter(Number.isFinite)),
    lagP99Max: Math.max(...samples.map((s) => s.lagP99).filter(Number.isFinite)),
    lagP99Median: median(samples.map((s) => s.lagP99)),
    ok: last?.ok ?? 0,
    dropped: last?.dropped ?? 0,
    other: last?.other ?? 0,
    queueMax: Math.max(...samples.map((s) => s.queue)),
    clientErrors,
    failures,
  };
}

async function soak(o: Options): Promise<boolean> {
  mkdirSync(OUT, { recursive: true });
  if (o.build) {
    const b = await runToEnd('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: ROOT, timeoutMs: 180_000 });
    if (b.code !== 0)
      log(
        `build reported errors (the soak runs the emitted dist/ anyway):\n${b.stdout.split('\n').slice(0, 5).join('\n')}`,
      );
  }
  const info = machine();
  log(
    `logprobe soak: ${o.minutes} min, ${o.connections} connections, RSS ceiling ${RSS_CEILING_MB} MB; ${info.nproc} cpu ${info.cpu}, node ${info.versions.node}, load ${info.load}`,
  );

  const candidate = await startSim('soak-candidate', 1);
  const baseline = await startSim('soak-baseline', 1, ['--fault', `slow:${BASELINE_DELAY_MS}`]);
  const lp = await startLogprobe({
    key: 'soak-logprobe',
    label: 'logprobe',
    candidate: candidate.url,
    baseline: baseline.url,
    sampleRate: 1,
    logLevel: 'warn',
    outDir: OUT,
  });
  const [pid] = await lp.pids();
  const seconds = Math.round(o.minutes * 60);
  const load = await start({
    name: 'soak-load',
    cmd: 'node',
    args: ['--import', 'tsx', 'bench/soak-load.ts', lp.url, String(o.connections), String(seconds)],
    cwd: ROOT,
    ready: /"ok"/,
  });

  const { live, finished } = followLoad(load.proc.child);

  const { samples, alive, began } = await sampleRun(o, pid as number, lp.adminUrl as string, live, finished);
  await load.proc.stop();
  await lp.stop();
  await baseline.proc.stop();
  await candidate.proc.stop();

  const r = summarize(o, info, live.counts, samples, alive, began);
  const { failures } = r;
  log('');
  for (const [k, v] of rows(r)) log(`${k.padEnd(52)} ${v}`);
  log(
    failures.length === 0
      ? `PASS: peak RSS < ${RSS_CEILING_MB} MB, 0 client errors, pairs compared`
      : `FAIL: ${failures.join('; ')}`,
  );
  if (o.write) {
    writeSection(RESULTS, '<!-- soak:generated:begin -->', '<!-- soak:generated:end -->', render(r), '');
    log('wrote the Soak section of bench/RESULTS.md');
  }
  return failures.length === 0;
}

interface Summary {
  info: Machine;
  o: Options;
  elapsed: number;
  requests: number;
  rps: number;
  rssStart: number;
  rssEnd: number;
  growth: number;
  peak: number;
  lagP50Max: number;
  lagP99Max: number;
  lagP99Median: number;
  ok: number;
  dropped: number;
  other: number;
  queueMax: number;
  clientErrors: number;
  failures: string[];
}

/** The figures, as label and value: the terminal summary and the RESULTS.md table. */
function rows(r: Summary): Array<[string, string]> {
  const sign = (x: number) => (x >= 0 ? '+' : '');
  return [
    ['client requests (2xx answers per second)', `${r.requests} (${fmt(r.rps, 0)} req/s)`],
    ['client errors + non-2xx', String(r.clientErrors)],
    ['RSS at the first sample / at the end', `${fmt(r.rssStart, 0)} / ${fmt(r.rssEnd, 0)} MB`],
    ['RSS growth over the second half of the run', `${sign(r.growth)}${fmt(r.growth, 1)} MB/min`],
    ['peak RSS (VmHWM)', `${fmt(r.peak, 0)} MB (ceiling ${RSS_CEILING_MB} MB)`],
    [
      'event-loop lag p50 / p99, max over samples',
      `${fmt(r.lagP50Max, 1)} / ${fmt(r.lagP99Max, 1)} ms (p99 median ${fmt(r.lagP99Median, 1)} ms)`,
    ],
    ['mirror: pairs ok / dropped / other outcomes', `${r.ok} / ${r.dropped} / ${r.other}`],
    ['mirror queue depth, max seen', String(r.queueMax)],
    ['verdict', r.failures.length === 0 ? 'PASS' : `FAIL: ${r.failures.join('; ')}`],
  ];
}

function render(r: Summary): string {
  const v = r.info.versions;
  return [
    '## Soak (`npm run soak`)',
    '',
    `Run of ${r.info.date.slice(0, 16).replace('T', ' ')} UTC: \`--minutes ${r.o.minutes}\` (${r.elapsed.toFixed(0)} s of load), ${r.o.connections} connections, sampled every ${r.o.interval} s. Machine: ${r.info.nproc} CPUs (${r.info.cpu}), ${r.info.memoryGB} GB, ${r.info.kernel}; load average at the start ${r.info.load} (shared machine). Versions: node ${v.node}, logprobe ${v.logprobe}, undici ${v.undici}, autocannon ${v.autocannon}.`,
    '',
    `Setup: \`logprobe serve\` at sampleRate 1, capture off, log level warn; candidate \`logprobe engine --sim\`; baseline the same engine with \`--fault slow:${BASELINE_DELAY_MS}\` (every answer ${BASELINE_DELAY_MS} ms late, so the mirror's queue stays full and drops); load: autocannon in its own process, closed loop, each connection cycling chat and completions, JSON and SSE. RSS is the whole logprobe process (worker threads included); the event-loop lag is prom-client's for the main thread since the previous scrape, sampled every 10 ms (an idle loop reads ~10 ms). PASS: peak RSS under the ceiling of **${RSS_CEILING_MB} MB**, zero client errors or non-2xx, pairs compared.`,
    '',
    table(['figure', 'value'], rows(r)),
    '',
  ].join('\n');
}

const program = new Command('soak')
  .description('bounded soak test of logprobe serve: mirror queue saturated, RSS, event-loop lag, drops, client errors')
  .requiredOption(
    '--minutes <n>',
    `how long the load runs, in minutes (0 < n ≤ ${MAX_MINUTES})`,
    positive(MAX_MINUTES, 'minutes'),
  )
  .option('--connections <n>', 'load generator connections', positive(1024, 'connections'), 32)
  .option('--interval <s>', 'seconds between samples', positive(600, 'seconds'), 5)
  .option('--no-build', 'run the existing dist/ without building it first')
  .option('--no-write', 'do not update bench/RESULTS.md')
  .exitOverride((err) => process.exit(err.code === 'commander.helpDisplayed' || err.code === 'commander.help' ? 0 : 2))
  .action(async (o: Options) => {
    let pass = false;
    try {
      pass = await soak(o);
    } catch (err) {
      process.stderr.write(`soak failed: ${(err as Error).stack ?? String(err)}\n`);
    }
    killAll();
    process.exit(pass ? 0 : 1);
  });

await program.parseAsync(process.argv);

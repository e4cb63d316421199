import { buildConfig } from '../config/load.js';
import { createLogger } from '../log/logger.js';
import { createRuntime } from '../server/server.js';
import type { AlertTransition } from '../core/detector.js';
import type { ProbeShape } from '../core/self.js';
import type { MirroredPair } from '../pair/types.js';
import { promptText } from '../report/strips.js';
import { alertSummary, medianShiftText } from '../mirror/notify.js';
import { formatNats } from '../core/explain.js';
import { basename, isAbsolute, relative, sep } from 'node:path';
import { runTraffic } from './traffic.js';
import type { Backend } from '../core/types.js';

/**
 * Two running engines and how the demo should drive them: what the demo needs of the test
 * engines (`@logprobe/engine`'s `chooseEngines` returns one).
 */
export interface DemoEngines {
  /** Which engines run. */
  engine: 'llama' | 'sim';
  /** What runs the engines, for the banner. */
  kind: string;
  candidateUrl: string;
  baselineUrl: string;
  /** The candidate's fault, for the banner (`fault: zero-layer:1`, `no fault`, …). */
  candidateLabel: string;
  /** `max_tokens` of the client's requests (and so of the mirrored copies). */
  maxTokens: number;
  /** Mirrored pairs in flight at once (a llama engine serves one request at a time). */
  mirrorConcurrency: number;
  close(): Promise<void>;
}

/** Options of {@link runDemo}. */
export interface DemoOptions {
  /** Seconds of traffic; undefined runs until the signal. */
  duration?: number;
  /** Requests per second of the traffic generator. */
  rate: number;
  port: number;
  adminPort: number;
  /** Starts the two engines, saying what it does through `progress`; the demo closes them however it ends. */
  engines: (progress: (line: string) => void) => Promise<DemoEngines>;
  /** Stops the demo early (Ctrl-C). */
  signal: AbortSignal;
  /** Where the live lines go. */
  out: (line: string) => void;
  /** Alert thresholds tuned so the demo shows a verdict within a minute. */
  alert?: { window: number; minRequests: number; forSeconds: number };
  /** When the demo started (ms since the epoch), for the times on the alert lines. Default: now. */
  startedAt?: number;
  /** No baseline: the candidate alone, every mirrored request a repeat probe (cold, then warm). */
  baselineFree?: boolean;
  /** Probe the cache path: each mirrored request once more to each backend (a cache-hit fault shows there). */
  repeats?: boolean;
  /** Where the demo's captures go (so that `analyze` and `replay` can be run on them afterwards). */
  captureDir: string;
}

/** What the demo saw, for the exit code and the tests. */
export interface DemoSummary {
  /** Which engines ran. */
  engine: 'llama' | 'sim';
  mirrored: number;
  /** Mirrored pairs by outcome (ok, baseline_error, …). */
  outcomes: Record<string, number>;
  /** Compared pairs by verdict (none baseline-free). */
  verdicts: Record<string, number>;
  /** Repeat probes by backend and verdict (cold run against warm run). */
  repeats: Partial<Record<Backend, Record<string, number>>>;
  alerts: AlertTransition[];
  /** Seconds from the start to each alert's first firing (engine start-up included). */
  firstFiring: Partial<Record<AlertTransition['alert'], number>>;
  sent: number;
}

/**
 * One live line per mirrored pair: verdict, aligned tokens, then each set of positions with its
 * own figures — free-running (up to the divergence) and, when scored, teacher-forced (the
 * baseline's sequence on both: what the verdict and the alerts count) — and the flip's gap.
 */
export function pairLine(n: number, pair: MirroredPair): string {
  const a = pair.analysis;
  if (!a) return `#${String(n).padStart(4)} ${pair.route.padEnd(21)} ${pair.outcome}`;
  const flip = a.flip
    ? `flip@${a.flip.index} gap ${a.flip.lowerBound ? '≥ ' : ''}${formatNats(a.flip.gap)} ${a.flip.class}`
    : 'no flip';
  const s = a.scored;
  const free = `free-running ${String(a.shifted).padStart(3)}/${String(a.comparable).padEnd(3)} max ${formatNats(a.maxShift)}`;
  const forced =
    s?.outcome === 'ok' && (s.comparable ?? 0) > 0
      ? `  teacher-forced ${String(s.shifted).padStart(3)}/${String(s.comparable).padEnd(3)} max ${formatNats(s.maxShift ?? null)}`
      : '';
  const where = a.locus ? `  locus ${a.locus}` : '';
  return `#${String(n).padStart(4)} ${pair.route.padEnd(21)} ${a.verdict.padEnd(18)} aligned ${String(a.aligned).padStart(3)}  ${free}${forced}  ${flip}${where}`;
}

/** An alert's live line: after the pair that caused it, numbered as that pair's line is. */
export function alertLine(t: AlertTransition, mirrored: number, secs: number): string {
  const e = t.evidence;
  const what = alertSummary(t);
  return `${t.to === 'firing' ? '▲ ALERT FIRING' : '▼ alert resolved'}  ${t.alert}${t.backend ? ` (${t.backend})` : ''} at mirrored request ${mirrored} (${secs.toFixed(1)} s since start): pooled share ${e.pooledShare.toFixed(2)} over the last ${e.requestsInWindow} compared request${e.requestsInWindow === 1 ? '' : 's'}, ${medianShiftText(e.medianShift)}, CUSUM ${e.cusum.toFixed(1)}, e.g. request ${e.exampleRequestId ?? '—'} — ${what}`;
}

/**
 * The main job on an embedded default: two engines, the proxy in front at sampleRate 1, a
 * traffic generator, a live line per mirrored request, the moment each alert fires, and
 * /metrics to look at. The engines are closed however it ends.
 */
export async function runDemo(options: DemoOptions): Promise<DemoSummary> {
  const out = options.out;
  const started = options.startedAt ?? Date.now();
  const start = new StartProgress(out, started);
  let engines: DemoEngines;
  try {
    start.begin('starting the engines');
    engines = await options.engines((line) => start.say(line));
  } finally {
    start.stop();
  }
  const alertCfg = options.alert ?? { window: 20, minRequests: 10, forSeconds: 5 };
  const tally = new DemoTally(out, started);
  let runtime: ReturnType<typeof createRuntime> | undefined;
  let urls: { proxyUrl: string; adminUrl: string } | null = null;
  let sent = 0;
  try {
    const logDestination = process.stderr as unknown as NodeJS.WritableStream & { write: (s: string) => boolean };
    runtime = createRuntime(demoConfig(options, engines, alertCfg), {
      // The live lines own stdout: the proxy's and the mirror worker's log lines go to stderr.
      logger: createLogger({ level: 'error', destination: logDestination }),
      logDestination,
      listeners: { onPair: (pair) => tally.pair(pair), onAlert: (t) => tally.alert(t) },
    });
    start.begin('starting the proxy (and checking that the engines answer it)');
    try {
      urls = await runtime.listen();
    } finally {
      start.stop();
    }
    banner(options, engines, urls, alertCfg);
    sent = await driveTraffic(options, engines, urls.proxyUrl, runtime, tally);
    await runtime.mirror?.idle();
  } finally {
    tally.flushAlerts();
    await runtime?.close();
    await engines.close();
  }
  const { mirrored, outcomes, verdicts, repeats, alerts, firstFiring } = tally;
  out('');
  const which = engines.engine === 'llama' ? 'llama.cpp engines' : 'simulated engines';
  out(
    `done (${which}): ${sent} client requests, ${mirrored} mirrored; outcomes ${JSON.stringify(outcomes)}; verdicts ${JSON.stringify(verdicts)}; repeats ${JSON.stringify(repeats)}; alerts ${alerts.map((a) => `${a.alert}${a.backend ? ` (${a.backend})` : ''} ${a.to}`).join(', ') || 'none'}`,
  );
  for (const line of nextSteps(options.captureDir, urls, cliInvocation())) out(line);
  return { engine: engines.engine, mirrored, outcomes, verdicts, repeats, alerts, firstFiring, sent };
}

/**
 * The start's progress lines (`… 2.1 s: starting the engines`): each stage as it begins, what it
 * reports on the way, and every few seconds the stage still running — the engines' first start
 * (a model generated, llama.cpp loaded) can take a minute on a busy machine, and the demo is
 * never silent meanwhile.
 */
export class StartProgress {
  private stage = '';
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly out: (line: string) => void,
    private readonly started: number,
    private readonly everyMs = 5000,
  ) {}

  /** One line, stamped with the seconds since the demo started. */
  say(line: string): void {
    this.out(`… ${((Date.now() - this.started) / 1000).toFixed(1)} s: ${line}`);
  }

  /** A stage begins: said now, and again every `everyMs` until the next stage or {@link stop}. */
  begin(stage: string): void {
    this.stop();
    this.stage = stage;
    this.say(stage);
    this.timer = setInterval(() => this.say(`still ${this.stage}`), this.everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

/** The demo's config: the engines behind the proxy at sampleRate 1, the capture on, a short alert window. */
function demoConfig(
  options: DemoOptions,
  engines: DemoEngines,
  alertCfg: NonNullable<DemoOptions['alert']>,
): ReturnType<typeof buildConfig> {
  // Baseline-free, every request is a repeat probe. With a baseline, one in five requests is:
  // their first copy runs cold (the cache emptied before it) and matches the baseline, the rest
  // reuse the client's prefix and show a cache fault in the pair — the "sometimes yes, sometimes
  // no" of a cache bug, and both alerts.
  const repeat = options.baselineFree
    ? { rate: 1, backends: ['candidate' as const], flush: true }
    : options.repeats
      ? { rate: 0.2, backends: ['candidate' as const, 'baseline' as const], flush: true }
      : undefined;
  return buildConfig({
    listen: { host: '127.0.0.1', port: options.port },
    admin: { host: '127.0.0.1', port: options.adminPort },
    candidate: { url: engines.candidateUrl },
    baseline: options.baselineFree ? null : { url: engines.baselineUrl },
    mirror: {
      sampleRate: 1,
      concurrency: engines.mirrorConcurrency,
      queueSize: 64,
      maxTokens: engines.maxTokens,
      ...(repeat ? { repeat } : {}),
    },
    alert: { ...alertCfg, cusum: { k: 0.5, h: 5 } },
    // No path check: on llama-server it costs one fresh prefill per generated token, and the demo's
    // two engines share two cores with the load and the proxy — the alerts would come seconds later.
    // (docs/detection.md "Decode vs prefill" shows it on these engines.)
    path: { rate: 0 },
    capture: { enabled: true, dir: options.captureDir },
    // The demo's engines are its own: whether they answer is worth a line, the full probe's ~25
    // generations per engine (llama.cpp at one thread) would only delay the alert.
    probe: { atStart: 'reachability' },
    log: { level: 'error' },
  });
}

/** The opening block: what runs where, what to open, how to try it. */
function banner(
  options: DemoOptions,
  engines: DemoEngines,
  urls: { proxyUrl: string; adminUrl: string },
  alertCfg: NonNullable<DemoOptions['alert']>,
): void {
  const { out } = options;
  const { proxyUrl, adminUrl } = urls;
  out(`logprobe demo — ${engines.kind}`);
  out(`  candidate ${engines.candidateUrl}  (${engines.candidateLabel})`);
  out(
    options.baselineFree
      ? '  baseline  none: the candidate against itself (each request twice: cold, then warm from its cache)'
      : `  baseline  ${engines.baselineUrl}  (clean)`,
  );
  if (options.repeats && !options.baselineFree)
    out(
      '  repeats   1 in 5 mirrored requests once more to each backend: cold (cache emptied), then warm from its prefix cache',
    );
  out(`  captures  ${options.captureDir}`);
  out(`  proxy     ${proxyUrl}   (every request mirrored: sampleRate 1)`);
  out(`  live page ${adminUrl}/ui   (verdicts, alerts and token strips as they come; open it while the demo runs)`);
  out(`  metrics   ${adminUrl}/metrics`);
  out(
    `  try:      curl -s ${proxyUrl}/v1/chat/completions -H 'content-type: application/json' -d '{"messages":[{"role":"user","content":"hello"}],"max_tokens":16}'`,
  );
  out(
    `  alert window ${alertCfg.window} requests, min ${alertCfg.minRequests}, for ${alertCfg.forSeconds} s; ${options.duration ? `running ${options.duration} s` : 'Ctrl-C to stop'}`,
  );
  out('');
}

/** The client's traffic until the signal or the duration, a progress line every 5 s; how many requests were sent. */
async function driveTraffic(
  options: DemoOptions,
  engines: DemoEngines,
  proxyUrl: string,
  live: ReturnType<typeof createRuntime>,
  tally: DemoTally,
): Promise<number> {
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  if (options.signal.aborted) stop.abort();
  options.signal.addEventListener('abort', onAbort, { once: true });
  const timer = options.duration ? setTimeout(() => stop.abort(), options.duration * 1000) : undefined;
  let answered = 0;
  const started = tally.started;
  const progress = setInterval(() => {
    const st = live.mirror?.detectorState;
    const mix = tallyText(tally.outcomes, tally.verdicts, tally.repeats);
    const folded = tally.folder.folded;
    // Baseline-free, the pair detectors see nothing: the candidate's self detector is the one that fires.
    const detector = options.baselineFree
      ? `; self detector (cold→warm repeat pairs): window share ${windowShare(live.mirror?.selfDetectorState('candidate'))}, CUSUM ${live.mirror?.selfDetectorState('candidate').cusum.toFixed(1) ?? '—'}`
      : `; window ratio ${windowShare(st)}, CUSUM ${st ? st.cusum.toFixed(1) : '—'}`;
    options.out(
      `… ${((Date.now() - started) / 1000).toFixed(0)} s: ${answered} client requests answered, ${tally.mirrored} mirrored${folded ? ` (${folded} repeats of a prompt's last line folded)` : ''} [${mix}]${detector}`,
    );
  }, 5000);
  try {
    return await runTraffic({
      proxyUrl,
      rate: options.rate,
      maxTokens: engines.maxTokens,
      signal: stop.signal,
      onResponse: () => answered++,
    });
  } finally {
    clearInterval(progress);
    if (timer) clearTimeout(timer);
    options.signal.removeEventListener('abort', onAbort);
  }
}

/** What the demo has seen (outcomes, verdicts, repeats, alerts) and its live lines, an alert printed after the pair that caused it. */
class DemoTally {
  mirrored = 0;
  readonly outcomes: Record<string, number> = {};
  readonly verdicts: Record<string, number> = {};
  readonly repeats: DemoSummary['repeats'] = {};
  readonly alerts: AlertTransition[] = [];
  readonly firstFiring: DemoSummary['firstFiring'] = {};
  readonly folder = new LineFolder();
  private readonly heldAlerts: Array<{ t: AlertTransition; secs: number }> = [];
  private heldTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly out: (line: string) => void,
    readonly started: number,
  ) {}

  pair(pair: MirroredPair): void {
    this.mirrored++;
    // Outcomes, pair verdicts and repeat verdicts are three tallies: a pair has one outcome,
    // at most one verdict (none baseline-free), and one verdict per repeat probe.
    this.outcomes[pair.outcome] = (this.outcomes[pair.outcome] ?? 0) + 1;
    if (pair.analysis && pair.baseline !== null)
      this.verdicts[pair.analysis.verdict] = (this.verdicts[pair.analysis.verdict] ?? 0) + 1;
    for (const r of pair.repeats ?? []) {
      const tally = (this.repeats[r.backend] ??= {});
      const key = r.verdict ?? 'failed';
      tally[key] = (tally[key] ?? 0) + 1;
    }
    const line = this.folder.line(this.mirrored, pair);
    if (line !== null) this.out(line);
    this.flushAlerts();
  }

  alert(t: AlertTransition): void {
    this.alerts.push(t);
    const secs = (Date.now() - this.started) / 1000;
    if (t.to === 'firing') this.firstFiring[t.alert] ??= secs;
    // The mirror reports a transition before the pair that caused it (from the mirror's
    // thread, as a message of its own): printed after that pair's line, with its number. A
    // transition of the detectors' clock (a resolve with no new pair) comes with no pair.
    this.heldAlerts.push({ t, secs });
    this.heldTimer ??= setTimeout(() => this.flushAlerts(), 250);
  }

  flushAlerts(): void {
    if (this.heldTimer) clearTimeout(this.heldTimer);
    this.heldTimer = undefined;
    for (const { t, secs } of this.heldAlerts.splice(0)) this.out(alertLine(t, this.mirrored, secs));
  }
}

/** A detector's pooled share over its window, for the progress line ('—' before the mirror runs). */
function windowShare(st: { shiftedSum: number; comparableSum: number } | undefined): string {
  return st ? (st.comparableSum > 0 ? st.shiftedSum / st.comparableSum : 0).toFixed(2) : '—';
}

/** The progress line's tallies, each named: pair outcomes, pair verdicts, repeat verdicts per backend. */
export function tallyText(
  outcomes: Record<string, number>,
  verdicts: Record<string, number>,
  repeats: DemoSummary['repeats'],
): string {
  const list = (r: Record<string, number>) =>
    Object.entries(r)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ');
  const parts = [`outcomes: ${list(outcomes) || 'none'}`];
  if (Object.keys(verdicts).length > 0) parts.push(`verdicts: ${list(verdicts)}`);
  for (const [backend, r] of Object.entries(repeats)) parts.push(`${backend} repeats: ${list(r)}`);
  return parts.join('; ');
}

/** A repeat that probed no cold→warm path, as the engine reported its cache hits. */
const PROBE_WORDS: Partial<Record<ProbeShape, string>> = {
  not_cold: 'both runs warm (the first was not cold: another request left a shared prefix)',
  not_warm: 'both runs cold (the second was not warm: its prefix was evicted)',
  unprobed:
    'unprobed (the engine reports no cache hits and no flush was confirmed: cold and warm cannot be told apart)',
};

/**
 * What a repeat found, in words: the cold run against the warm one; `shift` adds the runs' own
 * figures (shifted positions of those compared, the largest shift) — on the printed line, not in
 * what decides whether a prompt's line is folded.
 */
function repeatWords(r: NonNullable<MirroredPair['repeats']>[number], shift = false): string {
  if (r.verdict === null) return `${r.backend}: repeat failed`;
  const c = r.analysis;
  const figures =
    shift && c !== null && c.comparable > 0
      ? `, shifted ${c.shifted}/${c.comparable} max ${formatNats(c.maxShift)}`
      : '';
  const probe = PROBE_WORDS[r.probe];
  if (probe) return `${r.backend}: ${probe}, ${r.verdict}${figures}`;
  return `${r.backend}: ${r.verdict === 'self_inconsistent' ? 'warm run differs from the cold run' : 'warm run agrees with the cold run'} (${r.verdict}${figures})`;
}

/** What a pair said: the pair's verdict and each repeat's, in words. */
function summaryOf(pair: MirroredPair): string {
  const parts = [pair.analysis?.verdict ?? (pair.baseline === null ? '' : pair.outcome)];
  for (const r of pair.repeats ?? []) parts.push(repeatWords(r));
  return parts.filter(Boolean).join(' · ');
}

/**
 * The compact live view: one line per mirrored request, except that a prompt asked again with
 * the same outcome as its last time is folded (counted, not printed) — so what is printed is what
 * changed, and a prompt that is sometimes fine and sometimes not shows each time it flips.
 */
export class LineFolder {
  private readonly last = new Map<string, string>();
  folded = 0;

  line(n: number, pair: MirroredPair): string | null {
    const prompt = promptText(pair.request) ?? '';
    const summary = summaryOf(pair);
    const before = this.last.get(prompt);
    this.last.set(prompt, summary);
    if (before === summary) {
      this.folded++;
      return null;
    }
    const again = before === undefined ? '' : `   (this prompt before: ${before})`;
    const repeats = (pair.repeats ?? []).map((r) => `  ${repeatWords(r, true)}`).join('');
    return `${pairLine(n, pair)}${repeats}${again}`;
  }
}

/**
 * How this process was started, as a command to type: `node bin/logprobe.js` from the clone (the
 * path relative to here), `logprobe` installed, `npx logprobe` from npx's cache, `npm run dev --`
 * from the sources.
 */
export function cliInvocation(script = process.argv[1] ?? '', cwd = process.cwd()): string {
  if (script.includes(`${sep}_npx${sep}`)) return 'npx logprobe';
  if (basename(script) === 'logprobe') return 'logprobe';
  if (script.endsWith('logprobe.js')) {
    const rel = relative(cwd, script);
    return `node ${rel.startsWith('..') || isAbsolute(rel) ? script : rel}`;
  }
  return 'npm run dev --';
}

/** The closing block: the exact commands to run next on what the demo captured (what they write goes beside it). */
export function nextSteps(
  captureDir: string,
  urls: { proxyUrl: string; adminUrl: string } | null,
  run = 'node bin/logprobe.js',
): string[] {
  const report = `${captureDir}-report.html`;
  const golden = `${captureDir}-golden.jsonl`;
  return [
    '',
    `next, on what was just captured (${captureDir}):`,
    `  ${run} analyze ${captureDir} --html ${report}    # verdicts, shifts, flips, the worst pairs; open the page`,
    `  ${run} analyze ${captureDir} --json | head -1          # one pair, every field (docs/format.md)`,
    `  ${run} record ${captureDir} --backend http://TRUSTED:8000 --out ${golden}      # a golden file from your trusted build`,
    `  ${run} replay ${captureDir} --candidate http://NEW:8000 --baseline-from ${golden}   # the CI gate, without a live baseline`,
    // The demo's engines stop with it: the two URLs are the user's to fill in (record and replay refuse them as printed).
    "  (TRUSTED and NEW stand for your own servers: the build you trust and the build under test; the demo's engines stop with it)",
    ...(urls ? [`  while a demo runs: the live page ${urls.adminUrl}/ui and ${urls.adminUrl}/metrics`] : []),
  ];
}

import { buildConfig } from '../config/load.js';
import { createLogger } from '../log/logger.js';
import { createRuntime } from '../server.js';
import type { AlertTransition } from '../core/detector.js';
import type { ProbeShape } from '../core/self.js';
import type { MirroredPair } from '../mirror/types.js';
import { promptText } from '../report/strips.js';
import { runTraffic } from './traffic.js';

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
  /** Starts the two engines; the demo closes them however it ends. */
  engines: () => Promise<DemoEngines>;
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
  verdicts: Record<string, number>;
  alerts: AlertTransition[];
  /** Seconds from the start to each alert's first firing (engine start-up included). */
  firstFiring: Partial<Record<AlertTransition['alert'], number>>;
  sent: number;
}

function fmt(v: number | null | undefined, digits = 3): string {
  return v === null || v === undefined ? '—' : v.toFixed(digits);
}

/** One live line per mirrored pair: verdict, aligned tokens, max shift, flip gap and class. */
export function pairLine(n: number, pair: MirroredPair): string {
  const a = pair.analysis;
  if (!a) return `#${String(n).padStart(4)} ${pair.route.padEnd(21)} ${pair.outcome}`;
  const flip = a.flip ? `flip@${a.flip.index} gap ${fmt(a.flip.gap)}${a.flip.lowerBound ? '+' : ''} ${a.flip.class}` : 'no flip';
  // The verdict is over every position when scoring ran past the divergence: say over how many.
  const s = a.scored;
  const over = s?.outcome === 'ok' ? `scored ${String(s.shifted).padStart(3)}/${String(s.comparable).padEnd(3)}` : `comparable ${String(a.comparable).padStart(3)}`;
  const where = a.locus ? `  locus ${a.locus}` : '';
  return `#${String(n).padStart(4)} ${pair.route.padEnd(21)} ${a.verdict.padEnd(18)} aligned ${String(a.aligned).padStart(3)}  ${over}  maxShift ${fmt(a.maxShift)}  ${flip}${where}`;
}

function alertLine(t: AlertTransition, mirrored: number, secs: number): string {
  const e = t.evidence;
  const what =
    t.alert === 'LogprobGlobalShift'
      ? 'every decode step moved: suspect the shared prefill input (KV cache / state), not decode-time noise'
      : t.alert === 'LogprobSelfInconsistency'
        ? `the ${t.backend ?? 'candidate'} disagrees with itself between a cold and a warm run: suspect the cache path`
        : `a sustained shift above the noise floor over ${e.cusumRequests} requests (median maxShift ${e.medianX === null ? 'n/a' : e.medianX.toFixed(2)}× the floor)`;
  return `${t.to === 'firing' ? '▲ ALERT FIRING' : '▼ alert resolved'}  ${t.alert} at mirrored request ${mirrored} (${secs.toFixed(1)} s since start): pooled share ${e.pooledShare.toFixed(2)}, median shift ${fmt(e.medianShift)} nats, CUSUM ${e.cusum.toFixed(1)}, e.g. request ${e.exampleRequestId ?? '—'} — ${what}`;
}

/**
 * The main job on an embedded default: two engines, the proxy in front at sampleRate 1, a
 * traffic generator, a live line per mirrored request, the moment each alert fires, and
 * /metrics to look at. The engines are closed however it ends.
 */
export async function runDemo(options: DemoOptions): Promise<DemoSummary> {
  const out = options.out;
  const started = options.startedAt ?? Date.now();
  const engines = await options.engines();
  const verdicts: Record<string, number> = {};
  const alerts: AlertTransition[] = [];
  const firstFiring: DemoSummary['firstFiring'] = {};
  let mirrored = 0;
  let sent = 0;
  const alertCfg = options.alert ?? { window: 20, minRequests: 10, forSeconds: 5 };
  let runtime: ReturnType<typeof createRuntime> | undefined;
  let urls: { proxyUrl: string; adminUrl: string } | null = null;
  const folder = new LineFolder();
  try {
    // Baseline-free, every request is a repeat probe. With a baseline, one in five requests is:
    // their first copy runs cold (the cache emptied before it) and matches the baseline, the rest
    // reuse the client's prefix and show a cache fault in the pair — the "sometimes yes, sometimes
    // no" of a cache bug, and both alerts.
    const repeat = options.baselineFree
      ? { rate: 1, backends: ['candidate' as const], flush: true }
      : options.repeats
        ? { rate: 0.2, backends: ['candidate' as const, 'baseline' as const], flush: true }
        : undefined;
    const config = buildConfig({
      listen: { host: '127.0.0.1', port: options.port },
      admin: { host: '127.0.0.1', port: options.adminPort },
      candidate: { url: engines.candidateUrl },
      baseline: options.baselineFree ? null : { url: engines.baselineUrl },
      mirror: { sampleRate: 1, concurrency: engines.mirrorConcurrency, queueSize: 64, maxTokens: engines.maxTokens, ...(repeat ? { repeat } : {}) },
      alert: { ...alertCfg, cusum: { k: 0.5, h: 5 } },
      capture: { enabled: true, dir: options.captureDir },
      log: { level: 'error' },
    });
    const logDestination = process.stderr as unknown as NodeJS.WritableStream & { write: (s: string) => boolean };
    runtime = createRuntime(config, {
      // The live lines own stdout: the proxy's and the mirror worker's log lines go to stderr.
      logger: createLogger({ level: 'error', destination: logDestination }),
      logDestination,
      listeners: {
        onPair(pair) {
          mirrored++;
          const key = pair.analysis?.verdict ?? pair.outcome;
          verdicts[key] = (verdicts[key] ?? 0) + 1;
          for (const r of pair.repeats ?? []) if (r.verdict) verdicts[`${r.backend} ${r.verdict}`] = (verdicts[`${r.backend} ${r.verdict}`] ?? 0) + 1;
          const line = folder.line(mirrored, pair);
          if (line !== null) out(line);
        },
        onAlert(t) {
          alerts.push(t);
          const secs = (Date.now() - started) / 1000;
          if (t.to === 'firing') firstFiring[t.alert] ??= secs;
          // The mirror reports a transition before the pair that caused it: print after that pair.
          queueMicrotask(() => out(alertLine(t, mirrored, secs)));
        },
      },
    });
    const { proxyUrl, adminUrl } = await runtime.listen();
    urls = { proxyUrl, adminUrl };
    out(`logprobe demo — ${engines.kind}`);
    out(`  candidate ${engines.candidateUrl}  (${engines.candidateLabel})`);
    out(options.baselineFree ? '  baseline  none: the candidate against itself (each request twice: cold, then warm from its cache)' : `  baseline  ${engines.baselineUrl}  (clean)`);
    if (options.repeats && !options.baselineFree) out('  repeats   1 in 5 mirrored requests once more to each backend: cold (cache emptied), then warm from its prefix cache');
    out(`  captures  ${options.captureDir}`);
    out(`  proxy     ${proxyUrl}   (every request mirrored: sampleRate 1)`);
    out(`  metrics   ${adminUrl}/metrics`);
    out(`  try:      curl -s ${proxyUrl}/v1/chat/completions -H 'content-type: application/json' -d '{"messages":[{"role":"user","content":"hello"}],"max_tokens":16}'`);
    out(`  alert window ${alertCfg.window} requests, min ${alertCfg.minRequests}, for ${alertCfg.forSeconds} s; ${options.duration ? `running ${options.duration} s` : 'Ctrl-C to stop'}`);
    out('');
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    if (options.signal.aborted) stop.abort();
    options.signal.addEventListener('abort', onAbort, { once: true });
    const timer = options.duration ? setTimeout(() => stop.abort(), options.duration * 1000) : undefined;
    let answered = 0;
    const live = runtime;
    const progress = setInterval(() => {
      const st = live.mirror?.detectorState;
      const mix = Object.entries(verdicts)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ');
      out(
        `… ${((Date.now() - started) / 1000).toFixed(0)} s: ${answered} client requests answered, ${mirrored} mirrored${folder.folded ? ` (${folder.folded} repeats of a prompt's last line folded)` : ''} [${mix}]${options.baselineFree ? '' : `; window ratio ${st ? (st.comparableSum > 0 ? st.shiftedSum / st.comparableSum : 0).toFixed(2) : '—'}, CUSUM ${st ? st.cusum.toFixed(1) : '—'}`}`,
      );
    }, 5000);
    try {
      sent = await runTraffic({ proxyUrl, rate: options.rate, maxTokens: engines.maxTokens, signal: stop.signal, onResponse: () => answered++ });
    } finally {
      clearInterval(progress);
      if (timer) clearTimeout(timer);
      options.signal.removeEventListener('abort', onAbort);
    }
    await runtime.mirror?.idle();
  } finally {
    await runtime?.close();
    await engines.close();
  }
  out('');
  const which = engines.engine === 'llama' ? 'llama.cpp engines' : 'simulated engines';
  out(
    `done (${which}): ${sent} client requests, ${mirrored} mirrored; verdicts ${JSON.stringify(verdicts)}; alerts ${alerts.map((a) => `${a.alert}${a.backend ? ` (${a.backend})` : ''} ${a.to}`).join(', ') || 'none'}`,
  );
  for (const line of nextSteps(options.captureDir, urls)) out(line);
  return { engine: engines.engine, mirrored, verdicts, alerts, firstFiring, sent };
}

/** A repeat that probed no cold→warm path, as the engine reported its cache hits. */
const PROBE_WORD: Partial<Record<ProbeShape, string>> = { not_cold: 'warm=warm', not_warm: 'cold=cold', unprobed: 'unprobed' };
const PROBE_NOTE: Partial<Record<ProbeShape, string>> = {
  not_cold: ' (first run not cold: another request left a shared prefix)',
  not_warm: ' (second run not warm: the prefix was evicted)',
  unprobed: ' (unprobed: the engine reports no cache hits and no flush was confirmed)',
};

/** What a pair said, in one word per comparison: the pair's verdict and each repeat's. */
function summaryOf(pair: MirroredPair): string {
  const parts = [pair.analysis?.verdict ?? (pair.baseline === null ? '' : pair.outcome)];
  for (const r of pair.repeats ?? [])
    parts.push(
      `${r.backend === 'candidate' ? 'cand' : 'base'} ${r.verdict === null ? 'failed' : (PROBE_WORD[r.probe] ?? (r.verdict === 'self_inconsistent' ? 'cold≠warm' : 'cold=warm'))}`,
    );
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
    const repeats = (pair.repeats ?? []).map((r) => `  ${r.backend} ${r.verdict ?? 'failed'}${PROBE_NOTE[r.probe] ?? ''}`).join('');
    return `${pairLine(n, pair)}${repeats}${again}`;
  }
}

/** The closing block: the exact commands to run next on what the demo captured. */
export function nextSteps(captureDir: string, urls: { proxyUrl: string; adminUrl: string } | null): string[] {
  return [
    '',
    `next, on what was just captured (${captureDir}):`,
    `  npx logprobe analyze ${captureDir} --html demo-report.html    # verdicts, shifts, flips, the worst pairs; open demo-report.html`,
    `  npx logprobe analyze ${captureDir} --json | head -1          # one pair, every field (docs/format.md)`,
    `  npx logprobe record ${captureDir} --backend http://TRUSTED:8000 --out golden.jsonl      # a golden file from your trusted build`,
    `  npx logprobe replay ${captureDir} --candidate http://NEW:8000 --baseline-from golden.jsonl   # the CI gate, without a live baseline`,
    ...(urls ? [`  while a demo runs: the live page ${urls.adminUrl}/ui and ${urls.adminUrl}/metrics`] : []),
  ];
}

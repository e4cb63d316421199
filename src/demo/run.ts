import { buildConfig } from '../config/load.js';
import { createLogger } from '../log/logger.js';
import { createRuntime } from '../server.js';
import type { AlertTransition } from '../core/detector.js';
import type { MirroredPair } from '../mirror/types.js';
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
  try {
    const config = buildConfig({
      listen: { host: '127.0.0.1', port: options.port },
      admin: { host: '127.0.0.1', port: options.adminPort },
      candidate: { url: engines.candidateUrl },
      baseline: { url: engines.baselineUrl },
      mirror: { sampleRate: 1, concurrency: engines.mirrorConcurrency, queueSize: 64, maxTokens: engines.maxTokens },
      alert: { ...alertCfg, cusum: { k: 0.5, h: 5 } },
      capture: { enabled: false },
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
          out(pairLine(mirrored, pair));
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
    out(`logprobe demo — ${engines.kind}`);
    out(`  candidate ${engines.candidateUrl}  (${engines.candidateLabel})`);
    out(`  baseline  ${engines.baselineUrl}  (clean)`);
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
      out(`… ${((Date.now() - started) / 1000).toFixed(0)} s: ${answered} client requests answered, ${mirrored} mirrored [${mix}]; window ratio ${st ? (st.comparableSum > 0 ? st.shiftedSum / st.comparableSum : 0).toFixed(2) : '—'}, CUSUM ${st ? st.cusum.toFixed(1) : '—'}`);
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
  out(`done (${which}): ${sent} client requests, ${mirrored} mirrored; verdicts ${JSON.stringify(verdicts)}; alerts ${alerts.map((a) => `${a.alert} ${a.to}`).join(', ') || 'none'}`);
  return { engine: engines.engine, mirrored, verdicts, alerts, firstFiring, sent };
}

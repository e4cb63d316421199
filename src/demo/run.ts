import { buildConfig } from '../config/load.js';
import { createLogger } from '../log/logger.js';
import { createRuntime } from '../server.js';
import type { AlertTransition } from '../core/detector.js';
import type { MirroredPair } from '../mirror/types.js';
import { startEngineServer, type EngineServerHandle } from '../engine/openai-server.js';
import { createSimModel, type SimOptions } from '../engine/sim/model.js';
import { runTraffic } from './traffic.js';

/** The candidate faults the simulated demo offers. */
export const SIM_DEMO_FAULTS = ['state-shift', 'none', 'noise', 'local', 'tokenizer'] as const;
export type SimDemoFault = (typeof SIM_DEMO_FAULTS)[number];

/** The candidate's knobs for each demo fault (the baseline is the same model, clean). */
export function simFaultOptions(fault: SimDemoFault): SimOptions {
  switch (fault) {
    case 'state-shift':
      // A corrupted prefill state: every decode step moves by ~0.2–0.5 nats.
      return { stateShift: 0.6 };
    case 'noise':
      // Float noise between two implementations: ~1e-3 nats.
      return { noise: 0.001 };
    case 'local':
      return { localShift: 1.5, localShiftRate: 0.1 };
    case 'tokenizer':
      return { tokenizerSplit: true };
    case 'none':
      return {};
  }
}

export interface DemoEngines {
  /** What runs the engines, for the banner. */
  kind: string;
  candidateUrl: string;
  baselineUrl: string;
  close(): Promise<void>;
}

export interface DemoOptions {
  /** Seconds to run; undefined runs until the signal. */
  duration?: number;
  /** Requests per second of the traffic generator. */
  rate: number;
  port: number;
  adminPort: number;
  /** Starts the two engines (simulated by default). */
  engines: () => Promise<DemoEngines>;
  /** Describes the fault on the banner. */
  faultLabel: string;
  /** Stops the demo early (Ctrl-C). */
  signal: AbortSignal;
  /** Where the live lines go. */
  out: (line: string) => void;
  /** Alert thresholds tuned so the demo shows a verdict within a minute. */
  alert?: { window: number; minRequests: number; forSeconds: number };
}

/** Starts two simulated engines in this process: a clean baseline and a candidate with the fault. */
export async function startSimEngines(fault: SimDemoFault, seed = 7): Promise<DemoEngines> {
  const baseline: EngineServerHandle = await startEngineServer({ model: createSimModel({ seed, id: 'sim-baseline' }), concurrency: 0 });
  const candidate: EngineServerHandle = await startEngineServer({ model: createSimModel({ seed, id: 'sim-candidate', ...simFaultOptions(fault) }), concurrency: 0 });
  return {
    kind: 'simulated engines (seeded toy language model)',
    candidateUrl: candidate.url,
    baselineUrl: baseline.url,
    close: async () => {
      await Promise.all([candidate.close(), baseline.close()]);
    },
  };
}

function fmt(v: number | null | undefined, digits = 3): string {
  return v === null || v === undefined ? '—' : v.toFixed(digits);
}

/** One live line per mirrored pair: verdict, aligned tokens, max shift, flip gap and class. */
export function pairLine(n: number, pair: MirroredPair): string {
  const a = pair.analysis;
  if (!a) return `#${String(n).padStart(4)} ${pair.route.padEnd(21)} ${pair.outcome}`;
  const flip = a.flip ? `flip@${a.flip.index} gap ${fmt(a.flip.gap)}${a.flip.lowerBound ? '+' : ''} ${a.flip.class}` : 'no flip';
  return `#${String(n).padStart(4)} ${pair.route.padEnd(21)} ${a.verdict.padEnd(18)} aligned ${String(a.aligned).padStart(3)}  comparable ${String(a.comparable).padStart(3)}  maxShift ${fmt(a.maxShift)}  ${flip}`;
}

/**
 * The main job on an embedded default: two engines, the proxy in front at sampleRate 1, a
 * traffic generator, a live line per mirrored request, the moment each alert fires, and
 * /metrics to look at. Returns a summary for the exit code and the tests.
 */
export async function runDemo(options: DemoOptions): Promise<{ mirrored: number; verdicts: Record<string, number>; alerts: AlertTransition[]; sent: number }> {
  const out = options.out;
  const engines = await options.engines();
  const verdicts: Record<string, number> = {};
  const alerts: AlertTransition[] = [];
  let mirrored = 0;
  const alertCfg = options.alert ?? { window: 20, minRequests: 10, forSeconds: 5 };
  const config = buildConfig({
    listen: { host: '127.0.0.1', port: options.port },
    admin: { host: '127.0.0.1', port: options.adminPort },
    candidate: { url: engines.candidateUrl },
    baseline: { url: engines.baselineUrl },
    mirror: { sampleRate: 1, concurrency: 2, queueSize: 64 },
    alert: { ...alertCfg, cusum: { k: 0.5, h: 5 } },
    capture: { enabled: false },
    log: { level: 'error' },
  });
  const started = Date.now();
  const runtime = createRuntime(config, {
    logger: createLogger({ level: 'error', destination: process.stderr as unknown as NodeJS.WritableStream & { write: (s: string) => boolean } }),
    listeners: {
      onPair(pair) {
        mirrored++;
        const key = pair.analysis?.verdict ?? pair.outcome;
        verdicts[key] = (verdicts[key] ?? 0) + 1;
        out(pairLine(mirrored, pair));
      },
      onAlert(t) {
        alerts.push(t);
        const secs = ((Date.now() - started) / 1000).toFixed(1);
        const e = t.evidence;
        const what = t.alert === 'LogprobGlobalShift' ? 'every decode step moved: suspect the shared prefill input (KV cache / state), not decode-time noise' : 'a sustained shift above the noise floor';
        out(
          `${t.to === 'firing' ? '▲ ALERT FIRING' : '▼ alert resolved'}  ${t.alert} after ${mirrored} mirrored requests (${secs} s): pooled share ${e.pooledShare.toFixed(2)}, median shift ${fmt(e.medianShift)} nats, CUSUM ${e.cusum.toFixed(1)}, e.g. request ${e.exampleRequestId ?? '—'} — ${what}`,
        );
      },
    },
  });
  let sent = 0;
  try {
    const { proxyUrl, adminUrl } = await runtime.listen();
    out(`logprobe demo — ${engines.kind}`);
    out(`  candidate ${engines.candidateUrl}  (${options.faultLabel})`);
    out(`  baseline  ${engines.baselineUrl}  (clean)`);
    out(`  proxy     ${proxyUrl}   (every request mirrored: sampleRate 1)`);
    out(`  metrics   ${adminUrl}/metrics`);
    out(`  try:      curl -s ${proxyUrl}/v1/chat/completions -H 'content-type: application/json' -d '{"messages":[{"role":"user","content":"hello"}],"max_tokens":16}'`);
    out(`  alert window ${alertCfg.window} requests, min ${alertCfg.minRequests}, for ${alertCfg.forSeconds} s; ${options.duration ? `running ${options.duration} s` : 'Ctrl-C to stop'}`);
    out('');
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    options.signal.addEventListener('abort', onAbort, { once: true });
    const timer = options.duration ? setTimeout(() => stop.abort(), options.duration * 1000) : undefined;
    let answered = 0;
    const progress = setInterval(() => {
      const st = runtime.mirror?.detectorState;
      const mix = Object.entries(verdicts)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ');
      out(`… ${((Date.now() - started) / 1000).toFixed(0)} s: ${answered} client requests answered, ${mirrored} mirrored [${mix}]; window ratio ${st ? (st.comparableSum > 0 ? st.shiftedSum / st.comparableSum : 0).toFixed(2) : '—'}, CUSUM ${st ? st.cusum.toFixed(1) : '—'}`);
    }, 5000);
    sent = await runTraffic({ proxyUrl, rate: options.rate, signal: stop.signal, onResponse: () => answered++ });
    clearInterval(progress);
    if (timer) clearTimeout(timer);
    options.signal.removeEventListener('abort', onAbort);
    await runtime.mirror?.idle();
  } finally {
    await runtime.close();
    await engines.close();
  }
  out('');
  out(`done: ${sent} client requests, ${mirrored} mirrored; verdicts ${JSON.stringify(verdicts)}; alerts ${alerts.map((a) => `${a.alert} ${a.to}`).join(', ') || 'none'}`);
  return { mirrored, verdicts, alerts, sent };
}

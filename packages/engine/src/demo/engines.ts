/**
 * The demo's two engines: llama.cpp in two separate processes when it can run here, the
 * simulated engines in this process otherwise (or when asked), with one line saying which.
 */
import type { EngineApi } from '../api/profile.js';
import { startEngineServer, type EngineServerHandle } from '../openai-server.js';
import { createSimModel, type SimOptions } from '../sim/model.js';
import { EngineStartError, spawnLlamaEngine, type LlamaEngineProcess } from './engine-process.js';
import {
  faultLabel,
  needsPrefixCache,
  type DemoEngineChoice,
  type DemoFaultPlan,
  type SimDemoFault,
} from './faults.js';

/** Two running engines and how the demo should drive them. */
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

/** The candidate's knobs for each simulated fault (the baseline is the same model, clean). */
export function simFaultOptions(fault: SimDemoFault): SimOptions {
  switch (fault) {
    case 'state-shift':
      // A corrupted prefill state: every decode step moves by ~0.2–0.5 nats.
      return { stateShift: 0.6 };
    case 'subtle':
      // A small persistent shift (~1.5× the floor per request): CUSUM's case, not the window's.
      return { stateShift: 0.1 };
    case 'noise':
      // Float noise between two implementations: ~1e-3 nats.
      return { noise: 0.001 };
    case 'local':
      return { localShift: 1.5, localShiftRate: 0.1 };
    case 'tokenizer':
      return { tokenizerSplit: true };
    case 'decode-shift':
      // The state carried into decode: prompt and first step clean, every later step ~0.2–0.5 nats.
      return { decodeShift: 0.6 };
    case 'cache-hit':
      // A wrong restore: a cold request is clean, a warm one (a prefix-cache hit) moves.
      return { cacheHitShift: 0.6 };
    case 'none':
      return {};
  }
}

/** What the demo's engines pretend to be, beyond the fault (both engines alike). */
export interface DemoEngineApi {
  /** The API (default `logprobe`). */
  readonly api?: EngineApi;
  /** The prefix cache (default: the API's; on when the fault shows only on cache hits). */
  readonly prefixCache?: boolean;
  /** Sim: prefixes each engine's cache keeps (a real engine keeps many; default 1). */
  readonly cacheSlots?: number;
  /** llamacpp: llama-server's `--slot-save-path` (the slot actions, so the proxy may empty the cache). */
  readonly slotSavePath?: string;
}

/** Starts two simulated engines in this process: a clean baseline and a candidate with the fault. */
export async function startSimEngines(
  fault: SimDemoFault,
  seed = 7,
  label?: string,
  engine: DemoEngineApi = {},
): Promise<DemoEngines> {
  const prefixCache = engine.prefixCache ?? (fault === 'cache-hit' ? true : undefined);
  const common = {
    concurrency: 0,
    ...(engine.api ? { api: engine.api } : {}),
    ...(prefixCache !== undefined ? { prefixCache } : {}),
    ...(engine.slotSavePath ? { slotSavePath: engine.slotSavePath } : {}),
  };
  const slots = engine.cacheSlots !== undefined ? { cacheSlots: engine.cacheSlots } : {};
  const baseline: EngineServerHandle = await startEngineServer({
    model: createSimModel({ seed, id: 'sim-baseline', ...slots }),
    ...common,
  });
  const candidate: EngineServerHandle = await startEngineServer({
    model: createSimModel({ seed, id: 'sim-candidate', ...simFaultOptions(fault), ...slots }),
    ...common,
  });
  return {
    engine: 'sim',
    kind: 'simulated engines (seeded toy language model, in this process)',
    candidateUrl: candidate.url,
    baselineUrl: baseline.url,
    candidateLabel: label ?? faultLabel(fault, fault),
    maxTokens: 48,
    mirrorConcurrency: 2,
    close: async () => {
      await Promise.all([candidate.close(), baseline.close()]);
    },
  };
}

/** Options of {@link startLlamaEngines}. */
export interface LlamaEnginesOptions {
  /** The candidate's llama fault, or 'none'. */
  fault: string;
  seed?: number;
  threads?: number;
  /** Per engine: model generation on first use and the library load included. */
  timeoutMs?: number;
  env?: Readonly<Record<string, string>>;
  /** The API and prefix cache of both engines. */
  engine?: DemoEngineApi;
  /** Told what the start is doing: the processes spawned, then each engine as it answers. */
  progress?: (line: string) => void;
}

/**
 * Starts two `logprobe engine --llama` processes on one seed: a clean baseline and the candidate
 * with the fault. Rejects with {@link EngineStartError} (both stopped) when either fails.
 */
export async function startLlamaEngines(
  options: LlamaEnginesOptions,
): Promise<DemoEngines & { processes: LlamaEngineProcess[] }> {
  const seed = options.seed ?? 1;
  const e = options.engine ?? {};
  const common = {
    seed,
    threads: options.threads ?? 1,
    timeoutMs: options.timeoutMs ?? 60_000,
    ...(options.env ? { env: options.env } : {}),
    ...(e.api ? { api: e.api } : {}),
    ...(e.prefixCache !== undefined ? { prefixCache: e.prefixCache } : {}),
    ...(e.slotSavePath ? { args: ['--slot-save-path', e.slotSavePath] } : {}),
  };
  const progress = options.progress ?? (() => {});
  const t0 = Date.now();
  progress(
    `starting two llama.cpp engines in their own processes (baseline clean, candidate ${options.fault === 'none' ? 'clean' : `with ${options.fault}`}): each generates its tiny model on first use, loads llama.cpp, then listens`,
  );
  // Each engine said as it answers: the slower one is what the demo still waits for.
  const said = (name: string) => (p: LlamaEngineProcess) => {
    progress(`${name} engine answers at ${p.url} (pid ${p.pid}, ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    return p;
  };
  const started = await Promise.allSettled([
    spawnLlamaEngine({ ...common, fault: null }).then(said('baseline')),
    spawnLlamaEngine({ ...common, fault: options.fault === 'none' ? null : options.fault }).then(said('candidate')),
  ]);
  const [base, cand] = started;
  if (base?.status !== 'fulfilled' || cand?.status !== 'fulfilled') {
    await Promise.all(started.map((s) => (s.status === 'fulfilled' ? s.value.stop() : null)));
    const failed = [base, cand].find((s): s is PromiseRejectedResult => s?.status === 'rejected');
    const reason = failed?.reason as unknown;
    throw reason instanceof EngineStartError
      ? reason
      : new EngineStartError(reason instanceof Error ? reason.message : String(reason), '');
  }
  const baseline = base.value;
  const candidate = cand.value;
  return {
    engine: 'llama',
    kind: `llama.cpp engines (node-llama-cpp, a tiny model generated from seed ${seed}, threads ${common.threads}; pids ${baseline.pid}, ${candidate.pid})`,
    candidateUrl: candidate.url,
    baselineUrl: baseline.url,
    candidateLabel: faultLabel(options.fault, options.fault),
    // A byte-level model: 32 tokens are ~32 characters, plenty of positions per request.
    maxTokens: 32,
    // Each engine decodes one request at a time; the client's requests share the candidate.
    mirrorConcurrency: 1,
    processes: [baseline, candidate],
    close: async () => {
      await Promise.all([candidate.stop(), baseline.stop()]);
    },
  };
}

/** Options of {@link chooseEngines}. */
export interface ChooseEnginesOptions {
  choice: DemoEngineChoice;
  plan: DemoFaultPlan;
  /** Where the one-line notices go. */
  notice: (line: string) => void;
  seed?: number;
  threads?: number;
  timeoutMs?: number;
  env?: Readonly<Record<string, string>>;
  /** What both engines pretend to be (default: the old engines; the prefix cache on for a cache-hit fault). */
  engine?: DemoEngineApi;
  /** Told what the start is doing, line by line (which engines start, each as it answers). */
  progress?: (line: string) => void;
}

/**
 * Picks and starts the engines: llama.cpp when `choice` allows it and the fault has a llama.cpp
 * form; the simulated engines otherwise, with one line saying why. `choice: 'llama'` never falls
 * back: its failure is the caller's error.
 */
export async function chooseEngines(options: ChooseEnginesOptions): Promise<DemoEngines> {
  const { plan, choice } = options;
  const simLabel = faultLabel(plan.sim, plan.requested);
  // A fault that shows only on cache hits needs both engines to keep the previous request's prefix.
  const prefixCache = options.engine?.prefixCache ?? (needsPrefixCache(plan) ? true : undefined);
  const api: DemoEngineApi = { ...options.engine, ...(prefixCache !== undefined ? { prefixCache } : {}) };
  const progress = options.progress ?? (() => {});
  const sim = () => {
    progress('starting the simulated engines in this process');
    return startSimEngines(plan.sim, undefined, simLabel, api);
  };
  if (choice === 'sim') return sim();
  if (plan.llama === null) {
    if (choice === 'llama')
      throw new EngineStartError(`fault '${plan.requested}' exists only on the simulated engines`, '');
    options.notice(`fault '${plan.requested}' exists only on the simulated engines: using them`);
    return sim();
  }
  try {
    const engines = await startLlamaEngines({
      fault: plan.llama,
      ...(options.seed !== undefined ? { seed: options.seed } : {}),
      ...(options.threads !== undefined ? { threads: options.threads } : {}),
      ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
      ...(options.env ? { env: options.env } : {}),
      engine: api,
      progress,
    });
    return { ...engines, candidateLabel: faultLabel(plan.llama, plan.requested) };
  } catch (err) {
    if (choice === 'llama' || !(err instanceof EngineStartError)) throw err;
    options.notice(`llama.cpp engines unavailable (${err.reason}): falling back to simulated engines`);
    return sim();
  }
}

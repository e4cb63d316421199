/**
 * The demo's `--fault` and `--engine`: which engines run and what the candidate gets. A llama.cpp
 * fault has a simulated stand-in for machines where llama.cpp cannot run, and the simulated
 * faults with a real counterpart run on llama.cpp when it can. Pure: no engine is loaded here.
 */
import { FAULT_FORMS, InvalidFaultError, parseFault } from '../llama/faults.js';

/** The candidate faults the simulated engines offer. */
export const SIM_DEMO_FAULTS = [
  'state-shift',
  'subtle',
  'none',
  'noise',
  'local',
  'tokenizer',
  'decode-shift',
  'cache-hit',
] as const;
/** A simulated candidate fault. */
export type SimDemoFault = (typeof SIM_DEMO_FAULTS)[number];

/** Which engines the demo may use. */
export const DEMO_ENGINES = ['auto', 'llama', 'sim'] as const;
/** `--engine`: llama.cpp when it runs here (auto), llama.cpp or fail, or the simulated engines. */
export type DemoEngineChoice = (typeof DEMO_ENGINES)[number];

/** The default candidate fault: an attention layer zeroed, a gross state bug that shows as a large global shift. */
export const DEFAULT_LLAMA_FAULT = 'zero-layer:1';

/** What the candidate runs on each kind of engine; null where that kind has no counterpart. */
export interface DemoFaultPlan {
  /** The llama engine fault ('none' for a clean candidate), or null: simulated engines only. */
  llama: string | null;
  /** The simulated fault, used by `--engine sim` and by the fallback. */
  sim: SimDemoFault;
  /** What the user asked for, as typed. */
  requested: string;
}

/** Simulated faults that have a llama.cpp counterpart (the rest exist only on the simulated engines). */
const SIM_TO_LLAMA: Partial<Record<SimDemoFault, string>> = {
  'state-shift': DEFAULT_LLAMA_FAULT,
  subtle: 'weight-noise:0.01',
  noise: 'flash-attention',
  none: 'none',
  'decode-shift': 'decode-state:3',
  'cache-hit': 'cache-hit:3',
};

/**
 * The simulated stand-in for a llama fault: implementation noise (flash attention, f16 weights,
 * batch size) ↔ `noise`; gross state bugs (a zeroed layer, a lost KV cell, a q4_0 cache) ↔
 * `state-shift`; the small persistent shifts (1% weight noise, a q8_0 K cache) ↔ `subtle`; a
 * cell lost after the prompt (`decode-state:I`) ↔ `decode-shift`; a wrong cache restore
 * (`cache-hit:I`) ↔ `cache-hit`.
 */
export function simStandIn(llamaFault: string): SimDemoFault {
  const setup = parseFault(llamaFault);
  if (
    setup.variant.zeroAttentionOutputLayer !== undefined ||
    setup.dropPromptToken !== null ||
    setup.kvKeyType === 'Q4_0' ||
    setup.kvValueType === 'Q4_0'
  )
    return 'state-shift';
  if (setup.cacheHitToken !== null) return 'cache-hit';
  if (setup.decodeStateToken !== null) return 'decode-shift';
  if (setup.variant.ffnDownNoise !== undefined || setup.kvKeyType === 'Q8_0') return 'subtle';
  if (setup.flashAttention || setup.variant.weights === 'f16' || setup.batchSize !== null) return 'noise';
  return 'none';
}

/** Thrown for a `--fault` neither kind of engine knows. */
export class UnknownDemoFaultError extends Error {
  override readonly name = 'UnknownDemoFaultError';
}

/**
 * Resolves `--fault`: a simulated fault name (`state-shift`, `noise`, …) or any llama engine
 * fault (`zero-layer:1`, `kv:q4_0`, `batch:8`, …; see the engine's FAULT_FORMS).
 */
export function planFault(requested: string): DemoFaultPlan {
  const text = requested.trim();
  const lists = `the demo takes a llama.cpp engine fault (${FAULT_FORMS.join(', ')}, none) or a simulated one (${SIM_DEMO_FAULTS.join(', ')})`;
  if (text === '') throw new UnknownDemoFaultError(`empty fault; ${lists}`);
  if ((SIM_DEMO_FAULTS as readonly string[]).includes(text)) {
    const sim = text as SimDemoFault;
    return { llama: SIM_TO_LLAMA[sim] ?? null, sim, requested: text };
  }
  try {
    return { llama: text, sim: simStandIn(text), requested: text };
  } catch (err) {
    if (err instanceof InvalidFaultError) {
      throw new UnknownDemoFaultError(`${err.message.replace(/; expected one of .*$/, '')}; ${lists}`);
    }
    throw err;
  }
}

/**
 * Whether a plan's fault shows only on prefix-cache hits (`cache-hit:I` and its stand-in): the
 * demo's engines then keep the previous request's prefix, both of them, so the baseline meets
 * the same cold and warm requests.
 */
export function needsPrefixCache(plan: DemoFaultPlan): boolean {
  if (plan.sim === 'cache-hit') return true;
  return plan.llama !== null && plan.llama !== 'none' && parseFault(plan.llama).cacheHitToken !== null;
}

/** A short label for the banner: the fault and, when it differs, what the user asked for. */
export function faultLabel(fault: string, requested: string): string {
  const name = fault === 'none' ? 'no fault' : `fault: ${fault}`;
  return fault === requested ? name : `${name}, for --fault ${requested}`;
}

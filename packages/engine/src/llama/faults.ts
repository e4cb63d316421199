/**
 * Fault injection for the llama.cpp engine: a `--fault` string becomes the model file variant,
 * the context options and the sequence behaviour that reproduce one real bug or one real source
 * of float noise. Pure: no node-llama-cpp here, so the CLI can validate flags cheaply.
 */
import { SHAPE, type ModelVariant } from './generate-model.js';

/** A `--fault` value that does not parse; the message names the fault and the reason. */
export class InvalidFaultError extends Error {
  override readonly name = 'InvalidFaultError';
}

/** KV cache element types the engine can inject (llama.cpp `ggml_type` names). */
export type KvCacheType = 'F16' | 'Q8_0' | 'Q4_0';

/** Everything a fault changes relative to the clean engine. */
export interface EngineSetup {
  readonly variant: ModelVariant;
  readonly flashAttention: boolean;
  /** null: node-llama-cpp's default (512, or the context size when smaller). */
  readonly batchSize: number | null;
  readonly kvKeyType: KvCacheType;
  readonly kvValueType: KvCacheType;
  /** Prompt token index whose KV cell is erased before the last prompt token is evaluated, or null. */
  readonly dropPromptToken: number | null;
  /** Prompt token index whose KV cell is erased once the whole prompt is evaluated (`decode-state:I`), or null. */
  readonly decodeStateToken: number | null;
  /** Prompt token index whose restored KV cell is erased when a request reuses the cached prefix (`cache-hit:I`), or null. */
  readonly cacheHitToken: number | null;
}

/** The clean setup every fault is measured against (f32, no flash attention, f16 KV, batch 512). */
export const CLEAN_SETUP: EngineSetup = {
  variant: { weights: 'f32' },
  flashAttention: false,
  batchSize: null,
  kvKeyType: 'F16',
  kvValueType: 'F16',
  dropPromptToken: null,
  decodeStateToken: null,
  cacheHitToken: null,
};

/** Accepted `--fault` forms, for help texts and error messages. */
export const FAULT_FORMS = [
  'zero-layer:L',
  'drop-prompt-token:I',
  'decode-state:I',
  'cache-hit:I',
  'kv:q8_0',
  'kv:q4_0',
  'weights:f16',
  'flash-attention',
  'batch:N',
  'weight-noise:EPS',
] as const;

function integer(fault: string, arg: string | undefined, min: number, max: number): number {
  const n = arg !== undefined && /^\d+$/.test(arg) ? Number(arg) : NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw new InvalidFaultError(`fault "${fault}": expected an integer from ${min} to ${max}`);
  }
  return n;
}

function applyOne(setup: EngineSetup, fault: string): EngineSetup {
  const colon = fault.indexOf(':');
  const name = colon < 0 ? fault : fault.slice(0, colon);
  const arg = colon < 0 ? undefined : fault.slice(colon + 1);
  const needsNoArg = (): void => {
    if (arg !== undefined) throw new InvalidFaultError(`fault "${fault}": "${name}" takes no argument`);
  };
  switch (name) {
    case 'zero-layer':
      return {
        ...setup,
        variant: { ...setup.variant, zeroAttentionOutputLayer: integer(fault, arg, 0, SHAPE.layers - 1) },
      };
    case 'drop-prompt-token':
      return { ...setup, dropPromptToken: integer(fault, arg, 0, SHAPE.contextLength - 2) };
    case 'decode-state':
      // The state carried into decode: the prompt's logits (and the first generated token's
      // distribution) are clean, every later evaluation on that state misses the cell.
      return { ...setup, decodeStateToken: integer(fault, arg, 0, SHAPE.contextLength - 2) };
    case 'cache-hit':
      // What a prefix-cache hit restores: clean on a cold request, wrong on a warm one.
      return { ...setup, cacheHitToken: integer(fault, arg, 0, SHAPE.contextLength - 2) };
    case 'kv':
      // The measured bugs: a q8_0 K cache alone, and K and V both in q4_0. llama.cpp only accepts a
      // quantized V cache together with flash attention, so kv:q4_0 turns it on.
      if (arg === 'q8_0') return { ...setup, kvKeyType: 'Q8_0' };
      if (arg === 'q4_0') return { ...setup, kvKeyType: 'Q4_0', kvValueType: 'Q4_0', flashAttention: true };
      throw new InvalidFaultError(`fault "${fault}": expected kv:q8_0 or kv:q4_0`);
    case 'weights':
      if (arg !== 'f16') throw new InvalidFaultError(`fault "${fault}": expected weights:f16`);
      return { ...setup, variant: { ...setup.variant, weights: 'f16' } };
    case 'flash-attention':
      needsNoArg();
      return { ...setup, flashAttention: true };
    case 'batch':
      return { ...setup, batchSize: integer(fault, arg, 1, SHAPE.contextLength) };
    case 'weight-noise': {
      const eps = arg !== undefined && arg.trim() !== '' ? Number(arg) : NaN;
      if (!Number.isFinite(eps) || eps <= 0 || eps > 1) {
        throw new InvalidFaultError(
          `fault "${fault}": expected a relative noise level in (0, 1], e.g. weight-noise:0.01`,
        );
      }
      return { ...setup, variant: { ...setup.variant, ffnDownNoise: eps } };
    }
    default:
      throw new InvalidFaultError(
        `unknown fault "${fault}"; expected one of ${FAULT_FORMS.join(', ')} (comma-separated to combine)`,
      );
  }
}

/**
 * Parses a fault string: one form from {@link FAULT_FORMS}, several joined by commas, or
 * empty/`none` for the clean engine.
 */
export function parseFault(fault: string | null | undefined): EngineSetup {
  const text = (fault ?? '').trim();
  if (text === '' || text === 'none') return CLEAN_SETUP;
  return text
    .split(',')
    .map((part) => part.trim())
    .reduce((setup, part) => {
      if (part === '') throw new InvalidFaultError(`fault "${text}": empty item in the list`);
      return applyOne(setup, part);
    }, CLEAN_SETUP);
}

/**
 * The llama.cpp engine model: the generated GGUF loaded through node-llama-cpp, one context with
 * one sequence, greedy-decoding-ready distributions from `controlledEvaluate`, and optional
 * injected faults (see `faults.ts`). Results are bit-reproducible on one machine with the same
 * setup; llama.cpp picks a CPU-specific kernel build at run time, so compare live engines rather
 * than stored numbers.
 */
import { statSync } from 'node:fs';
import type { LlamaContext, LlamaModel, Token } from 'node-llama-cpp';
import type { EngineModel, ModelSequence, StartOptions } from '../model.js';
import { parseFault, type EngineSetup } from './faults.js';
import { ensureModelFile, SHAPE } from './generate-model.js';
import { acquireRuntime, type RuntimeHandle } from './runtime.js';
import { LlamaSequence } from './sequence.js';
import { LlamaSlot } from './slot.js';
import { buildVocab, TOKEN_TYPE_CONTROL, type Vocab } from './vocab.js';

/** Options of {@link createLlamaModel}. */
export interface LlamaModelOptions {
  /** Weight seed of the generated model (a non-negative 32-bit integer). Default 1. */
  readonly seed?: number;
  /** A fault string (`zero-layer:1`, `kv:q4_0`, …; see `FAULT_FORMS`), or null/'' for none. */
  readonly fault?: string | null;
  /** CPU threads for evaluation. Default 1: on a 2-core machine 2 threads are ~20× slower. */
  readonly threads?: number;
  /** KV cache size in tokens (prompt + generation). Default 2048. */
  readonly contextSize?: number;
  /** Directory for the generated model files. Default: see `defaultModelDir()`. */
  readonly cacheDir?: string;
  /** The id reported by `/v1/models`. Default `logprobe-tiny-llama`. */
  readonly id?: string;
}

/** What llama.cpp actually runs with, read back from the context (proves a fault took effect). */
export interface LlamaContextInfo {
  readonly contextSize: number;
  readonly batchSize: number;
  readonly threads: number;
  readonly flashAttention: boolean | 'auto';
  readonly kvCacheKeyType: string;
  readonly kvCacheValueType: string;
}

/** The llama.cpp engine model, plus the setup it runs with (for logs and tests). */
export interface LlamaEngineModel extends EngineModel {
  readonly setup: EngineSetup;
  readonly context: LlamaContextInfo;
  readonly modelPath: string;
  readonly vocabSize: number;
  readonly bosToken: number;
  /** Empties the prefix-cache slot; resolves with the tokens it held. */
  flushCache(): Promise<number>;
  close(): Promise<void>;
}

function checkedInteger(name: string, value: number, min: number, max: number): number {
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} must be an integer from ${min} to ${max}, got ${value}`);
  }
  return value;
}

/**
 * Creates the llama.cpp engine: generates (or reuses) the model file for the seed and fault,
 * loads it and creates its context. Throws `InvalidFaultError` for a bad fault string before
 * loading anything.
 */
export async function createLlamaModel(options: LlamaModelOptions = {}): Promise<LlamaEngineModel> {
  const seed = checkedInteger('seed', options.seed ?? 1, 0, 0xffffffff);
  const threads = checkedInteger('threads', options.threads ?? 1, 1, 256);
  const contextSize = checkedInteger('contextSize', options.contextSize ?? 2048, 16, 2048);
  const setup = parseFault(options.fault);
  const modelPath = await ensureModelFile({
    seed,
    variant: setup.variant,
    ...(options.cacheDir ? { dir: options.cacheDir } : {}),
  });

  const runtime = await acquireRuntime();
  try {
    const { model, context } = await openContext(runtime, modelPath, setup, contextSize, threads);
    const slot = new LlamaSlot(context.getSequence());
    const vocab = buildVocab();
    const { vocabSize, checkId, controlText, bytesOf } = vocabAccess(vocab);
    const textDecoder = new TextDecoder('utf-8');
    const state: LlamaState = { slot, bos: model.tokens.bos ?? vocab.bosId, vocabSize, setup, checkId, closed: false };
    const engine: LlamaEngineModel = {
      id: options.id ?? 'logprobe-tiny-llama',
      eosToken: model.tokens.eos ?? vocab.eosId,
      bosToken: state.bos,
      setup,
      context: contextInfo(runtime, context),
      modelPath,
      card: {
        path: modelPath,
        embedding: SHAPE.embedding,
        bytes: statSync(modelPath).size,
        parameters: Math.round(statSync(modelPath).size / (setup.variant.weights === 'f16' ? 2 : 4)),
      },
      vocabSize,
      tokenize: (text) => model.tokenize(text, false).map(Number),
      tokenizeSpecial: (text) => model.tokenize(text, true).map(Number),
      vocabPiece: (id) => vocab.tokens[checkId(id)] ?? '',
      tokenText: (id) => controlText(checkId(id)) ?? textDecoder.decode(bytesOf(id)),
      tokenBytes: (id) => bytesOf(checkId(id)),
      // Special tokens (BOS/EOS) carry no text, as in a completion's `text`.
      detokenize: (ids) => model.detokenize(ids.map(checkId) as Token[], false),
      start: async (prompt: readonly number[], o: StartOptions): Promise<ModelSequence> => startLlama(state, prompt, o),
      flushCache: () => slot.flush(),
      async close() {
        if (state.closed) return;
        state.closed = true;
        await context.dispose();
        await model.dispose();
        await runtime.release();
      },
    };
    return engine;
  } catch (err) {
    await runtime.release();
    throw err;
  }
}

/** What the context runs with, read back from llama.cpp. */
function contextInfo({ lib }: RuntimeHandle, context: LlamaContext): LlamaContextInfo {
  return {
    contextSize: context.contextSize,
    batchSize: context.batchSize,
    threads: context.idealThreads,
    flashAttention: context.flashAttention,
    kvCacheKeyType: String(lib.GgmlType[context.kvCacheKeyType]),
    kvCacheValueType: String(lib.GgmlType[context.kvCacheValueType]),
  };
}

/** Loads the model file and creates its one-sequence context with the setup's attention, batch and KV types. */
async function openContext(
  runtime: RuntimeHandle,
  modelPath: string,
  setup: EngineSetup,
  contextSize: number,
  threads: number,
): Promise<{ model: LlamaModel; context: LlamaContext }> {
  const { lib, llama } = runtime;
  const model = await llama.loadModel({ modelPath, gpuLayers: 0, defaultContextFlashAttention: false });
  const context = await model
    .createContext({
      contextSize,
      sequences: 1,
      threads: { ideal: threads, min: threads },
      flashAttention: setup.flashAttention,
      ...(setup.batchSize !== null ? { batchSize: setup.batchSize } : {}),
      experimentalKvCacheKeyType: lib.GgmlType[setup.kvKeyType],
      experimentalKvCacheValueType: lib.GgmlType[setup.kvValueType],
      // No automatic retries with a smaller context: the size is part of the setup.
      failedCreationRemedy: false,
    })
    .catch(async (err: unknown) => {
      await model.dispose();
      throw err;
    });
  return { model, context };
}

/** The vocabulary's checked id, control-token names and token bytes. */
function vocabAccess(vocab: Vocab): {
  vocabSize: number;
  checkId: (id: number) => number;
  controlText: (id: number) => string | null;
  bytesOf: (id: number) => Uint8Array;
} {
  const vocabSize = vocab.tokens.length;
  const checkId = (id: number): number => {
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize)
      throw new RangeError(`token id ${id} is outside the vocabulary (0..${vocabSize - 1})`);
    return id;
  };
  const controlText = (id: number): string | null =>
    vocab.types[id] === TOKEN_TYPE_CONTROL ? (vocab.tokens[id] ?? null) : null;
  // Control tokens (BOS/EOS) are named in token lists but contribute no bytes to the text, as
  // in the simulated engine.
  const bytesOf = (id: number): Uint8Array => vocab.bytes[id] ?? new Uint8Array(0);
  return { vocabSize, checkId, controlText, bytesOf };
}

/** What a llama sequence starts from: the one slot, the setup's faults, and whether the model is closed. */
interface LlamaState {
  slot: LlamaSlot;
  bos: number;
  vocabSize: number;
  setup: EngineSetup;
  checkId: (id: number) => number;
  closed: boolean;
}

/** A fault names a prompt token; the cell is one further when the tokens start with BOS. */
function faultCell(index: number | null, cells: readonly number[], bos: number): number | null {
  if (index === null) return null;
  const cell = index + (cells[0] === bos ? 1 : 0);
  return cell < cells.length ? cell : null;
}

async function startLlama(st: LlamaState, prompt: readonly number[], o: StartOptions): Promise<ModelSequence> {
  if (st.closed) throw new Error('llama model is closed');
  for (const id of prompt) st.checkId(id);
  const { bos, setup, slot } = st;
  const addBos = o.addBos ?? true;
  const cells = addBos ? [bos, ...prompt] : [...prompt];
  if (cells.length === 0) throw new RangeError('the prompt is empty');
  const from = o.promptLogprobsFrom ?? 1;
  return new LlamaSequence({
    slot,
    claim: slot.claim(),
    cells,
    vocabSize: st.vocabSize,
    faults: {
      drop: faultCell(setup.dropPromptToken, cells, bos),
      decodeState: faultCell(setup.decodeStateToken, cells, bos),
      cacheHit: faultCell(setup.cacheHitToken, cells, bos),
    },
    // Nothing is reused between requests unless the request asks (the prefix cache).
    cache: o.cache,
    echoCell: from + (addBos ? 1 : 0) - 1,
    echoAnnounced: o.promptLogprobsFrom !== undefined,
    isClosed: () => st.closed,
  });
}

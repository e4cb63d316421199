/**
 * Loads llama.cpp (node-llama-cpp) on demand and shares one `Llama` runtime between the models of
 * a process. node-llama-cpp is a dev dependency and ~80 MB of native code: it is only ever
 * imported dynamically from here, so `logprobe serve` and the Docker image never load it.
 */
import type { Llama } from 'node-llama-cpp';

/** The node-llama-cpp module namespace. */
export type NodeLlamaCpp = typeof import('node-llama-cpp');

let shared: { promise: Promise<{ lib: NodeLlamaCpp; llama: Llama }>; refs: number } | null = null;

async function load(): Promise<{ lib: NodeLlamaCpp; llama: Llama }> {
  // The postinstall script of node-llama-cpp may not have run (npm 11 gates install scripts);
  // the prebuilt @node-llama-cpp/<platform> binary works without it. Never build or download.
  process.env['NODE_LLAMA_CPP_SKIP_DOWNLOAD'] ??= 'true';
  let lib: NodeLlamaCpp;
  try {
    lib = await import('node-llama-cpp');
  } catch (err) {
    throw new Error(
      'the llama.cpp engine needs the node-llama-cpp package (a dev dependency of logprobe): run npm ci',
      { cause: err },
    );
  }
  // getLlama tests the binary in a child forked with this process's execArgv; under `node -e` or
  // `node -p` that child would run the evaluated script instead (or refuse `--input-type`), and
  // the binary would be rejected.
  const execArgv = process.execArgv;
  process.execArgv = withoutEval(execArgv);
  try {
    const llama = await lib.getLlama({
      build: 'never',
      gpu: false,
      skipDownload: true,
      // 0 = no cap, so each context's `threads` is the exact thread count (a cap turns it into a hint).
      maxThreads: 0,
      logLevel: lib.LlamaLogLevel.error,
      progressLogs: false,
    });
    return { lib, llama };
  } finally {
    process.execArgv = execArgv;
  }
}

const EVAL_FLAGS = ['-e', '--eval', '-p', '--print', '--input-type'];

/** execArgv without `-e`/`--eval`/`-p`/`--print`/`--input-type` and their values. */
export function withoutEval(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (EVAL_FLAGS.includes(arg)) i++;
    else if (!EVAL_FLAGS.some((flag) => arg.startsWith(`${flag}=`))) out.push(arg);
  }
  return out;
}

/** A reference to the shared runtime; call `release` once when the model using it is closed. */
export interface RuntimeHandle {
  readonly lib: NodeLlamaCpp;
  readonly llama: Llama;
  release(): Promise<void>;
}

/** Acquires the shared llama.cpp runtime, loading it on first use (~0.4 s). */
export async function acquireRuntime(): Promise<RuntimeHandle> {
  if (shared === null) shared = { promise: load(), refs: 0 };
  const entry = shared;
  entry.refs++;
  let loaded: { lib: NodeLlamaCpp; llama: Llama };
  try {
    loaded = await entry.promise;
  } catch (err) {
    entry.refs--;
    if (shared === entry) shared = null;
    throw err;
  }
  let released = false;
  return {
    ...loaded,
    async release() {
      if (released) return;
      released = true;
      entry.refs--;
      // Disposing the runtime lets the process exit; a later model loads a fresh one.
      if (entry.refs === 0 && shared === entry) {
        shared = null;
        await loaded.llama.dispose();
      }
    },
  };
}

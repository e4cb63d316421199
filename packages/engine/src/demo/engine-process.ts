/**
 * A llama.cpp engine as a separate process, the way a user runs an engine next to the proxy:
 * spawned from this package's own executable (`logprobe-engine`, what `logprobe engine` runs),
 * ready when it prints its listening line, stopped with SIGTERM (SIGKILL when it hangs) and never
 * left behind when this process exits.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { EngineApi } from '../api/profile.js';

/** This package's executable (`bin/logprobe-engine.js` runs the built CLI in `dist/`). */
export const ENGINE_BIN = fileURLToPath(new URL('../../bin/logprobe-engine.js', import.meta.url));

/** The engine's one line on stdout once it listens (src/cli.ts). */
const LISTENING = /logprobe engine \(llama\) listening on (http:\/\/[^\s]+)\n/;

/** Options of {@link spawnLlamaEngine}. */
export interface LlamaEngineProcessOptions {
  /** Model seed; two engines with one seed run the same weights. */
  readonly seed: number;
  /** A llama engine fault (`zero-layer:1`, `kv:q4_0`, …), or null for a clean engine. */
  readonly fault?: string | null;
  /** CPU threads; 1 unless you have cores to spare (2 threads on 2 cores are ~20× slower). */
  readonly threads?: number;
  /** How long to wait for the listening line (model generation and library load included). */
  readonly timeoutMs?: number;
  /** Extra environment (e.g. `LOGPROBE_CACHE_DIR`). */
  readonly env?: Readonly<Record<string, string>>;
  /** `--api`: the engine it pretends to be (default `logprobe`). */
  readonly api?: EngineApi;
  /** `--prefix-cache on|off` (default: the API's). */
  readonly prefixCache?: boolean;
  /** `--chat-template NAME`: one of llama.cpp's built-in templates (`llama2`, `chatml`, …); default the plain one. */
  readonly chatTemplate?: string;
  /** Extra engine flags (`--dev-mode`, `--slot-save-path DIR`, …), as given. */
  readonly args?: readonly string[];
}

/** A running engine process. */
export interface LlamaEngineProcess {
  /** `http://127.0.0.1:PORT`. */
  readonly url: string;
  readonly pid: number;
  readonly fault: string | null;
  /** Stops the process (SIGTERM, then SIGKILL after 5 s); resolves with its exit code. */
  stop(): Promise<number | null>;
}

/** Why an engine could not start; `reason` is one short line for a notice. */
export class EngineStartError extends Error {
  override readonly name = 'EngineStartError';
  constructor(
    readonly reason: string,
    readonly output: string,
  ) {
    super(`llama.cpp engine did not start: ${reason}`);
  }
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Kills every engine still running when this process exits, however it exits. */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const child of live) child.kill('SIGKILL');
  });
}

/** The most telling line of a failed engine's output: the CLI's one-line error, or the error of a stack trace. */
export function failureReason(output: string): string {
  const lines = output
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
  const line =
    lines.find((l) => l.startsWith('logprobe:')) ??
    lines.find((l) => /^[A-Za-z]*Error\b|^Error:/.test(l)) ??
    lines.find((l) => /error|cannot|not available|unsupported/i.test(l)) ??
    lines.at(-1) ??
    'no output';
  const short = line.replace(/^logprobe: /, '');
  return short.length > 160 ? `${short.slice(0, 157)}…` : short;
}

/** The engine's command line: the bin, then `--llama` on any free port with the options' seed, threads, fault and API. */
function engineArgs(options: LlamaEngineProcessOptions): string[] {
  const fault = options.fault ?? null;
  const args = [
    ENGINE_BIN,
    '--llama',
    '--host',
    '127.0.0.1',
    '--port',
    '0',
    '--seed',
    String(options.seed),
    '--threads',
    String(options.threads ?? 1),
  ];
  if (fault !== null) args.push('--fault', fault);
  if (options.api !== undefined) args.push('--api', options.api);
  if (options.prefixCache !== undefined) args.push('--prefix-cache', options.prefixCache ? 'on' : 'off');
  if (options.chatTemplate !== undefined) args.push('--chat-template', options.chatTemplate);
  if (options.args) args.push(...options.args);
  return args;
}

/**
 * Starts `logprobe engine --llama --port 0 --seed S --threads T [--fault F]` and resolves once it
 * listens. Rejects with {@link EngineStartError} when it exits first or stays silent past the
 * timeout (the process is killed then).
 */
export function spawnLlamaEngine(options: LlamaEngineProcessOptions): Promise<LlamaEngineProcess> {
  const fault = options.fault ?? null;
  const args = engineArgs(options);
  installExitHook();
  const child = spawn(process.execPath, args, {
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  let output = '';
  let ready = false;
  const exited = new Promise<number | null>((resolve) => {
    child.on('close', (code, signal) => {
      live.delete(child);
      resolve(code ?? (signal ? null : 0));
    });
  });
  const stop = async (): Promise<number | null> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      timer.unref();
      const code = await exited;
      clearTimeout(timer);
      return code;
    }
    return exited;
  };
  return new Promise((resolve, reject) => {
    const fail = (reason: string): void => {
      if (ready) return;
      ready = true;
      clearTimeout(timer);
      void stop().then(() => reject(new EngineStartError(reason, output)));
    };
    const timer = setTimeout(
      () => fail(`no listening line within ${Math.round((options.timeoutMs ?? 60_000) / 1000)} s`),
      options.timeoutMs ?? 60_000,
    );
    child.on('error', (err) => fail(err.message));
    // Bounded: an engine that runs for hours may log a warning per request.
    const append = (c: Buffer): void => {
      output = (output + c.toString()).slice(-65_536);
    };
    child.stderr.on('data', append);
    child.stdout.on('data', (c: Buffer) => {
      append(c);
      const m = LISTENING.exec(output);
      if (m?.[1] && !ready) {
        ready = true;
        clearTimeout(timer);
        resolve({ url: m[1], pid: child.pid ?? -1, fault, stop });
      }
    });
    void exited.then((code) => fail(`${failureReason(output)} (exit ${code ?? 'by signal'})`));
  });
}

import { Command, CommanderError } from 'commander';
import type { EngineModel } from './model.js';
import { isServerFault, parseServerFaults, SERVER_FAULT_FORMS, type ServerFaults } from './faults.js';
import { ENGINE_APIS, type EngineApi } from './api/profile.js';
import { CHAT_TEMPLATE_NAMES, isChatTemplateName } from './chat-template.js';
import { LOGPROBS_MODES } from './route.js';
import { parseEngineVersion } from './api/version.js';
import { startEngineServer, type EngineLog, type EngineServerHandle } from './openai-server.js';
import { createSimModel, type SimAdapterOptions } from './sim/model.js';

/** A mistake in the engine's arguments: one line on stderr, exit code 2. */
export class EngineUsageError extends Error {
  override readonly name = 'EngineUsageError';
}
const UsageError = EngineUsageError;

/** Parses a number option, naming the flag when it is not a number or out of range. */
function parseNumberOption(
  flag: string,
  raw: string,
  opts: { min?: number; max?: number; integer?: boolean } = {},
): number {
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n)) throw new UsageError(`${flag}: expected a number, got '${raw}'`);
  if (opts.integer && !Number.isInteger(n)) throw new UsageError(`${flag}: expected a whole number, got '${raw}'`);
  if (opts.min !== undefined && n < opts.min) throw new UsageError(`${flag}: must be ≥ ${opts.min}, got ${raw}`);
  if (opts.max !== undefined && n > opts.max) throw new UsageError(`${flag}: must be ≤ ${opts.max}, got ${raw}`);
  return n;
}

interface EngineOptions {
  sim?: boolean;
  llama?: boolean;
  host: string;
  port: string;
  seed?: string;
  noise?: string;
  stateShift?: string;
  localShift?: string;
  localShiftRate?: string;
  decodeShift?: string;
  cacheHitShift?: string;
  specDecodeShift?: string;
  zeroDecodeLogprobs?: boolean;
  staleBuffer?: string;
  lora: string[];
  cacheSlots?: string;
  tokenizerSplit?: boolean;
  api: string;
  prefixCache?: string;
  devMode?: boolean;
  slotSavePath?: string;
  enablePromptTokensDetails?: boolean;
  engineVersion?: string;
  maxLogprobs?: string;
  v2ModelRunner?: boolean;
  batchNoise?: string;
  batchInvariant?: boolean;
  enableCacheReport?: boolean;
  enableDeterministicInference?: boolean;
  apiKey?: string;
  adminApiKey?: string;
  chatTemplate?: string;
  logprobsMode?: string;
  enableResponsesStore?: boolean;
  fault: string[];
  requestLog?: string;
  concurrency?: string;
  tokenDelay?: string;
  modelId?: string;
  threads?: string;
}

/** What `--llama` needs from the llama.cpp engine module (loaded only then: it pulls in node-llama-cpp). */
interface LlamaModule {
  createLlamaModel(options: {
    seed?: number;
    fault?: string | null;
    threads?: number;
    id?: string;
  }): Promise<EngineModel & { close(): Promise<void>; context?: { contextSize: number } }>;
}

// A variable, not a literal, so the sim path neither type-checks against nor loads the llama code.
const LLAMA_MODULE = './llama/model.js';

const HELP = `
Engines:
  --sim     the simulated model: deterministic toy logits, knobs for noise and injected bugs
  --llama   llama.cpp through node-llama-cpp on a generated tiny model (when installed)

Faults (--fault, repeatable or comma-separated), on the generation routes:
  ${SERVER_FAULT_FORMS.join(', ')}
  (with --llama, other values are the llama engine's own faults, e.g. kv:q8_0, decode-state:3,
  cache-hit:3)

APIs (--api): what the engine pretends to be — its /v1/models owned_by, server header, native
endpoints and shapes:
  logprobe  OpenAI's shapes only (the default)      openai    legacy echo + max_tokens 0, owned_by system
  vllm      /tokenize, /detokenize, /version, prompt_logprobs, return_tokens_as_token_ids,
            /reset_prefix_cache with --dev-mode (or VLLM_SERVER_DEV_MODE=1); --max-logprobs,
            --v2-model-runner (VLLM_USE_V2_MODEL_RUNNER=1), --batch-invariant (VLLM_BATCH_INVARIANT=1),
            /v1/responses (--enable-responses-store), --logprobs-mode, /server_info with --dev-mode
  sglang    /generate, /tokenize, /detokenize, /get_server_info, /get_model_info, /flush_cache;
            --enable-cache-report, --enable-deterministic-inference, --api-key, --admin-api-key
  --engine-version (vllm, sglang) picks the release whose behaviour the double plays.
  llamacpp  /completion, /tokenize, /detokenize, /apply-template, /props, llama-server's /v1 shapes,
            /slots/0?action=erase with --slot-save-path
The prefix cache (--prefix-cache on|off) is on by default for vllm, sglang and llamacpp, off for
logprobe and openai; while it is on, requests are served one at a time.

Prints one line "logprobe engine (sim) listening on http://HOST:PORT" once it listens, and runs
until SIGINT/SIGTERM.
`;

const collect = (value: string, previous: string[]): string[] => [...previous, value];

function knob(
  flag: string,
  raw: string | undefined,
  opts: { min?: number; max?: number; integer?: boolean } = { min: 0 },
): number | undefined {
  return raw === undefined ? undefined : parseNumberOption(flag, raw, opts);
}

function serverFaults(items: string[]): { server: ServerFaults; model: string[] } {
  const flat = items
    .flatMap((s) => s.split(','))
    .map((s) => s.trim())
    .filter((s) => s !== '');
  try {
    return { server: parseServerFaults(flat.filter(isServerFault)), model: flat.filter((s) => !isServerFault(s)) };
  } catch (err) {
    throw new UsageError(`--fault: ${(err as Error).message}`);
  }
}

async function llamaModel(
  opts: EngineOptions,
  modelFaults: string[],
): Promise<EngineModel & { close(): Promise<void>; context?: { contextSize: number } }> {
  let mod: LlamaModule;
  try {
    mod = (await import(LLAMA_MODULE)) as LlamaModule;
  } catch (err) {
    throw new UsageError(
      `--llama: the llama.cpp engine is not available (${(err as Error).message.split('\n', 1)[0]})`,
    );
  }
  if (typeof mod.createLlamaModel !== 'function')
    throw new UsageError('--llama: the llama.cpp engine module has no createLlamaModel');
  try {
    return await mod.createLlamaModel({
      seed: knob('--seed', opts.seed, { min: 0, max: 0xffffffff, integer: true }),
      fault: modelFaults.length > 0 ? modelFaults.join(',') : null,
      threads: knob('--threads', opts.threads, { min: 1, max: 256, integer: true }),
      ...(opts.modelId ? { id: opts.modelId } : {}),
    });
  } catch (err) {
    if (err instanceof UsageError) throw err;
    const name = (err as Error).name;
    if (name === 'InvalidFaultError' || err instanceof RangeError)
      throw new UsageError(`--llama: ${(err as Error).message}`);
    throw err;
  }
}

const ADAPTER_NUMBERS = new Set([
  'noise',
  'stateShift',
  'localShift',
  'localShiftRate',
  'decodeShift',
  'cacheHitShift',
  'batchNoise',
  'specDecodeShift',
  'staleBuffer',
  'scale',
  'key',
]);
const ADAPTER_FLAGS = new Set(['promptWithoutAdapter', 'zeroDecodeLogprobs']);

/**
 * One `--lora` value: `NAME[=PATH][,KNOB[=VALUE]…]`, knobs by their sim option names in camelCase
 * or kebab-case (`prompt-without-adapter`, `spec-decode-shift=0.5`).
 */
export function parseLoraSpec(spec: string): SimAdapterOptions {
  const [head = '', ...knobs] = spec.split(',').map((s) => s.trim());
  const eq = head.indexOf('=');
  const id = eq < 0 ? head : head.slice(0, eq);
  if (id === '') throw new UsageError(`--lora: expected NAME[=PATH][,KNOB=VALUE…], got '${spec}'`);
  const out: Record<string, unknown> = { id, ...(eq < 0 ? {} : { path: head.slice(eq + 1) }) };
  for (const item of knobs.filter((k) => k !== '')) {
    const at = item.indexOf('=');
    const name = (at < 0 ? item : item.slice(0, at)).replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    const value = at < 0 ? undefined : item.slice(at + 1);
    if (ADAPTER_FLAGS.has(name)) {
      if (value !== undefined && value !== 'true' && value !== 'false')
        throw new UsageError(`--lora ${id}: ${name} takes true or false, got '${value}'`);
      out[name] = value !== 'false';
    } else if (ADAPTER_NUMBERS.has(name)) {
      if (value === undefined) throw new UsageError(`--lora ${id}: ${name} needs a value (${name}=N)`);
      out[name] = parseNumberOption(`--lora ${id}: ${name}`, value, name === 'key' ? { integer: true } : { min: 0 });
    } else {
      throw new UsageError(
        `--lora ${id}: unknown knob '${name}': expected one of ${[...ADAPTER_FLAGS, ...ADAPTER_NUMBERS].join(', ')}`,
      );
    }
  }
  return out as unknown as SimAdapterOptions;
}

function simModel(opts: EngineOptions, modelFaults: string[]): EngineModel {
  const bad = modelFaults[0];
  if (bad !== undefined)
    throw new UsageError(`--fault: unknown fault "${bad}": expected one of ${SERVER_FAULT_FORMS.join(', ')}`);
  return simOrUsage(() =>
    createSimModel({
      seed: knob('--seed', opts.seed, { min: 0, max: 0xffffffff, integer: true }),
      noise: knob('--noise', opts.noise),
      stateShift: knob('--state-shift', opts.stateShift),
      localShift: knob('--local-shift', opts.localShift),
      localShiftRate: knob('--local-shift-rate', opts.localShiftRate, { min: 0, max: 1 }),
      decodeShift: knob('--decode-shift', opts.decodeShift),
      cacheHitShift: knob('--cache-hit-shift', opts.cacheHitShift),
      batchNoise: knob('--batch-noise', opts.batchNoise),
      specDecodeShift: knob('--spec-decode-shift', opts.specDecodeShift),
      zeroDecodeLogprobs: opts.zeroDecodeLogprobs ?? false,
      staleBuffer: knob('--stale-buffer', opts.staleBuffer),
      adapters: opts.lora.map(parseLoraSpec),
      tokenizerSplit: opts.tokenizerSplit ?? false,
      ...(opts.modelId ? { id: opts.modelId } : {}),
      ...(opts.cacheSlots !== undefined
        ? { cacheSlots: knob('--cache-slots', opts.cacheSlots, { min: 1, max: 4096, integer: true }) }
        : {}),
    }),
  );
}

/** A bad sim option (an adapter id served twice, …) is a usage error. */
function simOrUsage(build: () => EngineModel): EngineModel {
  try {
    return build();
  } catch (err) {
    if (err instanceof RangeError) throw new UsageError(`--sim: ${err.message}`);
    throw err;
  }
}

const stderrLog: EngineLog = {
  info() {},
  warn(obj, msg) {
    process.stderr.write(`logprobe engine: ${msg}\n`);
    void obj;
  },
  error(obj, msg) {
    const err = (obj as { err?: unknown }).err;
    process.stderr.write(`logprobe engine: ${msg}${err instanceof Error ? `: ${err.message}` : ''}\n`);
  },
};

function waitForSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (sig: NodeJS.Signals): void => {
      process.off('SIGINT', on);
      process.off('SIGTERM', on);
      resolve(sig);
    };
    process.on('SIGINT', on);
    process.on('SIGTERM', on);
  });
}

/** `logprobe engine --sim|--llama`: an OpenAI-compatible engine server for tests, benchmarks and the demo. */
function engineProgram(setExit: (code: number) => void): Command {
  const program = new Command('logprobe engine').description(
    'run an OpenAI-compatible engine (the simulated model, or llama.cpp) for tests, benchmarks and the demo',
  );
  return runOptions(apiOptions(modelOptions(program)))
    .addHelpText('after', HELP)
    .action(async (opts: EngineOptions) => runEngine(opts, setExit));
}

/** The engine, where it listens, and the simulated model's knobs. */
function modelOptions(c: Command): Command {
  return c
    .option('--sim', 'the simulated model')
    .option('--llama', 'llama.cpp on a generated tiny model')
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--port <n>', 'port to listen on (0: any free port)', '30000')
    .option('--seed <n>', 'model seed (same seed and prompt: same logits)')
    .option('--noise <nats>', 'sim: σ of run-to-run jitter added to every logit')
    .option('--state-shift <nats>', 'sim: persistent per-prompt perturbation at every step (a corrupted prefill state)')
    .option('--local-shift <nats>', 'sim: perturbation at some positions only')
    .option('--local-shift-rate <share>', 'sim: share of positions --local-shift hits (default 0.1)')
    .option(
      '--decode-shift <nats>',
      'sim: perturb every decode step and every reused prefix, not the prompt (stand-in for decode-state:I)',
    )
    .option('--cache-hit-shift <nats>', 'sim: perturb what a prefix-cache hit restores (stand-in for cache-hit:I)')
    .option(
      '--spec-decode-shift <nats>',
      'sim: perturb the logprobs decode steps report, not the greedy token (speculative decoding, vllm PR #38711)',
    )
    .option(
      '--zero-decode-logprobs',
      'sim: decode steps after the first report every logprob as 0.0 (llama.cpp#27972, speculative decoding)',
    )
    .option(
      '--stale-buffer <nats>',
      "sim: prompt logprobs carry the previous request's residue (vllm#42019, uninitialized buffer)",
    )
    .option(
      '--lora <spec>',
      'sim: serve a LoRA adapter beside the model: NAME[=PATH][,KNOB[=VALUE]…] (repeatable), knobs: ' +
        'prompt-without-adapter, spec-decode-shift=N, zero-decode-logprobs, stale-buffer=N, scale=N, noise=N, …',
      collect,
      [] as string[],
    )
    .option('--tokenizer-split', 'sim: same text, other tokens (single bytes)');
}

/** The engine API to pretend to be, and its own flags. */
function apiOptions(c: Command): Command {
  return c
    .option('--api <api>', `the engine to pretend to be: ${ENGINE_APIS.join(', ')}`, 'logprobe')
    .option(
      '--prefix-cache <on|off>',
      "keep the previous request's tokens and reuse their state (default: on for vllm, sglang, llamacpp)",
    )
    .option(
      '--cache-slots <n>',
      'sim: prefixes the cache keeps, least recently used evicted (default 1: the previous request only)',
    )
    .option('--dev-mode', 'vllm: serve POST /reset_prefix_cache (VLLM_SERVER_DEV_MODE=1 does the same)')
    .option('--slot-save-path <dir>', 'llamacpp: enable the /slots actions (erase drops the prefix cache)')
    .option('--enable-prompt-tokens-details', 'vllm: report usage.prompt_tokens_details.cached_tokens')
    .option(
      '--engine-version <x.y.z>',
      'vllm, sglang: the release to play (GET /version, /server_info); default vllm 0.11.0, sglang 0.5.0',
    )
    .option(
      '--max-logprobs <n>',
      'vllm: the most logprobs / top_logprobs / prompt_logprobs a request may ask (default 20; -1: the vocabulary)',
    )
    .option(
      '--v2-model-runner',
      'vllm: the V2 model runner: prompt logprobs of the prompt token only, no top-k (VLLM_USE_V2_MODEL_RUNNER=1 does the same)',
    )
    .option(
      '--batch-invariant',
      'vllm: batch-invariant kernels: --batch-noise off (VLLM_BATCH_INVARIANT=1 does the same)',
    )
    .option('--enable-cache-report', 'sglang: report usage.prompt_tokens_details.cached_tokens (when above 0)')
    .option('--enable-deterministic-inference', 'sglang: deterministic inference: --batch-noise off')
    .option('--api-key <key>', 'sglang: every route but /health and /metrics needs Authorization: Bearer KEY')
    .option('--admin-api-key <key>', 'sglang: /flush_cache needs this key (the --api-key is refused there)')
    .option(
      '--chat-template <name>',
      `llama.cpp's built-in chat template for chat requests (every API): ${CHAT_TEMPLATE_NAMES.join(', ')}`,
    )
    .option(
      '--logprobs-mode <mode>',
      `vllm: what sample logprobs report: ${LOGPROBS_MODES.join(', ')} (default raw_logprobs)`,
    )
    .option(
      '--enable-responses-store',
      'vllm: /v1/responses stores responses (store, previous_response_id); VLLM_ENABLE_RESPONSES_API_STORE=1 does the same',
    );
}

/** Batch noise, faults, the request log, pacing and the model's name and threads. */
function runOptions(c: Command): Command {
  return c
    .option(
      '--batch-noise <nats>',
      "sim: σ of jitter on a request's logits while 2 or more requests are in flight (batch variance)",
    )
    .option('--fault <fault>', 'inject a fault (repeatable; see below)', collect, [] as string[])
    .option('--request-log <file>', 'append one JSON line per request (method, path, headers, body)')
    .option('--concurrency <n>', 'generations at once, the rest queue (default: sim unlimited, llama 1)')
    .option('--token-delay <ms>', 'pause after every generated token (a real decode pace)')
    .option('--model-id <id>', 'model id reported by /v1/models and in responses')
    .option('--threads <n>', 'llama: CPU threads (default 1; on a 2-core machine 2 threads are ~20× slower)');
}

/** Runs the engine server until SIGINT/SIGTERM. */
async function runEngine(opts: EngineOptions, setExit: (code: number) => void): Promise<void> {
  const { port, concurrency, tokenDelayMs, faults, kind, api, maxLogprobs } = checkFlags(opts);
  const env = (name: string): boolean => api === 'vllm' && process.env[name] === '1';
  const model = opts.sim ? simModel(opts, faults.model) : await llamaModel(opts, faults.model);
  // llama.cpp's KV cache bounds prompt + completion.
  const maxContext = (model as { context?: { contextSize?: number } }).context?.contextSize;
  let handle: EngineServerHandle;
  try {
    handle = await startEngineServer({
      model,
      host: opts.host,
      port,
      faults: faults.server,
      concurrency: concurrency ?? (opts.sim ? 0 : 1),
      api,
      ...(opts.prefixCache !== undefined ? { prefixCache: opts.prefixCache === 'on' } : {}),
      devMode: (opts.devMode ?? false) || process.env['VLLM_SERVER_DEV_MODE'] === '1',
      ...(opts.slotSavePath !== undefined ? { slotSavePath: opts.slotSavePath } : {}),
      promptTokensDetails: opts.enablePromptTokensDetails ?? false,
      ...(opts.engineVersion !== undefined ? { engineVersion: opts.engineVersion } : {}),
      ...(maxLogprobs !== undefined ? { maxLogprobs } : {}),
      v2ModelRunner: (opts.v2ModelRunner ?? false) || env('VLLM_USE_V2_MODEL_RUNNER'),
      batchInvariant:
        (opts.batchInvariant ?? false) || env('VLLM_BATCH_INVARIANT') || (opts.enableDeterministicInference ?? false),
      enableCacheReport: opts.enableCacheReport ?? false,
      ...(opts.apiKey !== undefined ? { apiKey: opts.apiKey } : {}),
      ...(opts.adminApiKey !== undefined ? { adminApiKey: opts.adminApiKey } : {}),
      ...(opts.chatTemplate !== undefined ? { chatTemplate: opts.chatTemplate } : {}),
      ...(opts.logprobsMode !== undefined ? { logprobsMode: opts.logprobsMode } : {}),
      responsesStore: (opts.enableResponsesStore ?? false) || env('VLLM_ENABLE_RESPONSES_API_STORE'),
      ...(tokenDelayMs !== undefined ? { tokenDelayMs } : {}),
      ...(opts.requestLog ? { requestLog: opts.requestLog } : {}),
      ...(maxContext !== undefined ? { maxContext } : {}),
      log: stderrLog,
    });
  } catch (err) {
    await model.close?.();
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'EADDRINUSE') throw new UsageError(`--port: ${opts.host}:${port} is already in use`);
    if (e.code === 'EADDRNOTAVAIL' || e.code === 'ENOTFOUND')
      throw new UsageError(`--host: cannot listen on ${opts.host}`);
    if (e.syscall === 'open' && opts.requestLog)
      throw new UsageError(`--request-log: cannot open ${opts.requestLog} (${e.code ?? e.message})`);
    throw err;
  }
  process.stdout.write(`logprobe engine (${kind}) listening on ${handle.url}\n`);
  await waitForSignal();
  await handle.close();
  await model.close?.();
  setExit(0);
}

/** The flags checked against each other: a flag of another engine or API is a usage error. */
function checkFlags(opts: EngineOptions) {
  if (opts.sim === opts.llama)
    throw new UsageError(
      opts.sim ? 'choose one engine: --sim or --llama, not both' : 'choose an engine: --sim or --llama',
    );
  const port = parseNumberOption('--port', opts.port, { min: 0, max: 65535, integer: true });
  const concurrency = knob('--concurrency', opts.concurrency, { min: 0, integer: true });
  const tokenDelayMs = knob('--token-delay', opts.tokenDelay, { min: 0 });
  const faults = serverFaults(opts.fault);
  const kind = opts.sim ? 'sim' : 'llama';
  if (!(ENGINE_APIS as readonly string[]).includes(opts.api))
    throw new UsageError(`--api: expected one of ${ENGINE_APIS.join(', ')}, got '${opts.api}'`);
  const api = opts.api as EngineApi;
  if (opts.prefixCache !== undefined && opts.prefixCache !== 'on' && opts.prefixCache !== 'off') {
    throw new UsageError(`--prefix-cache: expected on or off, got '${opts.prefixCache}'`);
  }
  checkApiFlags(opts, api);
  const maxLogprobs = knob('--max-logprobs', opts.maxLogprobs, { min: -1, integer: true });
  if (!opts.sim) {
    for (const flag of [
      'noise',
      'stateShift',
      'localShift',
      'localShiftRate',
      'decodeShift',
      'cacheHitShift',
      'batchNoise',
      'tokenizerSplit',
      'specDecodeShift',
      'zeroDecodeLogprobs',
      'staleBuffer',
    ] as const) {
      if (opts[flag] !== undefined)
        throw new UsageError(`--${flag.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} applies to --sim only`);
    }
  }
  if (!opts.sim && opts.lora.length > 0) throw new UsageError('--lora applies to --sim only');
  if (opts.sim && opts.threads !== undefined) throw new UsageError('--threads applies to --llama only');
  return { port, concurrency, tokenDelayMs, faults, kind, api, maxLogprobs };
}

/** Each API's own flags with that API only. */
function checkApiFlags(opts: EngineOptions, api: EngineApi): void {
  if (opts.devMode && api !== 'vllm') throw new UsageError('--dev-mode applies to --api vllm only');
  if (opts.slotSavePath !== undefined && api !== 'llamacpp')
    throw new UsageError('--slot-save-path applies to --api llamacpp only');
  if (opts.enablePromptTokensDetails && api !== 'vllm')
    throw new UsageError('--enable-prompt-tokens-details applies to --api vllm only');
  for (const [flag, set] of [
    ['--max-logprobs', opts.maxLogprobs !== undefined],
    ['--v2-model-runner', opts.v2ModelRunner],
    ['--batch-invariant', opts.batchInvariant],
    ['--logprobs-mode', opts.logprobsMode !== undefined],
    ['--enable-responses-store', opts.enableResponsesStore],
  ] as const) {
    if (set && api !== 'vllm') throw new UsageError(`${flag} applies to --api vllm only`);
  }
  for (const [flag, set] of [
    ['--enable-cache-report', opts.enableCacheReport],
    ['--enable-deterministic-inference', opts.enableDeterministicInference],
    ['--api-key', opts.apiKey !== undefined],
    ['--admin-api-key', opts.adminApiKey !== undefined],
  ] as const) {
    if (set && api !== 'sglang') throw new UsageError(`${flag} applies to --api sglang only`);
  }
  if (opts.chatTemplate !== undefined && !isChatTemplateName(opts.chatTemplate))
    throw new UsageError(
      `--chat-template: expected one of ${CHAT_TEMPLATE_NAMES.join(', ')}, got '${opts.chatTemplate}'`,
    );
  if (opts.logprobsMode !== undefined && !(LOGPROBS_MODES as readonly string[]).includes(opts.logprobsMode))
    throw new UsageError(`--logprobs-mode: expected one of ${LOGPROBS_MODES.join(', ')}, got '${opts.logprobsMode}'`);
  if (opts.engineVersion !== undefined) {
    if (api !== 'vllm' && api !== 'sglang')
      throw new UsageError('--engine-version applies to --api vllm and sglang only');
    if (parseEngineVersion(opts.engineVersion) === null)
      throw new UsageError(`--engine-version: expected a release number such as 0.11.0, got '${opts.engineVersion}'`);
  }
}

/**
 * `logprobe engine --sim|--llama …` (argv without the command name): an OpenAI-compatible engine
 * server for tests, benchmarks and the demo. Runs until SIGINT/SIGTERM; resolves with the exit
 * code (2 for a usage error, printed as one line).
 */
export async function runEngineCli(argv: readonly string[]): Promise<number> {
  let exitCode = 0;
  const program = engineProgram((code) => (exitCode = code))
    .exitOverride()
    .showHelpAfterError('(run with --help for usage)')
    .configureOutput({ writeErr: (s) => process.stderr.write(s) });
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return exitCode;
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2;
    if (err instanceof EngineUsageError) {
      process.stderr.write(`logprobe: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
}

import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { LogprobeError, usageError } from '../errors/index.js';
import { numberArg } from './options.js';
import { stopOnSignal } from './signals.js';
import { stdoutGone, writeOut } from './stdout.js';
import { runDemo } from '../demo/run.js';
import { portFree } from '../demo/ports.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadEngines, type DemoFaultPlan, type EnginePackage } from './engines.js';

interface DemoCliOptions {
  fault: string;
  engine: string;
  duration?: number;
  rate: number;
  port: number;
  adminPort: number;
  seed: number;
  baseline?: string;
  captures: string;
}

/** The engines' fault lists, for the help text (listed only where the engines are installed). */
function help(engines: EnginePackage | null): string {
  const faults = engines
    ? `  llama.cpp: ${engines.FAULT_FORMS.join(', ')} (comma-separated to combine), none
  simulated: ${engines.SIM_DEMO_FAULTS.join(', ')}`
    : '  (the test engines are not installed here: logprobe demo runs from a clone of the repository)';
  return `
Engines (--engine):
  auto    two llama.cpp engines in separate processes (a tiny model generated on first use) when
          llama.cpp runs here; otherwise the simulated engines, with a one-line notice
  llama   llama.cpp engines or an error
  sim     the simulated engines (a seeded toy model, in this process)

Faults (--fault), on the candidate:
${faults}
  A llama.cpp fault runs on the simulated engines as its stand-in (flash-attention, weights:f16,
  batch:N → noise; zero-layer, drop-prompt-token, kv:q4_0 → state-shift; weight-noise, kv:q8_0 →
  subtle); state-shift, subtle, noise and none run on llama.cpp as zero-layer:1,
  weight-noise:0.01, flash-attention and none; local and tokenizer exist only on the simulated
  engines. The banner says what ran.
`;
}

/** The engines as the help text sees them: loaded by {@link prepareDemoHelp} for `logprobe demo` only. */
let installed: EnginePackage | null = null;

/** Loads the engines' fault lists for `demo --help` (main calls it when the command is demo, so no other command loads the engines). */
export async function prepareDemoHelp(): Promise<void> {
  installed = await loadEngines('logprobe demo').catch(() => null);
}

/** This run's capture folder, inside `root`: `run-YYYYMMDD-HHMMSS` (UTC), so runs never mix. */
export function captureFolder(root: string, at: number): string {
  const stamp = new Date(at).toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  return join(root, `run-${stamp}`);
}

/** A port the user left at its default moves to a free one when taken; one they chose does not. */
async function pickPort(
  cmd: Command,
  name: 'port' | 'adminPort',
  flag: string,
  port: number,
  notice: (line: string) => void,
): Promise<number> {
  if (port === 0 || cmd.getOptionValueSource(name) !== 'default' || (await portFree('127.0.0.1', port))) return port;
  notice(`port ${port} is in use: using a free one (choose with ${flag})`);
  return 0;
}

/** `logprobe demo`: the command, its flags and help, and the action that runs the demo. */
export const demoCommand: CommandFactory = (setExit) =>
  withDemoOptions(new Command('demo'))
    .addHelpText('after', () => help(installed))
    .action(async (opts: DemoCliOptions, cmd: Command) => demoAction(opts, cmd, setExit));

/** Declares the demo's description and flags on `cmd`. */
function withDemoOptions(cmd: Command): Command {
  return cmd
    .description(
      'the main job on an embedded default: two engines (the candidate with a fault), the proxy in front, live traffic, verdicts and alerts',
    )
    .option('--fault <fault>', 'candidate fault (see below)', 'zero-layer:1')
    .option('--engine <engine>', 'which engines: auto, llama, sim', 'auto')
    .option(
      '--duration <seconds>',
      'seconds of traffic, then exit 0 (default: until Ctrl-C)',
      numberArg('--duration', { min: 1 }),
    )
    .option('--rate <rps>', 'client requests per second', numberArg('--rate', { min: 0.1, max: 1000 }), 4)
    .option(
      '--port <n>',
      'proxy port (0: any free port)',
      numberArg('--port', { min: 0, max: 65535, integer: true }),
      8080,
    )
    .option(
      '--admin-port <n>',
      'admin port for /metrics (0: any free port)',
      numberArg('--admin-port', { min: 0, max: 65535, integer: true }),
      9464,
    )
    .option(
      '--seed <n>',
      'llama.cpp: seed of the generated model',
      numberArg('--seed', { min: 0, max: 0xffffffff, integer: true }),
      1,
    )
    .option(
      '--baseline <none>',
      "'none': no baseline, the candidate against itself (each request twice: cold, then warm; the default fault becomes cache-hit:3)",
    )
    .option('--captures <dir>', 'where the captures go (a folder per run inside it)', 'captures-demo');
}

/** Checks --baseline and --engine, and plans the candidate's fault (the default depends on --baseline). */
function planDemo(engines: EnginePackage, opts: DemoCliOptions, cmd: Command): DemoFaultPlan {
  const { DEMO_ENGINES, UnknownDemoFaultError, planFault } = engines;
  if (opts.baseline !== undefined && opts.baseline !== 'none')
    throw usageError(
      `--baseline: the demo runs its own baseline; only 'none' (no baseline) can be given, got '${opts.baseline}'`,
    );
  if (!(DEMO_ENGINES as readonly string[]).includes(opts.engine))
    throw usageError(`--engine: expected one of ${DEMO_ENGINES.join(', ')}, got '${opts.engine}'`);
  // One server alone can only disagree with itself on its cache path: without a baseline the
  // default fault is a wrong restore on a prefix-cache hit (a compute fault would agree with itself).
  const fault =
    opts.baseline === 'none' && cmd.getOptionValueSource('fault') === 'default' ? 'cache-hit:3' : opts.fault;
  try {
    return planFault(fault);
  } catch (err) {
    if (err instanceof UnknownDemoFaultError) throw usageError(`--fault: ${err.message}`);
    throw err;
  }
}

/** The demo's action: checks the flags, picks the ports and runs the demo until its duration or a signal. */
async function demoAction(opts: DemoCliOptions, cmd: Command, setExit: (code: number) => void): Promise<void> {
  const startedAt = Date.now();
  const engines = await loadEngines('logprobe demo');
  const { EngineStartError, chooseEngines, needsPrefixCache } = engines;
  const plan = planDemo(engines, opts, cmd);
  const choice = opts.engine;
  const { duration, rate, seed } = opts;
  // Piped into `head`: when the reader goes away, the demo (and its engines) stops quietly.
  const out = (line: string): void => void writeOut(`${line}\n`);
  const port = await pickPort(cmd, 'port', '--port', opts.port, out);
  const adminPort = await pickPort(cmd, 'adminPort', '--admin-port', opts.adminPort, out);
  const captureDir = captureFolder(opts.captures, startedAt);
  // The engines play llama-server: the proxy scores past a divergence through /completion and
  // empties the cache through the slot actions before a repeat's first (cold) run. The
  // simulated ones keep 16 prefixes, as a real server under traffic keeps many (llama.cpp: one).
  const slotSavePath = mkdtempSync(join(tmpdir(), 'logprobe-demo-slots-'));
  const stop = stopOnSignal();
  try {
    await runDemo({
      baselineFree: opts.baseline === 'none',
      repeats: needsPrefixCache(plan),
      captureDir,
      duration,
      rate,
      port,
      adminPort,
      startedAt,
      engines: (progress) =>
        chooseEngines({
          choice,
          plan,
          seed,
          notice: out,
          progress,
          engine: { api: 'llamacpp', slotSavePath, cacheSlots: 16 },
        }),
      signal: AbortSignal.any([stop.stopping, stdoutGone]),
      out,
    });
  } catch (err) {
    if (err instanceof EngineStartError)
      throw new LogprobeError(
        'LOGPROBE_ENGINES_UNAVAILABLE',
        `--engine ${choice}: llama.cpp engines unavailable (${err.reason})`,
        { cause: err },
      );
    throw err;
  } finally {
    stop.dispose();
    rmSync(slotSavePath, { recursive: true, force: true });
  }
  setExit(0);
}

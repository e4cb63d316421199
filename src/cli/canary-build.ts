import { writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { Command, Option } from 'commander';
import type { CommandFactory } from './commands.js';
import { noInput, unwritableFile, usageError } from '../errors/index.js';
import { backendUrlFlag, numberArg, trustedBackend } from './options.js';
import { startProgress } from './progress.js';
import { checkWritable } from './report-file.js';
import { writeOut } from './stdout.js';
import { isDecodeProbe } from '../canary/probes.js';
import { configFrom } from './thresholds.js';
import { resolveInputs } from '../capture/reader.js';
import { scoringOptions } from '../backend/client.js';
import {
  chooseProbes,
  FLIP_NOISE_GAP,
  measureGaps,
  probeLines,
  readCaptures,
  readPrompts,
  generatedInput,
  type BuildInput,
  type Chosen,
  type Measured,
} from '../canary/build.js';

interface BuildFlags {
  from?: string[];
  prompts?: string;
  generated?: boolean;
  backend?: string;
  out?: string;
  count: number;
  decode?: number;
  perRoute?: number;
  minGap: number;
  rank: 'cost' | 'gap';
  concurrency: number;
  config?: string;
}

const HELP = `
Chooses canary probes by worth. Each candidate prompt (--from: captures, or directories of them;
--prompts: prompt-set lines as replay and record read them, or plain text, one completions prompt
a line; --generated: the built-in probes, every printable one-character and every two-letter
lowercase prompt, 783 in all, for a server with neither) is sent once to the trusted --backend, greedy, two tokens with
canary.topLogprobs alternatives, and its first token's top-1/top-2 gap is measured: a small gap is
a border input, whose argmax any change of the logits moves or flips. Gaps below --min-gap
(default ${FLIP_NOISE_GAP} nats) flip on run-to-run noise alone and are skipped. The kept prompts are spread
round-robin over the (route, model) slices up to --count (at most --per-route a slice), each slice
by --rank: cost (the default) puts the most worth per token first — a probe fires when its token
moves by min(floor, gap), floor being analysis.noiseFloor, so the smallest min(floor, gap) × (its
prompt tokens + tokens generated) first; gap puts the smallest gap first whatever the prompt's length.

Two kinds of probe: --decode of them (default a quarter of --count, rounded up) are decode probes,
chosen by their second token's gap and generated canary.maxTokens long — a bug of the decode
steps leaves the first token, which the prefill computes, clean; the rest are first-token probes,
one token each ("max_tokens": 1 in their body), the cheapest evidence of everything else. The
decode probes sit evenly among the others, the first second in line.

--out is a probe file (JSONL: {"id", "route", "body", "gap", "model"?}), which is also a prompt set:
  logprobe record PROBES.jsonl --backend TRUSTED --out ref.jsonl   # the reference for --reference
  logprobe canary check --candidate NEW --reference ref.jsonl --probes PROBES.jsonl

Exit codes:
  0  probes written
  1  no probe could be kept (every prompt failed or sat below the flip-noise floor); said why
  2  usage error: a missing or bad flag, not exactly one of --from, --prompts and --generated, an unreadable input,
     an unwritable --out, no prompt in the inputs
`;

/** `logprobe canary build (--from CAPTURE… | --prompts FILE) --backend URL --out PROBES.jsonl`. */
export const canaryBuildCommand: CommandFactory = (setExit) =>
  new Command('build')
    .description('choose canary probes from captures or prompts: smallest first-token gaps on the trusted backend')
    .option('--from <captures...>', 'captures (.jsonl or .jsonl.gz) or directories of them')
    .option('--prompts <file>', 'a prompt set, or plain text with one prompt per line')
    .option('--generated', 'the generated set: the built-in probes, one-character and two-letter prompts (783)')
    .option('--backend <url>', 'the trusted build to measure on')
    .option('--out <file>', 'the probe file to write (JSONL)')
    .option('--count <n>', 'probes to keep', numberArg('--count', { min: 1, integer: true }), 32)
    .option(
      '--decode <n>',
      'decode probes among --count (default: a quarter, rounded up)',
      numberArg('--decode', { min: 0, integer: true }),
    )
    .option(
      '--per-route <n>',
      'probes per (route, model) slice at most',
      numberArg('--per-route', { min: 1, integer: true }),
    )
    .option(
      '--min-gap <nats>',
      'the flip-noise floor: smaller gaps are skipped',
      numberArg('--min-gap', { min: 0 }),
      FLIP_NOISE_GAP,
    )
    .addOption(
      new Option('--rank <order>', 'cost: most worth per token first; gap: smallest gap first')
        .choices(['cost', 'gap'])
        .default('cost'),
    )
    .option(
      '--concurrency <n>',
      'prompts in flight at once',
      numberArg('--concurrency', { min: 1, max: 256, integer: true }),
      4,
    )
    .option(
      '-c, --config <file>',
      'take baseline.apiKey, timeouts, canary.topLogprobs and mirror.seed from a YAML config',
    )
    .addHelpText('after', HELP)
    .action(async (flags: BuildFlags) => setExit(await build(flags)));

/** The candidates of exactly one source: captures, a prompt file or the generated set; and how to name it. */
async function readInput(flags: BuildFlags): Promise<{ input: BuildInput; where: string }> {
  const sources = [flags.from !== undefined, flags.prompts !== undefined, flags.generated === true];
  if (sources.filter(Boolean).length !== 1)
    throw usageError('give one of --from CAPTURE…, --prompts FILE and --generated');
  if (flags.from !== undefined)
    return { input: await readCaptures((await resolveInputs(flags.from)).files), where: flags.from.join(', ') };
  if (flags.generated) return { input: generatedInput(), where: 'the generated set' };
  return { input: await readPrompts(flags.prompts!), where: flags.prompts! };
}

/** The build: inputs read, gaps measured, probes chosen and written; the summary; the exit code. */
async function build(flags: BuildFlags): Promise<number> {
  const backend = backendUrlFlag('--backend', flags.backend);
  if (flags.out === undefined) throw usageError('--out FILE is required (the probe file to write)');
  if (flags.decode !== undefined && flags.decode > flags.count)
    throw usageError(`--decode ${flags.decode}: at most --count (${flags.count}) probes can be decode probes`);
  const out = resolve(flags.out);
  const config = configFrom(flags);
  const { input, where } = await readInput(flags);
  if (input.candidates.length === 0) throw noInput(`no prompt to measure in ${where}${firstSkip(input)}`);
  await checkWritable(out);
  const progress = startProgress({
    label: 'canary build',
    total: input.candidates.length,
    unit: 'items',
    lines: false,
  });
  let measured: Measured[];
  try {
    measured = await measureGaps(input.candidates, {
      backend: trustedBackend(backend, config),
      tlsInsecure: config.tlsInsecure,
      rewrite: { ...config.mirror, topLogprobs: config.canary.topLogprobs },
      scoring: { ...scoringOptions(config), when: 'never' },
      concurrency: flags.concurrency,
      onMeasured: (done) => progress.update(done),
    });
  } finally {
    progress.stop();
  }
  const floor = config.analysis.noiseFloor;
  const chosen = chooseProbes(measured, {
    count: flags.count,
    decode: flags.decode ?? Math.ceil(flags.count / 4),
    perSlice: flags.perRoute ?? null,
    minGap: flags.minGap,
    rank:
      flags.rank === 'gap' || typeof floor !== 'number'
        ? { by: 'gap' }
        : { by: 'cost', floor, maxTokens: config.canary.maxTokens },
  });
  if (chosen.probes.length > 0) {
    try {
      await writeFile(out, probeLines(chosen.probes), { mode: 0o600 });
    } catch (err) {
      throw unwritableFile(out, err);
    }
  }
  void writeOut(`${buildSummary(input, measured, chosen, { where, backend, out, minGap: flags.minGap }).join('\n')}\n`);
  return chosen.probes.length > 0 ? 0 : 1;
}

function firstSkip(input: BuildInput): string {
  const first = Object.values(input.firstSkip)[0];
  return first ? ` (first skipped: ${first})` : '';
}

const counts = (r: Record<string, number>): string =>
  Object.entries(r)
    .map(([k, n]) => `${n} ${k}`)
    .join(', ');

/** What the build did, in three lines: read, measured, kept (each with what it skipped and why). */
function buildSummary(
  input: BuildInput,
  measured: readonly Measured[],
  chosen: Chosen,
  o: { where: string; backend: string; out: string; minGap: number },
): string[] {
  const ok = measured.filter((m) => 'gap' in m).length;
  const readSkips = counts(input.skipped);
  const chooseSkips = counts(chosen.skipped);
  return [
    `read ${input.lines} lines from ${o.where}: ${input.candidates.length} distinct prompts${readSkips ? `; skipped ${readSkips}` : ''}`,
    `measured ${ok} of ${measured.length} on ${o.backend} (top-1/top-2 gaps of the first two tokens; flip-noise floor ${o.minGap} nats)${chosen.firstError ? `; first failure: ${chosen.firstError}` : ''}`,
    chosen.probes.length > 0
      ? `kept ${chosen.probes.length} probes (${chosen.probes.filter(isDecodeProbe).length} decode) over ${chosen.slices} (route, model) slices to ${o.out}, gaps ${gapRange(chosen)} nats${chooseSkips ? `; skipped ${chooseSkips}` : ''}`
      : `kept no probe: nothing written to ${o.out}${chooseSkips ? `; skipped ${chooseSkips}` : ''}`,
  ];
}

function gapRange(chosen: Chosen): string {
  const gaps = chosen.probes.map((p) => p.gap ?? 0);
  return `${Math.min(...gaps).toPrecision(3)} to ${Math.max(...gaps).toPrecision(3)}`;
}

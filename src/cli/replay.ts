import { resolve } from 'node:path';
import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { LogprobeError, noInput } from '../errors/index.js';
import { backendUrlFlag, numberArg } from './options.js';
import { isNone } from '../config/values.js';
import { startProgress } from './progress.js';
import { checkWritable, writeHtmlReport } from './report-file.js';
import { writeOut } from './stdout.js';
import { gateOptions, ReplayGates, type GateFlags } from './replay-gates.js';
import {
  configFrom,
  DEFAULT_FAIL_ON,
  describeThresholds,
  parseFailOn,
  resolveThresholds,
  thresholdOptions,
  type ThresholdFlags,
} from './thresholds.js';
import { readJsonLines, resolveInputs } from '../capture/reader.js';
import { decideGate } from '../replay/gate.js';
import { renderModelTable } from '../replay/models.js';
import { openReplayCapture } from '../replay/output.js';
import { runReplay } from '../replay/run.js';
import { runGoldenReplay } from '../replay/golden-run.js';
import { scoringOptions } from '../backend/client.js';
import type { UpstreamOptions } from '../backend/pool.js';
import { renderSummaryText } from '../report/text.js';
import { configuredKeys } from '../log/redact.js';
import type { CaptureWriter } from '../capture/writer.js';
import type { Summary } from '../report/summary.js';

interface ReplayFlags extends ThresholdFlags, GateFlags {
  candidate?: string;
  baseline?: string;
  concurrency: number;
  rps?: number;
  out?: string;
  failOn: string;
  maxTokens?: number;
  html?: string;
}

const HELP = `
INPUT is a capture (JSONL, plain or gzip: each record's mirrored request is sent again) or a
prompt set: one JSON object per line, {"route": "/v1/chat/completions", "body": {...}} or
{"route": "/v1/completions", "prompt": "...", ...other body fields}. Every request goes through
the mirror's rewrite (greedy, logprobs, mirror.* from --config) and is sent to both backends;
each pair is compared, written to a new capture (--out, default replay-<time>.jsonl) and summed up.

With --baseline-from GOLDEN (a golden file from 'logprobe record') there is no live baseline:
each input's golden record (found by its prompt) is sent to the candidate as recorded, the
answers are compared as a live pair, and the candidate scores the golden tokens where the
golden record carries its backend's scoring. An input missing from GOLDEN is an error (exit 2,
before anything is sent).

Gates (--gate, repeatable or comma-separated; each decided per prompt, composable with --fail-on):
  logits[:T]   largest |logprob difference| over each side's top-10 on every scored position
               <= T nats (default 0.01; needs mirror.topLogprobs >= 10)
  tokens[:N]   greedy token ids identical for the first N tokens (default 128; implies
               --max-tokens N on a live replay; said when generations are shorter)
  kl[:T]       each prompt's mean per-position KL estimate <= T nats (default 0.05)
  definition   no definition warning (renormalised subset, single survivor, temperature, probabilities)
Every run reports the health figures: KL mean (< 0.05), relative error of the chosen
token |p_c - p_b| / p_b mean (< 0.03) and max (< 0.15). --junit FILE writes one test case per
prompt and gate; --json prints the summary as one object (docs/format.md).

Exit codes (the CI gate):
  0  no verdict named by --fail-on occurred and every --gate passed
  1  at least one did (default: ${DEFAULT_FAIL_ON}) or a gate failed, or no pair could be compared at all
  2  usage error: a missing or bad flag, an unreadable INPUT, an unwritable --out, nothing to replay,
     a prompt missing from --baseline-from, a gate the run cannot measure (logits with top-k < 10)
`;

/** `logprobe replay INPUT… --candidate URL --baseline URL`: the CI gate. */
export const replayCommand: CommandFactory = (setExit) =>
  gateOptions(
    thresholdOptions(
      new Command('replay')
        .description(
          're-send captured requests or a prompt set to two backends, compare, report; exit 1 on a shift (the CI gate)',
        )
        .argument('<inputs...>', 'captures or prompt sets (.jsonl or .jsonl.gz), or directories of captures')
        .option('--candidate <url>', 'the build under test')
        .option(
          '--baseline <url>',
          'the trusted build, or none: repeat each request on the candidate (cold, then warm) and compare it with itself',
        )
        .option(
          '--concurrency <n>',
          'pairs in flight at once',
          numberArg('--concurrency', { min: 1, max: 1024, integer: true }),
          4,
        )
        .option('--rps <r>', 'pairs started per second at most (default: no limit)', numberArg('--rps', { min: 0.001 }))
        .option('--out <file>', 'the new capture (default replay-<time>.jsonl in the current directory)')
        .option(
          '--fail-on <list>',
          'verdicts (or outcomes, error, alert) that fail the gate; none for never',
          DEFAULT_FAIL_ON,
        )
        .option(
          '--max-tokens <n>',
          "tokens to generate per request (default: the input's, capped by mirror.maxTokens)",
          numberArg('--max-tokens', { min: 1, integer: true }),
        )
        .option('--html <file>', 'also write the HTML report'),
    ),
  )
    .addHelpText('after', HELP)
    .action(async (args: string[], flags: ReplayFlags) => setExit(await replay(args, flags)));

/** What a replay runs with, from its flags and config, checked before anything is sent. */
interface ReplaySettings {
  inputs: string[];
  candidateUrl: string;
  /** null: baseline-free (`--baseline none`) or against a golden file. */
  baselineUrl: string | null;
  concurrency: number;
  rps: number | null;
  maxTokens: number | undefined;
  failOn: ReturnType<typeof parseFailOn>;
  config: ReturnType<typeof configFrom>;
  thresholds: ReturnType<typeof resolveThresholds>;
  gates: ReplayGates;
  out: string;
}

/** The replay: settings, the new capture, every input sent and compared, the report; the exit code. */
async function replay(args: string[], flags: ReplayFlags): Promise<number> {
  const s = await replaySettings(args, flags);
  // Said once per reason (a failed write and the close after it are one failure to the user).
  const lost = new Set<string>();
  const writer = await openReplayCapture({
    file: s.out,
    thresholds: s.thresholds,
    secrets: configuredKeys(s.config),
    redactFields: s.config.log.redact,
    onError: (reason) => {
      if (!lost.has(reason))
        process.stderr.write(`logprobe: writing ${s.out} failed (${reason}); pairs are missing from it\n`);
      lost.add(reason);
    },
  });
  const summary = s.gates.summary({ alert: s.config.alert });
  await sendAll(s, writer, summary);
  if (summary.total === 0) throw noInput(`nothing to replay in ${s.inputs.join(', ')}`);
  // The capture is the gate's record: one that lost pairs does not let a gate pass or fail on what is missing.
  if (writer.stats.dropped > 0)
    throw new LogprobeError(
      'LOGPROBE_UNWRITABLE_FILE',
      `${s.out}: ${writer.stats.dropped} of ${summary.total} pairs could not be written (${[...lost].join(', ')}): the capture is incomplete, no gate decided`,
    );
  return reportReplay(s, flags, summary);
}

async function replaySettings(args: string[], flags: ReplayFlags): Promise<ReplaySettings> {
  const candidateUrl = backendUrlFlag('--candidate', flags.candidate);
  // `--baseline none`: baseline-free, each input probes the candidate against itself (cold → warm).
  const baselineUrl =
    flags.baselineFrom !== undefined && flags.baseline === undefined
      ? null
      : flags.baseline !== undefined && isNone(flags.baseline)
        ? null
        : backendUrlFlag('--baseline', flags.baseline);
  const { concurrency, maxTokens } = flags;
  const rps = flags.rps ?? null;
  const failOn = parseFailOn(flags.failOn);
  const config = configFrom(flags);
  const thresholds = resolveThresholds(flags, config);
  const { files: inputs } = await resolveInputs(args);
  if (flags.html) await checkWritable(flags.html);
  const gates = await ReplayGates.setup(flags, {
    config,
    inputs,
    maxTokens,
    baselineGiven: flags.baseline !== undefined,
    failOn,
  });
  for (const n of gates.notes) process.stderr.write(`logprobe: ${n}\n`);
  const out = resolve(flags.out ?? `replay-${new Date().toISOString().replace(/:/g, '')}.jsonl`);
  return { inputs, candidateUrl, baselineUrl, concurrency, rps, maxTokens, failOn, config, thresholds, gates, out };
}

/** Every input through `runReplay` (or `runGoldenReplay` against a golden file), a progress bar on a terminal; the capture closed. */
async function sendAll(s: ReplaySettings, writer: CaptureWriter, summary: Summary): Promise<void> {
  const { config } = s;
  const total = process.stderr.isTTY ? await countLines(s.inputs) : 0;
  const progress = startProgress({ label: 'replay', total, unit: 'items', lines: false });
  const upstream = (u: string, base: Omit<UpstreamOptions, 'url'>) => ({
    url: u,
    timeoutMs: base.timeoutMs,
    connectTimeoutMs: base.connectTimeoutMs,
    idleTimeoutMs: base.idleTimeoutMs,
  });
  // What both runs take alike: the inputs, the pacing, the thresholds, where results go.
  const common = {
    inputs: s.inputs,
    tlsInsecure: config.tlsInsecure,
    concurrency: s.concurrency,
    rps: s.rps,
    thresholds: s.thresholds,
    scoring: scoringOptions(config),
    writer,
    summary,
    onSkip: (m: string) => process.stderr.write(`${m}\n`),
    onPair: (done: number) => progress.update(done, { detail: `${summary.count(s.failOn)} failing` }),
  };
  try {
    if (s.gates.golden) {
      await runGoldenReplay({
        ...common,
        candidate: upstream(s.candidateUrl, config.candidate),
        golden: s.gates.golden,
        maxTokens: s.maxTokens,
        onAnalysed: s.gates.onAnalysed,
      });
    } else
      await runReplay({
        ...common,
        candidate: { ...upstream(s.candidateUrl, config.candidate), model: config.candidate.model },
        baseline:
          s.baselineUrl === null
            ? null
            : {
                ...upstream(s.baselineUrl, config.baseline),
                apiKey: config.baseline.apiKey,
                model: config.baseline.model,
              },
        rewrite: config.mirror,
        maxTokens: s.gates.maxTokens,
      });
  } finally {
    progress.stop();
    await writer.close();
  }
}

/** The report (text, --html, --junit, --json) and the gate's line; the exit code the gate decides. */
async function reportReplay(s: ReplaySettings, flags: ReplayFlags, summary: Summary): Promise<number> {
  const { thresholds, gates } = s;
  const data = summary.data();
  const { results, report, models } = gates.outcome();
  const ctx = {
    thresholds: describeThresholds(thresholds),
    gapAmbiguous: thresholds.gapAmbiguous,
    gapSystematic: thresholds.gapSystematic,
    health: report,
  };
  // --json: the summary alone on stdout (docs/format.md, "replay --json"); the lines below go to stderr.
  const say = (line: string) => (flags.json ? process.stderr.write(line) : writeOut(line));
  if (!flags.json) void writeOut(renderSummaryText(data, ctx));
  // More than one model: the gate of each (one model's is the run's).
  if (!flags.json && models.length > 1) void writeOut(`${renderModelTable(models)}\n`);
  void say(`capture: ${s.out}\n`);
  const against = gates.golden ? `golden ${flags.baselineFrom}` : (s.baselineUrl ?? 'itself');
  if (flags.html) {
    await writeHtmlReport(flags.html, data, {
      title: `logprobe replay: ${s.candidateUrl} vs ${against}`,
      inputs: s.inputs,
      ...ctx,
    });
    void say(`report: ${flags.html}\n`);
  }
  if (flags.junit) {
    await gates.writeJunit(flags.junit, results, data, { alertsFired: summary.alertsFired, models });
    void say(`junit: ${flags.junit}\n`);
  }
  const gate = decideGate(summary, data, s.failOn, results, models);
  if (flags.json) {
    const json = {
      pairs: data.pairs,
      compared: data.compared,
      verdicts: data.verdicts,
      uncompared: data.uncompared,
      candidate: s.candidateUrl,
      baseline: gates.golden ? null : s.baselineUrl,
      baselineFrom: flags.baselineFrom ?? null,
      health: report.health,
      definition: report.definition,
      gates: results,
      failOn: [...s.failOn],
      passed: gate.passed,
      line: gate.line,
      byModel: Object.fromEntries(models.map(({ model, ...m }) => [model, m])),
      failedModels: models.filter((m) => !m.passed).map((m) => m.model),
      capture: s.out,
      report: flags.html ?? null,
      junit: flags.junit ?? null,
    };
    void writeOut(`${JSON.stringify(json)}\n`);
  }
  void say(`${gate.line}\n`);
  return gate.passed ? 0 : 1;
}

/** Input lines, for the progress bar's total (terminals only: it reads the inputs twice). */
async function countLines(files: readonly string[]): Promise<number> {
  let n = 0;
  for (const f of files) for await (const _ of readJsonLines(f)) n++;
  return n;
}

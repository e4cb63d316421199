import { resolve } from 'node:path';
import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { LogprobeError, noInput, usageError } from '../errors.js';
import { parseNumberOption } from './options.js';
import { startProgress } from './progress.js';
import { checkWritable, writeHtmlReport } from './report-file.js';
import { writeOut } from './stdout.js';
import { configFrom, DEFAULT_FAIL_ON, describeThresholds, parseFailOn, resolveThresholds, thresholdOptions, type ThresholdFlags } from './thresholds.js';
import { readJsonLines, resolveInputs } from '../capture/reader.js';
import { decideGate } from '../replay/gate.js';
import { openReplayCapture } from '../replay/output.js';
import { runReplay } from '../replay/run.js';
import { scoringOptions } from '../scoring/score.js';
import type { UpstreamOptions } from '../upstream/pool.js';
import { Summary } from '../report/summary.js';
import { renderSummaryText } from '../report/text.js';

interface ReplayFlags extends ThresholdFlags {
  candidate?: string;
  baseline?: string;
  concurrency: string;
  rps?: string;
  out?: string;
  failOn: string;
  maxTokens?: string;
  html?: string;
}

const HELP = `
INPUT is a capture (JSONL, plain or gzip: each record's mirrored request is sent again) or a
prompt set: one JSON object per line, {"route": "/v1/chat/completions", "body": {...}} or
{"route": "/v1/completions", "prompt": "...", ...other body fields}. Every request goes through
the mirror's rewrite (greedy, logprobs, mirror.* from --config) and is sent to both backends;
each pair is compared, written to a new capture (--out, default replay-<time>.jsonl) and summed up.

Exit codes (the CI gate):
  0  no verdict named by --fail-on occurred
  1  at least one did (default: ${DEFAULT_FAIL_ON}), or no pair could be compared at all
  2  usage error: a missing or bad flag, an unreadable INPUT, an unwritable --out, nothing to replay
`;

function url(flag: string, raw: string | undefined): string {
  if (raw === undefined) throw usageError(`${flag} URL is required`);
  try {
    const u = new URL(raw);
    if (u.protocol === 'http:' || u.protocol === 'https:') return raw;
  } catch {
    // reported below
  }
  throw usageError(`${flag}: expected an http(s) URL, got '${raw}'`);
}

/** `logprobe replay INPUT… --candidate URL --baseline URL`: the CI gate. */
export const replayCommand: CommandFactory = (setExit) =>
  thresholdOptions(
    new Command('replay')
      .description('re-send captured requests or a prompt set to two backends, compare, report; exit 1 on a shift (the CI gate)')
      .argument('<inputs...>', 'captures or prompt sets (.jsonl or .jsonl.gz), or directories of captures')
      .option('--candidate <url>', 'the build under test')
      .option('--baseline <url>', 'the trusted build, or none: repeat each request on the candidate (cold, then warm) and compare it with itself')
      .option('--concurrency <n>', 'pairs in flight at once', '4')
      .option('--rps <r>', 'pairs started per second at most (default: no limit)')
      .option('--out <file>', 'the new capture (default replay-<time>.jsonl in the current directory)')
      .option('--fail-on <list>', 'verdicts (or outcomes, error, alert) that fail the gate; none for never', DEFAULT_FAIL_ON)
      .option('--max-tokens <n>', 'tokens to generate per request (default: the input\'s, capped by mirror.maxTokens)')
      .option('--html <file>', 'also write the HTML report'),
  )
    .addHelpText('after', HELP)
    .action(async (args: string[], flags: ReplayFlags) => {
      const candidateUrl = url('--candidate', flags.candidate);
      // `--baseline none`: baseline-free, each input probes the candidate against itself (cold → warm).
      const baselineUrl = flags.baseline !== undefined && /^(none|null)$/i.test(flags.baseline) ? null : url('--baseline', flags.baseline);
      const concurrency = parseNumberOption('--concurrency', flags.concurrency, { min: 1, max: 1024, integer: true });
      const rps = flags.rps === undefined ? null : parseNumberOption('--rps', flags.rps, { min: 0.001 });
      const maxTokens = flags.maxTokens === undefined ? undefined : parseNumberOption('--max-tokens', flags.maxTokens, { min: 1, integer: true });
      const failOn = parseFailOn(flags.failOn);
      const config = configFrom(flags);
      const thresholds = resolveThresholds(flags, config);
      const { files: inputs } = await resolveInputs(args);
      if (flags.html) await checkWritable(flags.html);
      const out = resolve(flags.out ?? `replay-${new Date().toISOString().replace(/:/g, '')}.jsonl`);
      // Said once per reason (a failed write and the close after it are one failure to the user).
      const lost = new Set<string>();
      const writer = await openReplayCapture({
        file: out,
        thresholds,
        secrets: [config.baseline.apiKey],
        onError: (reason) => {
          if (!lost.has(reason)) process.stderr.write(`logprobe: writing ${out} failed (${reason}); pairs are missing from it\n`);
          lost.add(reason);
        },
      });

      const total = process.stderr.isTTY ? await countLines(inputs) : 0;
      const progress = startProgress({ label: 'replay', total, unit: 'items', lines: false });
      const summary = new Summary({ alert: config.alert });
      const upstream = (u: string, base: Omit<UpstreamOptions, 'url'>) => ({ url: u, timeoutMs: base.timeoutMs, connectTimeoutMs: base.connectTimeoutMs, idleTimeoutMs: base.idleTimeoutMs });
      try {
        await runReplay({
          inputs,
          candidate: upstream(candidateUrl, config.candidate),
          baseline: baselineUrl === null ? null : { ...upstream(baselineUrl, config.baseline), apiKey: config.baseline.apiKey },
          tlsInsecure: config.tlsInsecure,
          rewrite: config.mirror,
          maxTokens,
          concurrency,
          rps,
          thresholds,
          scoring: scoringOptions(config),
          writer,
          summary,
          onSkip: (m) => process.stderr.write(`${m}\n`),
          onPair: (done) => progress.update(done, { detail: `${summary.count(failOn)} failing` }),
        });
      } finally {
        progress.stop();
        await writer.close();
      }
      if (summary.total === 0) throw noInput(`nothing to replay in ${inputs.join(', ')}`);
      // The capture is the gate's record: one that lost pairs does not let a gate pass or fail on what is missing.
      if (writer.stats.dropped > 0) throw new LogprobeError('LOGPROBE_UNWRITABLE_FILE', `${out}: ${writer.stats.dropped} of ${summary.total} pairs could not be written (${[...lost].join(', ')}): the capture is incomplete, no gate decided`);

      const data = summary.data();
      const ctx = { thresholds: describeThresholds(thresholds), gapAmbiguous: thresholds.gapAmbiguous, gapSystematic: thresholds.gapSystematic };
      void writeOut(renderSummaryText(data, ctx));
      void writeOut(`capture: ${out}\n`);
      if (flags.html) {
        await writeHtmlReport(flags.html, data, { title: `logprobe replay: ${candidateUrl} vs ${baselineUrl}`, inputs, ...ctx });
        void writeOut(`report: ${flags.html}\n`);
      }
      const gate = decideGate(summary, data, failOn);
      void writeOut(`${gate.line}\n`);
      setExit(gate.passed ? 0 : 1);
    });

/** Input lines, for the progress bar's total (terminals only: it reads the inputs twice). */
async function countLines(files: readonly string[]): Promise<number> {
  let n = 0;
  for (const f of files) for await (const _ of readJsonLines(f)) n++;
  return n;
}

import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { noInput } from '../errors/index.js';
import { numberArg } from './options.js';
import { startProgress } from './progress.js';
import {
  configFrom,
  describeThresholds,
  parseFailOn,
  thresholdOptions,
  thresholdOverrides,
  thresholdsNote,
  type ThresholdFlags,
} from './thresholds.js';
import { DEFAULT_THRESHOLDS, HealthAccumulator, type Thresholds } from '../core/index.js';
import { comparePairs, isTokenFile, readSequenceFile, renderTraining, trainerFirst } from './compare-training.js';
import { resolveInputs } from '../capture/reader.js';
import { analyzeFiles, type AnalysedRecord } from '../report/analyze.js';
import { Summary } from '../report/summary.js';
import { renderSummaryText } from '../report/text.js';
import type { PathPair } from '../core/path.js';
import { checkWritable, writeHtmlReport } from './report-file.js';
import { stdoutGone, writeOut } from './stdout.js';

interface AnalyzeFlags extends ThresholdFlags {
  json?: boolean;
  html?: string;
  failOn?: string;
  top: number;
}

const HELP = `
FILES are capture files (JSONL, plain or gzip, as 'serve' writes them or 'replay --out'), or
directories holding them — or two token-logprob files (docs/training.md: a trainer's per-token
logprobs, one sequence per line) or one against an engine's responses: then the sequences are
lined up and compared position by position, with the health figures (KL, relative error of the
chosen token, top-10 logprob difference) and the importance ratio exp(lp_train − lp_infer), as
'compare' does for one sequence.
Each record is re-compared from its captured bodies. Thresholds: each record's own (those in
force online, so that the verdicts are reproduced exactly), unless --config or a flag sets them
for every record.

Output: the verdict mix, the position-shift distribution, flips by class, what the in-process
detectors would have raised, and the worst pairs with their explanation. --json prints one
object per pair (docs/format.md's fields plus file, line, id, route, ts, outcome, noiseFloor,
onlineVerdict) and nothing else on stdout. A malformed or truncated line is reported on stderr
as FILE:LINE: reason and skipped.

Exit codes: 0; 1 when --fail-on names a verdict (or outcome, or 'alert') that occurred;
2 on usage errors, an unreadable file, or no capture record at all.
`;

/** `logprobe analyze FILES…`: re-analyses captured pairs offline. */
export const analyzeCommand: CommandFactory = (setExit) =>
  thresholdOptions(
    new Command('analyze')
      .description(
        're-analyse captured pairs offline: verdict mix, shift distribution, flips, worst pairs; --html report',
      )
      .argument('<files...>', 'capture files (.jsonl or .jsonl.gz), or directories of them')
      .option('--json', 'one JSON object per pair on stdout (docs/format.md fields)')
      .option('--html <file>', 'write a self-contained HTML report')
      .option(
        '--fail-on <list>',
        'exit 1 when any of these verdicts/outcomes occurs (comma-separated; also error, alert)',
      )
      .option('--top <n>', 'worst pairs listed', numberArg('--top', { min: 0, integer: true }), 10),
  )
    .addHelpText('after', HELP)
    .action(async (inputs: string[], flags: AnalyzeFlags) => setExit(await analyze(inputs, flags)));

/** What both kinds of input are analysed with, from the flags and config. */
interface AnalyzeSettings {
  files: string[];
  totalBytes: number;
  top: number;
  failOn: Set<string>;
  config: ReturnType<typeof configFrom>;
  overrides: ReturnType<typeof thresholdOverrides>;
  json: boolean;
  summary: Summary;
}

/** `analyze`: captures, or two token-logprob files (the training comparison); the exit code. */
async function analyze(inputs: string[], flags: AnalyzeFlags): Promise<number> {
  const top = flags.top;
  const failOn = flags.failOn === undefined ? new Set<string>() : parseFailOn(flags.failOn);
  const config = configFrom(flags);
  const overrides = thresholdOverrides(flags, config);
  const { files, bytes: totalBytes } = await resolveInputs(inputs);
  if (flags.html) await checkWritable(flags.html);
  const s: AnalyzeSettings = {
    files,
    totalBytes,
    top,
    failOn,
    config,
    overrides,
    json: flags.json === true,
    summary: new Summary({ alert: config.alert, permutation: config.alert.permutation }),
  };
  // Two token-logprob files, or one against engine responses: the training comparison (docs/training.md).
  if (files.length === 2 && ((await isTokenFile(files[0]!)) || (await isTokenFile(files[1]!))))
    return analyzeTraining(s, flags);
  return analyzeCaptures(s, flags);
}

/** Two token-logprob files (or one against an engine's responses) lined up and compared: the training report. */
async function analyzeTraining(s: AnalyzeSettings, flags: AnalyzeFlags): Promise<number> {
  const { files, summary, json } = s;
  const t: Thresholds = { ...DEFAULT_THRESHOLDS, ...s.overrides };
  const sides = trainerFirst(await readSequenceFile(files[0]!), await readSequenceFile(files[1]!));
  const pairs = comparePairs(sides.train, sides.infer, t);
  const where = { train: sides.train.file, infer: sides.infer.file };
  for (const [k, p] of pairs.entries()) {
    const id = p.comparison.id ?? String(k + 1);
    const result = { outcome: 'ok' as const, comparison: p.comparison, candidate: p.candidate, baseline: p.baseline };
    summary.add({ file: sides.train.file, line: k + 1, id, route: 'tokens', result, noiseFloor: t.noiseFloor });
    if (json) await writeOut(`${JSON.stringify({ ...p.comparison, ...where })}\n`);
  }
  const results = pairs.map((p) => p.comparison);
  if (!json) await writeOut(renderTraining(results, { ...where, swapped: sides.swapped }, t));
  if (flags.html) {
    const h = new HealthAccumulator();
    for (const r of results) h.add(r, r.id ?? '', r.id ?? '');
    await writeHtmlReport(flags.html, summary.data(), {
      title: `logprobe analyze: ${where.train} (train) vs ${where.infer} (infer)`,
      inputs: files,
      thresholds: describeThresholds(t),
      gapAmbiguous: t.gapAmbiguous,
      gapSystematic: t.gapSystematic,
      top: s.top,
      health: { health: h.health(), definition: h.definition() },
    });
    process.stderr.write(`report: ${flags.html}\n`);
  }
  return summary.count(s.failOn) > 0 ? 1 : 0;
}

/** Capture files re-analysed record by record (--json: each pair as it comes), then the report. */
async function analyzeCaptures(s: AnalyzeSettings, flags: AnalyzeFlags): Promise<number> {
  const { files, summary, json } = s;
  // Large inputs only: a few MB finish before a progress line would help.
  const progress = startProgress({
    label: 'analyze',
    total: s.totalBytes,
    unit: 'bytes',
    lines: s.totalBytes >= 64 * 1024 * 1024,
  });
  let consumed = 0;
  let first: Thresholds | null = null;
  let varied = false;
  const health = new HealthAccumulator();
  const { records, golden } = await analyzeFiles({
    files,
    overrides: s.overrides,
    summary,
    onBytes: (n) => {
      consumed += n;
      progress.update(consumed, { detail: `${summary.total.toLocaleString('en-US')} pairs` });
    },
    onSkip: (m) => process.stderr.write(`${m}\n`),
    onPair: (r) => {
      if (r.result.comparison) health.add(r.result.comparison, `${r.file}:${r.line}`, String(r.record.id));
      if (first === null) first = r.thresholds;
      else if (!varied && !sameThresholds(first, r.thresholds)) varied = true;
      return json ? writeOut(`${JSON.stringify(pairJson(r))}\n`) : undefined;
    },
    // Without --html or --fail-on, nobody needs the rest once the reader of --json has gone.
    signal: json && !flags.html && s.failOn.size === 0 ? stdoutGone : undefined,
  });
  progress.stop();
  if (records === 0)
    throw noInput(
      golden > 0
        ? `${files.join(', ')}: golden records only (logprobe record: one side, no pair to compare); use them with replay --baseline-from`
        : `no capture records in ${files.join(', ')}`,
    );
  const data = summary.data();
  const t: Thresholds = first!;
  const ctx = {
    thresholds: describeThresholds(t, thresholdsNote(s.overrides, varied)),
    gapAmbiguous: t.gapAmbiguous,
    gapSystematic: t.gapSystematic,
    top: s.top,
    health: { health: health.health(), definition: health.definition() },
  };
  if (!json) await writeOut(renderSummaryText(data, ctx));
  if (flags.html) {
    await writeHtmlReport(flags.html, data, {
      title: `logprobe analyze: ${files.length === 1 ? files[0] : `${files.length} files`}`,
      inputs: files,
      ...ctx,
    });
    process.stderr.write(`report: ${flags.html}\n`);
  }
  const failed = summary.count(s.failOn) + (s.failOn.has('alert') ? summary.alertsFired : 0);
  return failed > 0 ? 1 : 0;
}

function sameThresholds(a: Thresholds, b: Thresholds): boolean {
  return (
    a.noiseFloor === b.noiseFloor &&
    a.gapAmbiguous === b.gapAmbiguous &&
    a.gapSystematic === b.gapSystematic &&
    a.globalFraction === b.globalFraction &&
    a.minAligned === b.minAligned
  );
}

/** A pair as `--json` prints it: the comparison's fields (docs/format.md) and where it came from. */
function pairJson(r: AnalysedRecord): Record<string, unknown> {
  const { record, result } = r;
  const where = {
    file: r.file,
    line: r.line,
    id: record.id,
    route: record.route,
    ts: record.ts,
    outcome: result.outcome,
    noiseFloor: r.thresholds.noiseFloor,
    onlineVerdict: record.analysis?.verdict ?? null,
    model: r.slice.model,
    cache: r.slice.cache,
    ...(r.paths.length > 0 ? { paths: r.paths.map(pathJson) } : {}),
    ...(r.record.canary !== undefined ? { canary: r.record.canary } : {}),
  };
  return result.comparison ? { ...result.comparison, ...where } : { verdict: null, ...where };
}

/** A path check as `--json` prints it: its outcome and verdict, and the figures without the per-position shifts. */
function pathJson(p: PathPair): Record<string, unknown> {
  const a = p.analysis;
  return {
    backend: p.backend,
    outcome: p.outcome,
    ...(p.reason ? { reason: p.reason } : {}),
    ...(p.method ? { method: p.method } : {}),
    verdict: p.verdict,
    ...(a
      ? {
          comparable: a.comparable,
          shifted: a.shifted,
          maxShift: a.maxShift,
          meanShift: a.meanShift,
          noiseFloor: a.noiseFloor,
        }
      : {}),
  };
}

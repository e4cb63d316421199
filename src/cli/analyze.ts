import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { noInput } from '../errors.js';
import { parseNumberOption } from './options.js';
import { startProgress } from './progress.js';
import { configFrom, describeThresholds, parseFailOn, thresholdOptions, thresholdOverrides, thresholdsNote, type ThresholdFlags } from './thresholds.js';
import type { Thresholds } from '../core/index.js';
import { resolveInputs } from '../capture/reader.js';
import { analyzeFiles, type AnalysedRecord } from '../report/analyze.js';
import { Summary } from '../report/summary.js';
import { renderSummaryText } from '../report/text.js';
import { checkWritable, writeHtmlReport } from './report-file.js';
import { stdoutGone, writeOut } from './stdout.js';

interface AnalyzeFlags extends ThresholdFlags {
  json?: boolean;
  html?: string;
  failOn?: string;
  top: string;
}

const HELP = `
FILES are capture files (JSONL, plain or gzip, as 'serve' writes them or 'replay --out'), or
directories holding them.
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
      .description('re-analyse captured pairs offline: verdict mix, shift distribution, flips, worst pairs; --html report')
      .argument('<files...>', 'capture files (.jsonl or .jsonl.gz), or directories of them')
      .option('--json', 'one JSON object per pair on stdout (docs/format.md fields)')
      .option('--html <file>', 'write a self-contained HTML report')
      .option('--fail-on <list>', 'exit 1 when any of these verdicts/outcomes occurs (comma-separated; also error, alert)')
      .option('--top <n>', 'worst pairs listed', '10'),
  )
    .addHelpText('after', HELP)
    .action(async (inputs: string[], flags: AnalyzeFlags) => {
      const top = parseNumberOption('--top', flags.top, { min: 0, integer: true });
      const failOn = flags.failOn === undefined ? new Set<string>() : parseFailOn(flags.failOn);
      const config = configFrom(flags);
      const overrides = thresholdOverrides(flags, config);
      const { files, bytes: totalBytes } = await resolveInputs(inputs);
      if (flags.html) await checkWritable(flags.html);

      const summary = new Summary({ alert: config.alert });
      // Large inputs only: a few MB finish before a progress line would help.
      const progress = startProgress({ label: 'analyze', total: totalBytes, unit: 'bytes', lines: totalBytes >= 64 * 1024 * 1024 });
      let consumed = 0;
      const json = flags.json === true;
      let first: Thresholds | null = null;
      let varied = false;
      const { records } = await analyzeFiles({
        files,
        overrides,
        summary,
        onBytes: (n) => {
          consumed += n;
          progress.update(consumed, { detail: `${summary.total.toLocaleString('en-US')} pairs` });
        },
        onSkip: (m) => process.stderr.write(`${m}\n`),
        onPair: (r) => {
          if (first === null) first = r.thresholds;
          else if (!varied && !sameThresholds(first, r.thresholds)) varied = true;
          return json ? writeOut(`${JSON.stringify(pairJson(r))}\n`) : undefined;
        },
        // Without --html or --fail-on, nobody needs the rest once the reader of --json has gone.
        signal: json && !flags.html && failOn.size === 0 ? stdoutGone : undefined,
      });
      progress.stop();
      if (records === 0) throw noInput(`no capture records in ${files.join(', ')}`);

      const data = summary.data();
      const t: Thresholds = first!;
      const ctx = { thresholds: describeThresholds(t, thresholdsNote(overrides, varied)), gapAmbiguous: t.gapAmbiguous, gapSystematic: t.gapSystematic, top };
      if (!json) await writeOut(renderSummaryText(data, ctx));
      if (flags.html) {
        await writeHtmlReport(flags.html, data, { title: `logprobe analyze: ${files.length === 1 ? files[0] : `${files.length} files`}`, inputs: files, ...ctx });
        process.stderr.write(`report: ${flags.html}\n`);
      }
      const failed = summary.count(failOn) + (failOn.has('alert') ? summary.alertsFired : 0);
      setExit(failed > 0 ? 1 : 0);
    });

function sameThresholds(a: Thresholds, b: Thresholds): boolean {
  return a.noiseFloor === b.noiseFloor && a.gapAmbiguous === b.gapAmbiguous && a.gapSystematic === b.gapSystematic && a.globalFraction === b.globalFraction && a.minAligned === b.minAligned;
}

/** A pair as `--json` prints it: the comparison's fields (docs/format.md) and where it came from. */
function pairJson(r: AnalysedRecord): Record<string, unknown> {
  const { record, result } = r;
  const where = { file: r.file, line: r.line, id: record.id, route: record.route, ts: record.ts, outcome: result.outcome, noiseFloor: r.thresholds.noiseFloor, onlineVerdict: record.analysis?.verdict ?? null };
  return result.comparison ? { ...result.comparison, ...where } : { verdict: null, ...where };
}

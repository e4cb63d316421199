import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { errnoReason, noInput, unreadableFile } from '../errors/index.js';
import { THRESHOLD_ARGS, thresholdOverrides, type ThresholdFlags } from './thresholds.js';
import { renderComparison } from './compare-format.js';
import { compareFiles, isTokenFile, readSequenceFile, renderTraining, trainerFirst } from './compare-training.js';
import { loadConfig } from '../config/load.js';
import {
  compare,
  DEFAULT_THRESHOLDS,
  notScored,
  parseResponse,
  withScoring,
  type ParsedResponse,
  type Thresholds,
  type Verdict,
} from '../core/index.js';

type CompareOptions = ThresholdFlags & { json?: boolean };

const EXIT_HELP = `
Each file is a saved response body: JSON (completions, chat, llama.cpp, SGLang native) or a saved
SSE stream — or a token-logprob file (docs/training.md): JSON or JSONL, per sequence
{id?, token_ids | tokens, logprobs, top_logprobs?}, as a trainer dumps log_softmax(logits)
gathered at the labels. A token-logprob file is compared with an engine's response (the
rollout's own logprobs, vLLM prompt_logprobs, SGLang input_token_logprobs) or another such file,
position by position (sampled sequences are fine: both sides score the same tokens); the file is
the trainer's side (with two, the first). Reported per token and in summary: KL, relative error
|p_train − p_infer| / p_infer, the importance ratio exp(lp_train − lp_infer) (mean, max, share
outside [0.8, 1.25]) and the worst positions; --json prints one object per sequence.

Thresholds come from the defaults, then --config's analysis.* (noiseFloor: auto uses
calibration.minFloor), then the flags.

Exit codes:
  0  identical or noise
  1  a shift (early_shift, global_shift, local_shift) or a tokenizer mismatch
  2  unusable input: an unreadable file, a body that is not a response, or a response without
     logprobs ("no logprobs in FILE"; with --json the incomparable result is still printed)
`;

/** Exit code of a verdict: 0 when nothing moved beyond noise, 1 for anything to look at. */
export function verdictExitCode(verdict: Verdict): number {
  if (verdict === 'identical' || verdict === 'noise') return 0;
  if (verdict === 'incomparable') return 2;
  return 1;
}

/** `logprobe compare CANDIDATE BASELINE`: two saved response bodies of the same greedy request, compared offline. */
export const compareCommand: CommandFactory = (setExit) =>
  new Command('compare')
    .description('compare two saved response bodies of the same greedy request (candidate first)')
    .argument('<candidate>', "the candidate's response body (JSON or SSE)")
    .argument('<baseline>', "the baseline's response body (JSON or SSE)")
    .option('--json', 'print the comparison object (docs/format.md field list) instead of the table')
    .option('-c, --config <file>', 'take analysis.* thresholds from a YAML config')
    .option(
      '--noise-floor <nats>',
      `a position shift above this is not float noise (default ${DEFAULT_THRESHOLDS.noiseFloor})`,
      THRESHOLD_ARGS.noiseFloor,
    )
    .option(
      '--gap-ambiguous <nats>',
      `flips below this gap are near-ties (default ${DEFAULT_THRESHOLDS.gapAmbiguous})`,
      THRESHOLD_ARGS.gapAmbiguous,
    )
    .option(
      '--gap-systematic <nats>',
      `flips above this gap need a systematic shift (default ${DEFAULT_THRESHOLDS.gapSystematic})`,
      THRESHOLD_ARGS.gapSystematic,
    )
    .option(
      '--global-fraction <share>',
      `shifted share for a global shift (default ${DEFAULT_THRESHOLDS.globalFraction})`,
      THRESHOLD_ARGS.globalFraction,
    )
    .option(
      '--min-aligned <n>',
      `fewer comparable positions make an early shift (default ${DEFAULT_THRESHOLDS.minAligned})`,
      THRESHOLD_ARGS.minAligned,
    )
    .addHelpText('after', EXIT_HELP)
    .action(async (candidateFile: string, baselineFile: string, opts: CompareOptions) => {
      const thresholds = resolveThresholds(opts);
      if ((await isTokenFile(candidateFile)) || (await isTokenFile(baselineFile)))
        setExit(await compareTokenFiles(candidateFile, baselineFile, opts, thresholds));
      else setExit(compareResponses(candidateFile, baselineFile, opts, thresholds));
    });

/** Compares token-logprob files (or one with an engine's response), prints the result and returns the exit code. */
async function compareTokenFiles(
  candidateFile: string,
  baselineFile: string,
  opts: CompareOptions,
  thresholds: Thresholds,
): Promise<number> {
  const sides = trainerFirst(await readSequenceFile(candidateFile), await readSequenceFile(baselineFile));
  const results = compareFiles(sides.train, sides.infer, thresholds);
  const where = { train: sides.train.file, infer: sides.infer.file };
  if (opts.json)
    process.stdout.write(
      results.length === 1
        ? `${JSON.stringify({ ...results[0], ...where }, null, 2)}\n`
        : results.map((r) => `${JSON.stringify({ ...r, ...where })}\n`).join(''),
    );
  else process.stdout.write(renderTraining(results, { ...where, swapped: sides.swapped }, thresholds));
  return Math.max(...results.map((r) => verdictExitCode(r.verdict)));
}

/** Compares two saved response bodies, prints the result and returns the exit code (throws when incomparable). */
function compareResponses(
  candidateFile: string,
  baselineFile: string,
  opts: CompareOptions,
  thresholds: Thresholds,
): number {
  const candidate = readResponse(candidateFile);
  const baseline = readResponse(baselineFile);
  // Two saved bodies and no engine: past a divergence nothing can be scored here (the proxy, replay and record score live).
  const result = withScoring(
    compare(candidate, baseline, thresholds),
    notScored(
      'skipped',
      'two saved responses, no engine to score them on (the proxy, replay and record score past the divergence)',
    ),
    null,
    thresholds,
  );
  if (opts.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  else if (result.verdict !== 'incomparable') {
    const color = process.stdout.isTTY === true && !process.env.NO_COLOR;
    process.stdout.write(renderComparison(result, thresholds, color));
  }
  if (result.verdict === 'incomparable') {
    const empty = candidate.steps.length === 0 ? candidateFile : baseline.steps.length === 0 ? baselineFile : null;
    throw noInput(empty ? `no logprobs in ${empty}` : (result.notes[0] ?? 'incomparable'));
  }
  return verdictExitCode(result.verdict);
}

/** Reads and parses one body; a file that is not a response is a user error naming the file. */
function readResponse(file: string): ParsedResponse {
  let bytes: Uint8Array;
  try {
    bytes = readFileSync(file);
  } catch (err) {
    throw unreadableFile(file, errnoReason(err, 'read'), err);
  }
  const parsed = parseResponse(bytes);
  if (parsed.format === 'unknown' || parsed.format === 'error') {
    throw noInput(`${file}: ${parsed.error ?? 'not a completion response'}`);
  }
  return parsed;
}

/** Defaults ← `--config`'s analysis.* ← the flags (the same rules as analyze and replay). */
function resolveThresholds(opts: CompareOptions): Thresholds {
  return { ...DEFAULT_THRESHOLDS, ...thresholdOverrides(opts, opts.config ? loadConfig({ file: opts.config }) : null) };
}

import { resolve } from 'node:path';
import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { noInput, unwritableFile, usageError } from '../errors/index.js';
import { LOGITS_TOP } from '../core/index.js';
import { backendUrlFlag, numberArg, trustedBackend } from './options.js';
import { startProgress } from './progress.js';
import { writeOut } from './stdout.js';
import { configFrom, resolveThresholds } from './thresholds.js';
import { resolveInputs } from '../capture/reader.js';
import { openGoldenFile, runRecord } from '../replay/record.js';
import { scoringOptions } from '../backend/client.js';
import { configuredKeys } from '../log/redact.js';

interface RecordFlags {
  backend?: string;
  out?: string;
  config?: string;
  maxTokens?: number;
  concurrency: number;
  maxFailures: number;
  keepDuplicates?: boolean;
}

const HELP = `
INPUT is a prompt set or a capture, as for replay. Each line goes through the mirror's rewrite
(greedy, logprobs, mirror.* from --config) to the one backend (baseline.* of --config: apiKey,
engine, timeouts), and becomes a golden record in --out: a capture record with the baseline side
only ("golden": true, "candidate": null) and, where the backend's engine profile allows
(docs/engines.md; analysis.scoring.when: never turns it off), the backend's own teacher-forced
scoring of its tokens — prompt and continuation steps — so that

  logprobe replay INPUT --candidate URL --baseline-from GOLDEN

compares a new build with it, free-running and teacher-forced, without a live baseline.
Asks for the top-10 alternatives --gate logits compares (mirror.topLogprobs when higher), in the
answers and in their scoring alike; each golden record keeps the k its scoring got (scored.topK);
--max-tokens N for --gate tokens:N. Definition warnings of the backend's own numbers (a
renormalised subset, probabilities, ...) are printed: a golden file of such numbers gates nothing.

Each distinct prompt is recorded once (replay finds it by its prompt, so one record answers every
repeat of it; --keep-duplicates records every line). Before the first prompt the backend is asked
GET /v1/models: one that answers nothing, or refuses the API key, is refused at once. A backend
that fails --max-failures answers in a row (default 10) stops the recording.

Exit codes:
  0  every prompt recorded (scored where the engine allows)
  1  a prompt's answer was unusable (an error, no logprobs) or its scoring failed, or the recording
     stopped after --max-failures failed answers in a row; the golden file is still written
  2  usage error: a missing or bad flag, a placeholder URL (http://TRUSTED:8000), a backend that
     answers nothing or refuses the API key, an unreadable INPUT, an unwritable --out, nothing to
     record
`;

/** `logprobe record INPUT… --backend URL --out GOLDEN.jsonl`: a golden file for replay --baseline-from. */
export const recordCommand: CommandFactory = (setExit) =>
  new Command('record')
    .description(
      'send a prompt set or capture to one backend and write a golden file (baseline side and its own scoring) for replay --baseline-from',
    )
    .argument('<inputs...>', 'prompt sets or captures (.jsonl or .jsonl.gz), or directories of captures')
    .option('--backend <url>', 'the trusted build to record')
    .option('--out <file>', 'the golden file to write (JSONL; emptied if it exists)')
    .option(
      '-c, --config <file>',
      'take mirror.*, analysis.scoring, baseline.apiKey/engine and timeouts from a YAML config',
    )
    .option(
      '--max-tokens <n>',
      "tokens to generate per prompt (default: the input's, capped by mirror.maxTokens)",
      numberArg('--max-tokens', { min: 1, integer: true }),
    )
    .option(
      '--concurrency <n>',
      'prompts in flight at once',
      numberArg('--concurrency', { min: 1, max: 1024, integer: true }),
      4,
    )
    .option(
      '--max-failures <n>',
      'stop after this many failed answers in a row (an unreachable backend, HTTP errors)',
      numberArg('--max-failures', { min: 1, integer: true }),
      10,
    )
    .option('--keep-duplicates', 'record every input line, not each distinct prompt once')
    .addHelpText('after', HELP)
    .action((args: string[], flags: RecordFlags) => record(args, flags, setExit));

/** The action: records the inputs into the golden file, prints the summary and sets the exit code. */
async function record(args: string[], flags: RecordFlags, setExit: (code: number) => void): Promise<void> {
  const backend = backendUrlFlag('--backend', flags.backend);
  if (flags.out === undefined) throw usageError('--out FILE is required (the golden file to write)');
  const { concurrency, maxTokens } = flags;
  const config = configFrom(flags);
  const thresholds = resolveThresholds({}, config);
  const topK = Math.max(config.mirror.topLogprobs, LOGITS_TOP);
  const { files: inputs } = await resolveInputs(args);
  const out = resolve(flags.out);
  const handle = await openGoldenFile(out);
  const progress = startProgress({ label: 'record', total: 0, unit: 'items', lines: false });
  let result;
  try {
    result = await runRecord({
      inputs,
      backend: trustedBackend(backend, config),
      tlsInsecure: config.tlsInsecure,
      // The logits gate compares each side's top-10: the answers and their scoring both ask for that many.
      rewrite: { ...config.mirror, topLogprobs: topK },
      maxTokens,
      concurrency,
      // The backend is scored whatever the verdict would be: a golden record must hold its scoring for any later candidate.
      scoring: {
        ...scoringOptions(config),
        topK,
        when: config.analysis.scoring.when === 'never' ? 'never' : 'always',
      },
      thresholds,
      out: handle,
      outFile: out,
      secrets: configuredKeys(config),
      redactFields: config.log.redact,
      maxFailures: flags.maxFailures,
      keepDuplicates: flags.keepDuplicates === true,
      onSkip: (m) => process.stderr.write(`${m}\n`),
      onRecord: (done) => progress.update(done, {}),
    });
  } catch (err) {
    // A close that fails after a failed write is the same failure, said once (the write's).
    progress.stop();
    await handle.close().catch(() => undefined);
    throw err;
  }
  progress.stop();
  await handle.close().catch((err: unknown) => {
    throw unwritableFile(out, err);
  });
  if (result.records === 0 && result.stopped === null) throw noInput(`nothing to record in ${inputs.join(', ')}`);
  setExit(report(result, { out, backend, maxFailures: flags.maxFailures }));
}

/** Prints what the recording did and returns the exit code. */
function report(
  result: Awaited<ReturnType<typeof runRecord>>,
  o: { out: string; backend: string; maxFailures: number },
): number {
  if (result.stopped !== null) {
    // One line: the answers' problems would say the same cause once a prompt.
    process.stderr.write(
      `logprobe: record stopped: ${result.stopped} from --backend ${o.backend} (--max-failures ${o.maxFailures}); ${result.records} prompts recorded to ${o.out}\n`,
    );
    return 1;
  }
  void writeOut(`${summaryLines(result, o.out).join('\n')}\n`);
  return (result.outcomes.ok ?? 0) < result.records || result.scoring.failed > 0 ? 1 : 0;
}

/** The summary record prints: the outcomes, the scoring, the problems and the definition warnings. */
function summaryLines(result: Awaited<ReturnType<typeof runRecord>>, out: string): string[] {
  const ok = result.outcomes.ok ?? 0;
  const s = result.scoring;
  const bad = Object.entries(result.outcomes)
    .filter(([k]) => k !== 'ok')
    .map(([k, n]) => `${k} ${n}`);
  const lines = [
    `recorded ${result.records} prompts to ${out}: ${ok} usable${bad.length ? ` (${bad.join(', ')})` : ''}${result.duplicates ? `; ${result.duplicates} repeated input lines not recorded (--keep-duplicates records every line)` : ''}`,
    `scored ${s.ok} (${result.methods.join('; ') || 'none'})${result.topK !== null ? ` with the top-${result.topK}` : ''}; unsupported ${s.unsupported}, skipped ${s.skipped}, failed ${s.failed}`,
    ...result.problems.map((p) => `  ${p}`),
    ...result.definition.map((d) => `definition: ${d.check} on ${d.records} records, first ${d.at}: ${d.detail}`),
  ];
  if (s.unsupported > 0 && s.ok === 0)
    lines.push(
      "note: the backend's engine offers no scoring (docs/engines.md): replay will compare free-running generations only",
    );
  return lines;
}

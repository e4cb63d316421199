import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { LogprobeError } from '../errors/index.js';
import { loadConfig } from '../config/load.js';
import { ENGINE_SETTINGS, type EngineSetting } from '../metrics/labels.js';
import { KeyRejectedError, probeEngine, requiredCapabilities, UnreachableError } from '../probe/probe.js';
import { missingText, probeJson, probeTable } from '../probe/format.js';
import { choiceArg, httpUrlFlag, numberArg } from './options.js';
import { backendBase } from '../config/values.js';
import { writeOut } from './stdout.js';

interface ProbeFlags {
  apiKey?: string;
  model?: string;
  json?: boolean;
  config?: string;
  timeout: number;
  engine?: EngineSetting;
  flush?: boolean;
}

const HELP = `
Asks the server behind URL what logprobe needs of it, one request or a few per line: the engine
and its version (as candidate.engine: auto detects it), the logprobs cap (a request above it, the
refusal read), token ids on a mirrored copy, the engine's scoring method and whether it reads the
cache, prompt logprobs with top-k, cache-hit counts (a new prompt, then the same again), the cache
flush (only with mirror.repeat.flush: it empties the engine's prefix cache; --flush asks anyway),
chat rendering for scoring, and determinism (one greedy request alone, again, then among
probe.concurrentCopies (16) concurrent copies of itself, on llama-server at most its slots:
bitwise equal or not; on llama-server with the cache skipped, and once more with it, so that the
prefix cache and batching are told apart). Each line says what the server answered and the server
flag or setting that turns the feature on. Lines marked * are what the configuration's features
(--config, or the defaults) need: scoring, repeat probes, flush, noiseFloor: exact.

Exit codes:
  0  every feature the configuration uses works
  1  some do not: the last line names them and what enables each
  2  URL answers nothing (one line with the cause), refuses the key (401/403: one line naming it),
     or a usage error
`;

/** `logprobe probe URL`: what an engine server offers logprobe, and how to turn on what it lacks. */
export const probeCommand: CommandFactory = (setExit) =>
  new Command('probe')
    .description(
      'ask an engine server what logprobe needs of it (cap, ids, scoring, cache counts, flush, chat, determinism) and which flag enables what is missing',
    )
    .argument('<url>', 'the engine server (http(s)://host:port)')
    .option('--api-key <key>', 'sent as Authorization: Bearer KEY (SGLang: the admin key for the flush)')
    .option('--model <name>', "the served model (default: the first of the server's /v1/models)")
    .option(
      '-c, --config <file>',
      'take the features to check (scoring, repeat, flush, noiseFloor) and mirror.topLogprobs from a YAML config',
    )
    .option(
      '--engine <engine>',
      `the engine profile instead of detecting it: ${ENGINE_SETTINGS.join(', ')}`,
      choiceArg('--engine', ENGINE_SETTINGS),
    )
    .option(
      '--flush',
      "test the cache flush even when the configuration does not use it (empties the engine's prefix cache)",
    )
    .option('--timeout <ms>', 'per request', numberArg('--timeout', { min: 1, integer: true }), 10000)
    .option('--json', 'one JSON object (docs/engines.md)')
    .addHelpText('after', HELP)
    .action(async (given: string, flags: ProbeFlags) => {
      // The URL it calls, said when it is not the one given (a base_url's /v1 dropped).
      const url = backendBase(httpUrlFlag('URL', given));
      if (url !== given)
        process.stderr.write(
          `logprobe: probing ${url} (the /v1 of ${given} dropped: logprobe calls /v1/… and the engine's own routes under it)\n`,
        );
      const timeoutMs = flags.timeout;
      const config = loadConfig({ file: flags.config });
      const required = requiredCapabilities(config);
      let report;
      try {
        report = await probeEngine({
          url,
          apiKey: flags.apiKey ?? null,
          model: flags.model ?? null,
          timeoutMs,
          tlsInsecure: config.tlsInsecure,
          engine: flags.engine ?? 'auto',
          topK: config.mirror.topLogprobs,
          copies: config.probe.concurrentCopies,
          flush: Boolean(flags.flush) || required.includes('flush'),
          required,
        });
      } catch (err) {
        if (err instanceof UnreachableError)
          throw new LogprobeError('LOGPROBE_UNREACHABLE', `${url} answers nothing: ${err.message}`);
        if (err instanceof KeyRejectedError) throw new LogprobeError('LOGPROBE_KEY_REJECTED', `${url} ${err.message}`);
        throw err;
      }
      await writeOut(flags.json ? probeJson(report) : probeTable(report));
      if (report.missing.length > 0 && !flags.json)
        process.stderr.write(
          `logprobe: ${url} lacks what the configuration uses: ${report.missing.map((n) => missingText(report, n)).join('; ')}\n`,
        );
      setExit(report.missing.length > 0 ? 1 : 0);
    });

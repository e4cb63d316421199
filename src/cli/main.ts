import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { LogprobeError } from '../errors/index.js';
import { commands } from './commands.js';
import { guardStdout } from './stdout.js';
import { prepareDemoHelp } from './demo.js';

/** The package's version, from its package.json (two folders up from src/cli and from dist/cli alike). */
const VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/**
 * The CLI entry: parses argv, runs one command, returns the exit code. Commands never call
 * process.exit; user errors become one line on stderr and exit code 2.
 */
export async function main(argv: string[]): Promise<number> {
  let exitCode = 0;
  // Every command's output may go to a reader that leaves (`| head`): no EPIPE stack trace.
  guardStdout();
  if (argv[0] === 'demo') await prepareDemoHelp();
  const program = new Command('logprobe')
    .description(
      'Transparent OpenAI-compatible proxy that measures per-token logprob drift between a candidate and a baseline',
    )
    .version(VERSION)
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) });
  for (const make of commands) {
    const cmd = make((code) => {
      exitCode = code;
    });
    cmd.exitOverride();
    program.addCommand(cmd);
  }
  try {
    await program.parseAsync(argv, { from: 'user' });
    return exitCode;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end here with exit code 0; commander's usage mistakes are user errors: 2.
      return err.exitCode === 0 ? 0 : 2;
    }
    // Every user-facing error of every command (src/errors/index.ts), mapped here once.
    if (err instanceof LogprobeError) {
      process.stderr.write(`logprobe: ${err.message}\n`);
      return err.exitCode;
    }
    throw err;
  }
}

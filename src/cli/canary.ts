import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { canaryBuildCommand } from './canary-build.js';
import { canaryCheckCommand } from './canary-check.js';

/** `logprobe canary check|build`: the canary probes on demand (issue #37; `serve` sends them on its own). */
export const canaryCommand: CommandFactory = (setExit) => {
  const cmd = new Command('canary').description(
    'canary probes: check a candidate with a small probe set of border inputs (exit 1 on a change), or build one from traffic',
  );
  for (const sub of [canaryCheckCommand(setExit), canaryBuildCommand(setExit)]) {
    // Usage errors of a subcommand end in main's catch (exit 2, one line), as the top level's do.
    sub.exitOverride();
    sub.showHelpAfterError('(run with --help for usage)');
    cmd.addCommand(sub);
  }
  return cmd;
};

import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { loadEngines } from './engines.js';

/**
 * `logprobe engine --sim|--llama …`: the test engines' own CLI (`@logprobe/engine`), for tests,
 * benchmarks and the demo. Every argument goes to it as given; its `--help` lists them.
 */
export const engineCommand: CommandFactory = (setExit) =>
  new Command('engine')
    .description(
      'run an OpenAI-compatible test engine (the simulated model, or llama.cpp on a generated model); see logprobe engine --help',
    )
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .argument('[options...]')
    .action(async (args: string[]) => {
      const engines = await loadEngines('logprobe engine');
      setExit(await engines.runEngineCli(args));
    });

import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { loadConfig } from '../config/load.js';

export const serveCommand: CommandFactory = (setExit) =>
  new Command('serve')
    .description('run the proxy (config from YAML, overridden by LOGPROBE_* env vars)')
    .option('-c, --config <file>', 'YAML config file')
    .option('--check-config', 'validate the config and exit')
    .action(async (opts: { config?: string; checkConfig?: boolean }) => {
      const config = loadConfig({ file: opts.config });
      if (opts.checkConfig) {
        process.stdout.write(`config ok${opts.config ? `: ${opts.config}` : ' (defaults)'}\n`);
        setExit(0);
        return;
      }
      void config;
      setExit(0);
    });

import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { loadConfig } from '../config/load.js';
import { createRuntime, type LogprobeRuntime } from '../server.js';

/**
 * Stops the runtime on SIGTERM/SIGINT (graceful drain), a second signal forces the exit.
 * Resolves once the runtime has stopped.
 */
export function untilSignal(runtime: { close(): Promise<void>; logger: { info: (o: object, m: string) => void } }): Promise<void> {
  return new Promise((resolve) => {
    let stopping = false;
    const onSignal = (signal: NodeJS.Signals) => {
      if (stopping) {
        process.stderr.write(`logprobe: second ${signal}, exiting now\n`);
        process.exit(130);
      }
      stopping = true;
      runtime.logger.info({ signal }, 'shutting down');
      runtime.close().then(
        () => {
          process.off('SIGTERM', onSignal);
          process.off('SIGINT', onSignal);
          resolve();
        },
        (err: unknown) => {
          process.stderr.write(`logprobe: error during shutdown: ${(err as Error).message}\n`);
          resolve();
        },
      );
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
}

export const serveCommand: CommandFactory = (setExit) =>
  new Command('serve')
    .description('run the proxy (config from YAML, overridden by LOGPROBE_* env vars)')
    .option('-c, --config <file>', 'YAML config file (see config/logprobe.example.yaml)')
    .option('--check-config', 'validate the config, print it without secrets, and exit')
    .action(async (opts: { config?: string; checkConfig?: boolean }) => {
      const config = loadConfig({ file: opts.config });
      if (opts.checkConfig) {
        process.stdout.write(`config ok${opts.config ? `: ${opts.config}` : ' (defaults and environment)'}\n`);
        setExit(0);
        return;
      }
      const runtime: LogprobeRuntime = createRuntime(config);
      try {
        await runtime.listen();
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        await runtime.close().catch(() => undefined);
        if (e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL') {
          process.stderr.write(`logprobe: cannot listen: ${e.message}\n`);
          setExit(2);
          return;
        }
        throw err;
      }
      await untilSignal(runtime);
      setExit(0);
    });

import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { checkCaptureDir } from '../capture/sink.js';
import { loadConfig } from '../config/load.js';
import { LogprobeError } from '../errors.js';
import { createRuntime } from '../server.js';
import { createClusterRuntime, workerCount } from '../cluster/primary.js';
import { aborted, stopOnSignal } from './signals.js';

export const serveCommand: CommandFactory = (setExit) =>
  new Command('serve')
    .description('run the proxy (config from YAML, overridden by LOGPROBE_* env vars)')
    .option('-c, --config <file>', 'YAML config file (see config/logprobe.example.yaml)')
    .option('--mode <mode>', "inline (in the client path) or shadow (the target of an existing mirror: docs/operations.md#shadow-mode); overrides the config's mode")
    .option('--check-config', 'validate the config, print it without secrets, and exit')
    .action(async (opts: { config?: string; mode?: string; checkConfig?: boolean }) => {
      const config = loadConfig({ file: opts.config, ...(opts.mode !== undefined ? { overrides: { mode: opts.mode as 'inline' | 'shadow' } } : {}) });
      if (opts.checkConfig) {
        process.stdout.write(`config ok${opts.config ? `: ${opts.config}` : ' (defaults and environment)'}\n`);
        setExit(0);
        return;
      }
      // Before anything listens: a capture directory that cannot be written refuses the start (exit 2).
      if (config.capture.enabled) await checkCaptureDir(config.capture.dir);
      // listen.workers > 1: a primary (the mirror, the admin port) and N proxy worker processes.
      const workers = workerCount(config);
      const runtime = workers > 1 ? createClusterRuntime(config, workers) : createRuntime(config);
      try {
        await runtime.listen();
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        await runtime.close({ quiet: true }).catch(() => undefined);
        if (e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL') throw new LogprobeError('LOGPROBE_LISTEN', `cannot listen: ${e.message}`, { cause: err });
        throw err;
      }
      // The first SIGTERM/SIGINT drains (shutdown.drainSeconds); a second one exits at once.
      const stop = stopOnSignal();
      try {
        await aborted(stop.stopping);
        runtime.logger.info({ signal: stop.signal() }, 'shutting down');
        await runtime.close().catch((err: unknown) => process.stderr.write(`logprobe: error during shutdown: ${(err as Error).message}\n`));
      } finally {
        stop.dispose();
      }
      setExit(0);
    });

import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { checkCaptureDir } from '../capture/sink.js';
import { configWarnings, resolveConfig, unknownEnvWarnings } from '../config/load.js';
import { renderConfigYaml } from '../config/show.js';
import { LogprobeError } from '../errors/index.js';
import { createRuntime } from '../server/server.js';
import { checkCanaryFiles } from '../canary/prober.js';
import { AdminAuth, adminHttps } from '../admin/auth.js';
import { createClusterRuntime, workerCount } from '../cluster/primary.js';
import { aborted, stopOnSignal } from './signals.js';

export const serveCommand: CommandFactory = (setExit) =>
  new Command('serve')
    .description('run the proxy (config from YAML, overridden by LOGPROBE_* env vars)')
    .option('-c, --config <file>', 'YAML config file (see config/logprobe.example.yaml)')
    .option(
      '--mode <mode>',
      "inline (in the client path) or shadow (the target of an existing mirror: docs/operations.md#shadow-mode); overrides the config's mode",
    )
    .option(
      '--check-config',
      'validate the config, print it as YAML (secrets redacted, where each value came from), and exit',
    )
    .action(async (opts: { config?: string; mode?: string; checkConfig?: boolean }) => {
      const resolved = resolveConfig({
        file: opts.config,
        ...(opts.mode !== undefined
          ? { overrides: { mode: opts.mode as 'inline' | 'shadow' }, overridesFrom: '--mode' }
          : {}),
      });
      const config = resolved.config;
      // A mistyped LOGPROBE_* name leaves its key at the default: said at once, on stderr, and in the log below.
      const warnings = [...unknownEnvWarnings(), ...configWarnings(config)];
      // The admin port's token file and certificate are read now: a missing one is named before anything listens.
      AdminAuth.fromConfig(config);
      adminHttps(config);
      // The canaries' probe file and reference are read now too: a bad line is named before anything listens.
      await checkCanaryFiles(config);
      if (opts.checkConfig) {
        for (const w of warnings) process.stderr.write(`logprobe: warning: ${w}\n`);
        const header = [
          `logprobe: config ok (${opts.config ? `file ${opts.config}` : 'no file'}, then LOGPROBE_* environment); the effective values:`,
        ];
        process.stdout.write(renderConfigYaml(resolved, header));
        setExit(0);
        return;
      }
      // Before anything listens: a capture directory that cannot be written refuses the start (exit 2).
      if (config.capture.enabled) await checkCaptureDir(config.capture.dir);
      // listen.workers > 1: a primary (the mirror, the admin port) and N proxy worker processes.
      const workers = workerCount(config);
      const runtime = workers > 1 ? createClusterRuntime(config, workers) : createRuntime(config);
      for (const w of warnings) runtime.logger.warn(w);
      // The first SIGTERM/SIGINT drains (shutdown.drainSeconds); a second one exits at once. Installed
      // before listening: a signal that arrives while the ports open (or the mirror worker starts)
      // drains once they are open, never Node's default exit by signal.
      const stop = stopOnSignal();
      try {
        try {
          await runtime.listen();
        } catch (err) {
          const e = err as NodeJS.ErrnoException;
          await runtime.close({ quiet: true }).catch(() => undefined);
          if (e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL')
            throw new LogprobeError('LOGPROBE_LISTEN', `cannot listen: ${e.message}`, { cause: err });
          throw err;
        }
        await aborted(stop.stopping);
        runtime.logger.info({ signal: stop.signal() }, 'shutting down');
        await runtime
          .close()
          .catch((err: unknown) =>
            process.stderr.write(`logprobe: error during shutdown: ${(err as Error).message}\n`),
          );
      } finally {
        stop.dispose();
      }
      setExit(0);
    });

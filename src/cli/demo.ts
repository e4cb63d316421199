import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { UsageError, parseNumberOption } from './errors.js';
import { SIM_DEMO_FAULTS, runDemo, startSimEngines, type SimDemoFault } from '../demo/run.js';

export const demoCommand: CommandFactory = (setExit) =>
  new Command('demo')
    .description('the main job on an embedded default: two engines (the candidate with a fault), the proxy in front, live traffic, verdicts and alerts')
    .option('--fault <fault>', `candidate fault: ${SIM_DEMO_FAULTS.join(', ')}`, 'state-shift')
    .option('--duration <seconds>', 'stop after this many seconds (default: until Ctrl-C)')
    .option('--rate <rps>', 'client requests per second', '4')
    .option('--port <n>', 'proxy port (0: any free port)', '8080')
    .option('--admin-port <n>', 'admin port for /metrics (0: any free port)', '9464')
    .action(async (opts: { fault: string; duration?: string; rate: string; port: string; adminPort: string }) => {
      if (!(SIM_DEMO_FAULTS as readonly string[]).includes(opts.fault)) {
        throw new UsageError(`--fault: expected one of ${SIM_DEMO_FAULTS.join(', ')}, got '${opts.fault}'`);
      }
      const fault = opts.fault as SimDemoFault;
      const duration = opts.duration === undefined ? undefined : parseNumberOption('--duration', opts.duration, { min: 1 });
      const rate = parseNumberOption('--rate', opts.rate, { min: 0.1, max: 1000 });
      const port = parseNumberOption('--port', opts.port, { min: 0, max: 65535, integer: true });
      const adminPort = parseNumberOption('--admin-port', opts.adminPort, { min: 0, max: 65535, integer: true });
      const ac = new AbortController();
      const onSignal = () => ac.abort();
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      try {
        await runDemo({
          duration,
          rate,
          port,
          adminPort,
          faultLabel: fault === 'none' ? 'no fault' : `fault: ${fault}`,
          engines: () => startSimEngines(fault),
          signal: ac.signal,
          out: (line) => process.stdout.write(`${line}\n`),
        });
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
      setExit(0);
    });

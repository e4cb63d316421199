/**
 * SIGINT/SIGTERM for the long-running commands (`serve`, `demo`): the first asks for a graceful
 * stop (`stopping` aborts), a second one while stopping exits at once with 130, as a user
 * pressing Ctrl-C twice expects. `dispose` removes the handlers once the command is done.
 */
export function stopOnSignal(): { stopping: AbortSignal; signal: () => NodeJS.Signals | null; dispose: () => void } {
  const controller = new AbortController();
  let received: NodeJS.Signals | null = null;
  const on = (sig: NodeJS.Signals): void => {
    if (received !== null) {
      process.stderr.write(`logprobe: second ${sig}, exiting now\n`);
      process.exit(130);
    }
    received = sig;
    controller.abort();
  };
  process.on('SIGINT', on);
  process.on('SIGTERM', on);
  return {
    stopping: controller.signal,
    signal: () => received,
    dispose: () => {
      process.off('SIGINT', on);
      process.off('SIGTERM', on);
    },
  };
}

/** Resolves when `signal` aborts (at once when it already has). */
export function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

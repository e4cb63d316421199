/**
 * stdout for commands that print a lot (`analyze --json | head`): once the reader has gone
 * (EPIPE), output is dropped and `closed` aborts, instead of an unhandled 'error' and a stack trace.
 */
const controller = new AbortController();
let guarded = false;

/** Aborted when stdout's reader has gone. */
export const stdoutGone: AbortSignal = controller.signal;

/** Installs the EPIPE handler once. */
export function guardStdout(): void {
  if (guarded) return;
  guarded = true;
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') controller.abort();
    else throw err;
  });
}

/** Writes text; the promise (when returned) resolves once stdout can take more, so memory stays flat. */
export function writeOut(text: string): Promise<void> | undefined {
  if (controller.signal.aborted) return undefined;
  if (process.stdout.write(text)) return undefined;
  return new Promise((resolve) => {
    const done = () => {
      process.stdout.off('drain', done);
      controller.signal.removeEventListener('abort', done);
      resolve();
    };
    process.stdout.on('drain', done);
    controller.signal.addEventListener('abort', done);
  });
}

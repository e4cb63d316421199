/**
 * A mistake by the user (bad argument, unreadable file, invalid config): printed as one line,
 * exit code 2, never a stack trace.
 */
export class UsageError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 2) {
    super(message);
    this.name = 'UsageError';
    this.exitCode = exitCode;
  }
}

/** Parses a CLI number option, naming the flag when it is not a number. */
export function parseNumberOption(flag: string, raw: string, opts: { min?: number; max?: number; integer?: boolean } = {}): number {
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n)) throw new UsageError(`${flag}: expected a number, got '${raw}'`);
  if (opts.integer && !Number.isInteger(n)) throw new UsageError(`${flag}: expected a whole number, got '${raw}'`);
  if (opts.min !== undefined && n < opts.min) throw new UsageError(`${flag}: must be ≥ ${opts.min}, got ${raw}`);
  if (opts.max !== undefined && n > opts.max) throw new UsageError(`${flag}: must be ≤ ${opts.max}, got ${raw}`);
  return n;
}

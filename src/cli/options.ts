import { usageError } from '../errors.js';

/** Parses a CLI number option, naming the flag when it is not a number or out of range. */
export function parseNumberOption(flag: string, raw: string, opts: { min?: number; max?: number; integer?: boolean } = {}): number {
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n)) throw usageError(`${flag}: expected a number, got '${raw}'`);
  if (opts.integer && !Number.isInteger(n)) throw usageError(`${flag}: expected a whole number, got '${raw}'`);
  if (opts.min !== undefined && n < opts.min) throw usageError(`${flag}: must be ≥ ${opts.min}, got ${raw}`);
  if (opts.max !== undefined && n > opts.max) throw usageError(`${flag}: must be ≤ ${opts.max}, got ${raw}`);
  return n;
}

import type { Config } from '../config/schema.js';
import { backendBase, httpUrlHint, isHttpUrl } from '../config/values.js';
import { usageError } from '../errors/index.js';

/** Parses a CLI number option, naming the flag when it is not a number or out of range. */
export function parseNumberOption(
  flag: string,
  raw: string,
  opts: { min?: number; max?: number; integer?: boolean } = {},
): number {
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n)) throw usageError(`${flag}: expected a number, got '${raw}'`);
  if (opts.integer && !Number.isInteger(n)) throw usageError(`${flag}: expected a whole number, got '${raw}'`);
  if (opts.min !== undefined && n < opts.min) throw usageError(`${flag}: must be ≥ ${opts.min}, got ${raw}`);
  if (opts.max !== undefined && n > opts.max) throw usageError(`${flag}: must be ≤ ${opts.max}, got ${raw}`);
  return n;
}

/**
 * Commander's argParser for a number flag: `.option('--top <n>', '…', numberArg('--top', { min: 0 }), 10)`.
 * A bad value is a usage error naming the flag (exit 2), raised while the arguments are parsed.
 */
export function numberArg(
  flag: string,
  opts: { min?: number; max?: number; integer?: boolean } = {},
): (raw: string) => number {
  return (raw) => parseNumberOption(flag, raw, opts);
}

/** A required http(s) URL flag, as the config schema checks its URLs. */
export function httpUrlFlag(flag: string, raw: string | undefined): string {
  if (raw === undefined) throw usageError(`${flag} URL is required`);
  if (isHttpUrl(raw)) return raw;
  throw usageError(`${flag}: expected an http(s) URL, got '${raw}'${httpUrlHint(raw)}`);
}

/**
 * A backend's URL flag: an http(s) URL whose host is not a placeholder. A host written as one
 * word in capitals (`http://TRUSTED:8000`, `http://NEW:8000`, as printed examples write the URL
 * the user puts in) is refused at once, before a name lookup fails once a prompt.
 */
export function backendUrlFlag(flag: string, raw: string | undefined): string {
  const url = backendBase(httpUrlFlag(flag, raw));
  const host = /^https?:\/\/(?:[^@/]*@)?([^:/?#]+)/i.exec(url)?.[1] ?? '';
  if (/^[A-Z][A-Z0-9_]*$/.test(host) && host !== 'LOCALHOST')
    throw usageError(`${flag} ${url}: ${host} is a placeholder: put the URL of your own server there`);
  return url;
}

/**
 * A trusted backend a command reaches by URL (`record --backend`, `canary build --backend`): the
 * URL, with the baseline's timeouts and key from the config.
 */
export function trustedBackend(
  url: string,
  config: Config,
): { url: string; timeoutMs: number; connectTimeoutMs: number; idleTimeoutMs: number; apiKey: string | null } {
  const { timeoutMs, connectTimeoutMs, idleTimeoutMs, apiKey } = config.baseline;
  return { url, timeoutMs, connectTimeoutMs, idleTimeoutMs, apiKey };
}

/** Commander's argParser for a flag that takes one of `choices`: anything else is a usage error naming the flag and the choices. */
export function choiceArg<T extends string>(flag: string, choices: readonly T[]): (raw: string) => T {
  return (raw) => {
    if ((choices as readonly string[]).includes(raw)) return raw as T;
    throw usageError(`${flag}: expected one of ${choices.join(', ')}, got '${raw}'`);
  };
}

import { pino, type Logger, type DestinationStream } from 'pino';

/** Header and body keys that never reach a log line, whatever a caller passes. */
export const SECRET_KEYS = ['authorization', 'x-api-key', 'api-key', 'cookie', 'set-cookie', 'proxy-authorization', 'apiKey', 'adminApiKey'];

/**
 * pino redact paths for the secret keys, at every place this code logs request headers or
 * config. Explicit paths only: a wildcard (`*.authorization`) makes pino walk every logged object
 * and cost ~30 µs per line (measured), which is most of the proxy's per-request budget.
 */
export function redactPaths(extra: readonly string[] = []): string[] {
  const keys = [...SECRET_KEYS, ...extra];
  const paths: string[] = ['apiKey', 'baseline.apiKey', 'config.baseline.apiKey', 'candidate.adminApiKey', 'baseline.adminApiKey', 'config.candidate.adminApiKey', 'config.baseline.adminApiKey'];
  for (const k of keys) {
    const key = /^[A-Za-z_$][\w$]*$/.test(k) ? `.${k}` : `["${k}"]`;
    const top = key.startsWith('.') ? key.slice(1) : key;
    paths.push(top, `headers${key}`, `req.headers${key}`, `request.headers${key}`, `res.headers${key}`, `clientHeaders${key}`, `err.headers${key}`);
  }
  return [...new Set(paths)];
}

/**
 * Where a process's log lines go. The runtime holds it next to its root logger: the mirror's
 * worker thread writes its own lines (already JSON, already redacted) there too.
 */
export type LogDestination = DestinationStream;

/** The default destination: stdout, buffered (pino's asynchronous SonicBoom). */
export function stdoutDestination(): LogDestination {
  return pino.destination({ dest: 1, sync: false });
}

/** The one root logger: JSON lines, secrets redacted, written to `destination` (default stdout). */
export function createLogger(options: { level: string; redact?: readonly string[]; destination?: LogDestination }): Logger {
  return pino(
    {
      level: options.level,
      base: { service: 'logprobe' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: redactPaths(options.redact), censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
    },
    options.destination ?? stdoutDestination(),
  );
}

export type { Logger };

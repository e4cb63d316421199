import { pino, type Logger, type DestinationStream } from 'pino';

/** Header and body keys that never reach a log line, whatever a caller passes. */
export const SECRET_KEYS = ['authorization', 'x-api-key', 'api-key', 'cookie', 'set-cookie', 'proxy-authorization', 'apiKey'];

/** pino redact paths for the secret keys, at any of the places a request or config is logged. */
export function redactPaths(extra: readonly string[] = []): string[] {
  const keys = [...SECRET_KEYS, ...extra];
  const paths: string[] = [];
  for (const k of keys) {
    const key = /^[A-Za-z_$][\w$]*$/.test(k) ? `.${k}` : `["${k}"]`;
    paths.push(`req.headers${key}`, `headers${key}`, `request.headers${key}`, `*${key}`, `*.headers${key}`, `config.baseline${key}`);
  }
  return paths;
}

/** The one root logger: JSON lines, secrets redacted. */
export function createLogger(options: { level: string; redact?: readonly string[]; destination?: DestinationStream }): Logger {
  return pino(
    {
      level: options.level,
      base: { service: 'logprobe' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: redactPaths(options.redact), censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
    },
    options.destination ?? pino.destination({ dest: 1, sync: false }),
  );
}

export type { Logger };

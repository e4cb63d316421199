import { pino, type Logger, type DestinationStream } from 'pino';
import { Redaction } from './redact.js';

/**
 * pino redact paths for the secret names (src/log/redact.ts: the credential headers, `apiKey`,
 * and `log.redact`), at every place this code logs request headers or config. Explicit paths
 * only: a wildcard (`*.authorization`) makes pino walk every logged object and cost ~30 µs per line
 * (measured), which is most of the proxy's per-request budget.
 */
export function redactPaths(extra: readonly string[] = []): string[] {
  // Headers arrive lower-cased; config and body keys as spelled (`apiKey`): both spellings.
  const fields = new Redaction({ fields: extra }).fields;
  const keys = new Set([...fields, ...fields.map((f) => f.toLowerCase())]);
  const paths: string[] = ['apiKey', 'baseline.apiKey', 'config.baseline.apiKey'];
  for (const k of keys) {
    const key = /^[A-Za-z_$][\w$]*$/.test(k) ? `.${k}` : `["${k}"]`;
    const top = key.startsWith('.') ? key.slice(1) : key;
    paths.push(
      top,
      `headers${key}`,
      `req.headers${key}`,
      `request.headers${key}`,
      `res.headers${key}`,
      `clientHeaders${key}`,
      `err.headers${key}`,
    );
  }
  return [...new Set(paths)];
}

/**
 * A log line with every occurrence of a secret value replaced by `[redacted]`. The line is
 * searched as text (one `includes` per secret: free for the lines that hold none); a line that
 * holds one is parsed, scrubbed by value and written again, so it stays valid JSON whatever the
 * secret's characters.
 */
export function scrubLine(line: string, rule: Redaction, secrets: readonly string[]): string {
  if (secrets.length === 0 || !secrets.some((s) => line.includes(JSON.stringify(s).slice(1, -1)))) return line;
  const end = line.endsWith('\n') ? '\n' : '';
  try {
    return `${JSON.stringify(rule.scrub(JSON.parse(line), secrets, { byName: false }))}${end}`;
  } catch {
    let out = line;
    for (const s of secrets) out = out.split(s).join('[redacted]');
    return out;
  }
}

/**
 * Log fields scrubbed of a request's secret values (see {@link Redaction.secrets}): what the
 * mirror logs about one request (an upstream's error text, a scoring failure's reason) may quote
 * the headers that request carried. Errors become plain `{type, message, code, stack}`.
 */
export function scrubFields(
  fields: Record<string, unknown>,
  rule: Redaction,
  secrets: readonly string[],
): Record<string, unknown> {
  if (secrets.length === 0) return fields;
  const plain: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) {
    plain[k] =
      v instanceof Error
        ? {
            type: v.name,
            message: v.message,
            ...((v as { code?: unknown }).code !== undefined ? { code: (v as { code?: unknown }).code } : {}),
            stack: v.stack,
          }
        : v;
  }
  return rule.scrub(plain, secrets, { byName: false }) as Record<string, unknown>;
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

/**
 * The one root logger: JSON lines, written to `destination` (default stdout), secrets redacted
 * by name (pino paths) and the configured `keys` (`baseline.apiKey`) by value in every line.
 */
export function createLogger(options: {
  level: string;
  redact?: readonly string[];
  keys?: ReadonlyArray<string | null | undefined>;
  destination?: LogDestination;
}): Logger {
  const rule = new Redaction({ fields: options.redact, keys: options.keys });
  return pino(
    {
      level: options.level,
      base: { service: 'logprobe' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: redactPaths(options.redact), censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
      ...(rule.keys.length > 0 ? { hooks: { streamWrite: (line: string) => scrubLine(line, rule, rule.keys) } } : {}),
    },
    options.destination ?? stdoutDestination(),
  );
}

export type { Logger };

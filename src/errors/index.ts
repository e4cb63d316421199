import createError from '@fastify/error';

/**
 * Every error logprobe shows a user, in one place: the ones its commands end with (a code, a
 * one-line message, an exit code) and the ones its proxy answers clients with (a code, a message
 * template, an HTTP status, sent in the OpenAI envelope by src/proxy/errors.ts). Commands throw
 * these; src/cli/main.ts prints the message and returns the exit code, once, for all of them.
 * Anything else that reaches main is a bug and keeps its stack trace.
 */

// ------------------------------------------------------------------ command errors

/** The codes of command errors and what each means; the exit code comes from here. */
export const COMMAND_ERRORS = {
  /** A missing, unknown or malformed argument or flag. */
  LOGPROBE_USAGE: { exitCode: 2 },
  /** An invalid configuration (a file, a key, an environment variable). */
  LOGPROBE_CONFIG: { exitCode: 2 },
  /** An input that cannot be read at all. */
  LOGPROBE_UNREADABLE_FILE: { exitCode: 2 },
  /** An output that cannot be written (checked before any work is done). */
  LOGPROBE_UNWRITABLE_FILE: { exitCode: 2 },
  /** Inputs that hold nothing to work on (no record, no replayable line, no logprobs). */
  LOGPROBE_NO_INPUT: { exitCode: 2 },
  /** `probe URL`: a URL that answers nothing (no HTTP answer at all). */
  LOGPROBE_UNREACHABLE: { exitCode: 2 },
  /** `probe URL`: a URL that answers 401/403 (it refuses the key sent, or wants one). */
  LOGPROBE_KEY_REJECTED: { exitCode: 2 },
  /** A port that cannot be listened on. */
  LOGPROBE_LISTEN: { exitCode: 2 },
  /** `demo`/`engine` without the test engines (the published package, the Docker image). */
  LOGPROBE_ENGINES_MISSING: { exitCode: 2 },
  /** `demo --engine llama` where llama.cpp cannot run: the environment, not the arguments. */
  LOGPROBE_ENGINES_UNAVAILABLE: { exitCode: 1 },
} as const satisfies Record<string, { exitCode: number }>;

export type CommandErrorCode = keyof typeof COMMAND_ERRORS;

/** A user-facing command error: printed as `logprobe: <message>`, never with a stack trace. */
export class LogprobeError extends Error {
  override readonly name = 'LogprobeError';
  readonly exitCode: number;
  constructor(
    readonly code: CommandErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.exitCode = COMMAND_ERRORS[code].exitCode;
  }
}

/** A bad argument: `--flag: what is wrong` (or a whole sentence when no flag is to blame). */
export function usageError(message: string): LogprobeError {
  return new LogprobeError('LOGPROBE_USAGE', message);
}

/** An invalid configuration, each issue naming its key path (`candidate.url: expected …`). */
export class ConfigError extends LogprobeError {
  constructor(
    readonly issues: string[],
    source?: string,
  ) {
    super('LOGPROBE_CONFIG', `${source ? `${source}: ` : ''}invalid configuration: ${issues.join('; ')}`);
  }
}

/**
 * Why a file operation failed, in a few words, for `FILE: reason` messages. One mapping for
 * every command: reading (an input) and writing (an output) differ only for ENOENT.
 */
export function errnoReason(err: unknown, mode: 'read' | 'write'): string {
  const code = (err as { code?: string } | null)?.code;
  switch (code) {
    case 'ENOENT':
      return mode === 'read' ? 'no such file' : 'no such directory';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'EISDIR':
      return 'is a directory';
    // mkdir -p answers EEXIST when a part of the path is a file.
    case 'ENOTDIR':
    case 'EEXIST':
      return 'a part of the path is not a directory';
    case 'EROFS':
      return 'read-only file system';
    case 'ENOSPC':
      return 'no space left on device';
    // What a file that opens for writing but takes no bytes answers (/proc/version).
    case 'EIO':
      return 'input/output error';
    default:
      return (err as Error | null)?.message ?? String(err);
  }
}

/** An input that cannot be read: `FILE: reason`. */
export function unreadableFile(file: string, reason: string, cause?: unknown): LogprobeError {
  return new LogprobeError('LOGPROBE_UNREADABLE_FILE', `${file}: ${reason}`, { cause });
}

/** An output that cannot be written: `FILE: reason`. */
export function unwritableFile(file: string, err: unknown): LogprobeError {
  return new LogprobeError('LOGPROBE_UNWRITABLE_FILE', `${file}: ${errnoReason(err, 'write')}`, { cause: err });
}

/** Inputs with nothing to work on. */
export function noInput(message: string): LogprobeError {
  return new LogprobeError('LOGPROBE_NO_INPUT', message);
}

// ------------------------------------------------------------------ proxy errors (HTTP)

/**
 * Errors the proxy answers clients with itself, in the OpenAI error envelope
 * `{error: {message, type, param, code}}` (src/proxy/errors.ts), so an OpenAI SDK parses them
 * like the upstream's own. Parser errors of a request head (400/408/431/501) are answered
 * by src/proxy/app.ts from node:http's codes.
 */
export const BadGatewayError = createError<'LOGPROBE_BAD_GATEWAY', 502, [string]>(
  'LOGPROBE_BAD_GATEWAY',
  'upstream unreachable: %s',
  502,
);
export const GatewayTimeoutError = createError<'LOGPROBE_GATEWAY_TIMEOUT', 504, [string]>(
  'LOGPROBE_GATEWAY_TIMEOUT',
  'upstream timed out: %s',
  504,
);
export const PayloadTooLargeError = createError<'LOGPROBE_PAYLOAD_TOO_LARGE', 413, [number]>(
  'LOGPROBE_PAYLOAD_TOO_LARGE',
  'request body exceeds the limit of %d MB (limits.bodyMB)',
  413,
);
/** A request body with no byte for `limits.bodyTimeoutMs` (nginx's `client_body_timeout`). */
export const RequestBodyTimeoutError = createError<'LOGPROBE_BODY_TIMEOUT', 408, [number]>(
  'LOGPROBE_BODY_TIMEOUT',
  'no request body bytes received for %d ms (limits.bodyTimeoutMs)',
  408,
);
/** A `Transfer-Encoding` other than exactly `chunked` (nginx answers 501 too). */
export const UnsupportedTransferEncodingError = createError<'LOGPROBE_UNSUPPORTED_TRANSFER_ENCODING', 501, []>(
  'LOGPROBE_UNSUPPORTED_TRANSFER_ENCODING',
  'Transfer-Encoding other than chunked is not supported',
  501,
);
/** A request HTTP's rules refuse that llhttp lets through (two `Host` fields, `CONNECT`). */
export const BadRequestError = createError<'LOGPROBE_BAD_REQUEST', 400, [string]>('LOGPROBE_BAD_REQUEST', '%s', 400);
export const UpstreamOverflowError = createError<'LOGPROBE_UPSTREAM_OVERFLOW', 503, [string]>(
  'LOGPROBE_UPSTREAM_OVERFLOW',
  'the candidate is at its configured limit: %s',
  503,
);

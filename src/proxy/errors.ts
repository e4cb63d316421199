import { BadGatewayError, GatewayTimeoutError } from '../errors/index.js';

/** The OpenAI error envelope. */
export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | number | null };
}

const TYPE_BY_STATUS: Record<number, string> = {
  400: 'invalid_request_error',
  404: 'not_found_error',
  413: 'invalid_request_error',
  502: 'upstream_error',
  503: 'upstream_error',
  504: 'upstream_error',
};

/** Builds the envelope for a status, message and machine-readable code. */
export function openAIError(
  status: number,
  message: string,
  code: string | null,
  param: string | null = null,
): OpenAIErrorBody {
  return {
    error: {
      message,
      type: TYPE_BY_STATUS[status] ?? (status >= 500 ? 'server_error' : 'invalid_request_error'),
      param,
      code,
    },
  };
}

/** An upstream transport failure, mapped once from undici's `err.code` (the cause is kept). */
export function mapUpstreamError(err: unknown, upstream: string): Error & { statusCode: number; code: string } {
  const code = (err as { code?: string } | null)?.code ?? '';
  let mapped: Error & { statusCode: number; code: string };
  switch (code) {
    case 'UND_ERR_CONNECT_TIMEOUT':
      mapped = new GatewayTimeoutError(`connecting to ${upstream}`);
      break;
    case 'UND_ERR_HEADERS_TIMEOUT':
      mapped = new GatewayTimeoutError(`no response headers from ${upstream} in time`);
      break;
    case 'UND_ERR_BODY_TIMEOUT':
      mapped = new GatewayTimeoutError(`${upstream} stopped sending the body`);
      break;
    case 'ECONNREFUSED':
      mapped = new BadGatewayError(`connection refused by ${upstream}`);
      break;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      mapped = new BadGatewayError(`cannot resolve ${upstream}`);
      break;
    case 'ECONNRESET':
    case 'UND_ERR_SOCKET':
    case 'EPIPE':
      mapped = new BadGatewayError(`connection reset by ${upstream}`);
      break;
    default:
      mapped = new BadGatewayError(`${upstream}: ${(err as Error)?.message ?? String(err)}`);
  }
  mapped.cause = err;
  return mapped;
}

/**
 * Errors the engine server answers with, in the OpenAI envelope
 * `{"error": {"message", "type", "param", "code"}}` that OpenAI clients parse.
 */

/** An error with an HTTP status, rendered as an OpenAI error envelope. */
export class EngineHttpError extends Error {
  override readonly name = 'EngineHttpError';
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
    readonly type: string = status >= 500 ? 'server_error' : 'invalid_request_error',
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

/** A 400 for a bad request field, naming the field. */
export function badRequest(message: string, param: string | null = null): EngineHttpError {
  return new EngineHttpError(400, message, param);
}

/** The JSON of the OpenAI error envelope. */
export function errorEnvelope(err: EngineHttpError): string {
  return JSON.stringify({ error: { message: err.message, type: err.type, param: err.param, code: err.code } });
}

import type { Dispatcher } from 'undici';
import { readJsonOrText } from './body.js';
import { REDACTED } from '../log/redact.js';

/** A backend as the scoring calls reach it: its pool, base URL, headers (credentials) and timeouts. */
export interface ScoringTarget {
  pool: Dispatcher;
  url: string;
  headers: Readonly<Record<string, string>>;
  timeoutMs: number;
  /** `candidate.model` / `baseline.model`: the backend's served name, put in place of a body's `model`; null or absent: unchanged. */
  model?: string | null;
  /** `candidate.adminApiKey` / `baseline.adminApiKey`: sent instead of the API key to the cache flush (SGLang's `--admin-api-key`). */
  adminApiKey?: string | null;
  /**
   * The credential values this backend is sent (src/log/redact.ts `Redaction.secrets`): an
   * error message it answers is scrubbed of them before it is cut to one line, so that no part
   * of one survives the cut.
   */
  secrets?: readonly string[];
}

/** An engine answered something the profile cannot use: the pair is `failed`, with this message. */
export class ScoringError extends Error {
  override readonly name = 'ScoringError';
  constructor(
    message: string,
    /** The engine's answer, when it refused the request (a logprobs cap is read from it). */
    readonly answer?: { status: number; body: unknown },
  ) {
    super(message);
  }
}

/** An engine does not offer what the profile needs: the pair is `unsupported`, with this message. */
export class UnsupportedError extends Error {
  override readonly name = 'UnsupportedError';
}

/** The JSON a GET or POST answered, with its status and the headers that identify the server. */
export interface JsonAnswer {
  status: number;
  body: unknown;
  server: string | null;
}

const LIMIT = 64 * 1024 * 1024;

/** Sends one request to a backend's path (under the URL's own path prefix) and reads a JSON answer. */
export async function requestJson(
  target: ScoringTarget,
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
  timeoutMs = target.timeoutMs,
): Promise<JsonAnswer> {
  const base = new URL(target.url);
  // A body that names a model names this backend's (served names may differ between the two).
  const named =
    target.model && typeof body === 'object' && body !== null && !Array.isArray(body) && 'model' in body
      ? { ...body, model: target.model }
      : body;
  const payload = named === undefined ? undefined : JSON.stringify(named);
  const res = await target.pool.request({
    origin: base.origin,
    path: base.pathname.replace(/\/$/, '') + path,
    method,
    headers: {
      ...target.headers,
      host: base.host,
      accept: 'application/json',
      ...(payload !== undefined
        ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) }
        : {}),
    },
    body: payload,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  // Not JSON (a plain-text answer such as SGLang's /flush_cache): kept as text.
  const parsed = await readJsonOrText(
    res.body,
    LIMIT,
    () => new ScoringError(`${method} ${path}: answer over ${LIMIT} bytes`),
  );
  const server = res.headers.server;
  return { status: res.statusCode, body: parsed, server: typeof server === 'string' ? server : null };
}

/** POSTs and insists on a 2xx JSON object; anything else is a {@link ScoringError} naming the path and the engine's message. */
export async function postOk(target: ScoringTarget, path: string, body: unknown): Promise<Record<string, unknown>> {
  const a = await requestJson(target, 'POST', path, body);
  if (a.status === 404 || a.status === 405 || a.status === 501)
    throw new UnsupportedError(`${path} answered ${a.status}${errorText(a.body, target.secrets)}`);
  if (a.status < 200 || a.status >= 300)
    throw new ScoringError(`${path} answered ${a.status}${errorText(a.body, target.secrets)}`, {
      status: a.status,
      body: a.body,
    });
  if (typeof a.body !== 'object' || a.body === null || Array.isArray(a.body))
    throw new ScoringError(`${path} answered a body that is not a JSON object`);
  return a.body as Record<string, unknown>;
}

/** `: message` of an OpenAI/vLLM/SGLang/llama.cpp error body, for one-line reasons, scrubbed of `secrets` before the cut. */
function errorText(body: unknown, secrets: readonly string[] = []): string {
  const cut = (s: string) => {
    let out = s;
    for (const secret of secrets) if (out.includes(secret)) out = out.split(secret).join(REDACTED);
    return out.slice(0, 200);
  };
  if (typeof body === 'string') return body.trim() === '' ? '' : `: ${cut(body.trim())}`;
  if (typeof body !== 'object' || body === null) return '';
  const b = body as { error?: unknown; message?: unknown; detail?: unknown };
  const e = b.error;
  const msg =
    typeof e === 'object' && e !== null
      ? (e as { message?: unknown }).message
      : typeof e === 'string'
        ? e
        : (b.message ?? b.detail);
  return typeof msg === 'string' ? `: ${cut(msg)}` : '';
}

/** A backend's answer as far as a failure reason needs it (a mirrored copy, a captured side, a probe's request). */
export interface FailedAnswer {
  status: number;
  body: unknown;
  error?: string | null;
}

const REASON_CHARS = 160;
/** A reason cut to one short line. */
export const clip = (s: string): string => (s.length > REASON_CHARS ? `${s.slice(0, REASON_CHARS - 1)}…` : s);

/**
 * Why a backend's answer failed, as a gate or a report says it: the transport error without
 * undici's repetition (`ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:39999` → `ECONNREFUSED
 * 127.0.0.1:39999`), or the HTTP status with the error envelope's message.
 */
export function failureReason(s: FailedAnswer): string {
  if (s.error !== undefined && s.error !== null) {
    const m = /^([A-Z][A-Z0-9_]+): (?:connect |getaddrinfo |read |write )?\1 ?(.*)$/.exec(s.error);
    return clip(m ? `${m[1]}${m[2] ? ` ${m[2]}` : ''}` : s.error);
  }
  const body = s.body as { error?: { message?: unknown } | string; message?: unknown } | null;
  const message =
    typeof body === 'string'
      ? body
      : typeof body?.error === 'string'
        ? body.error
        : (body?.error?.message ?? body?.message);
  return clip(
    `HTTP ${s.status}${typeof message === 'string' && message.trim() ? `: ${message.trim().split('\n')[0]}` : ''}`,
  );
}

/**
 * The credential a backend's requests carry, as the configuration calls it (`baseline.apiKey`),
 * and whether one was sent at all; a refusal (401/403) is named by it.
 */
export interface KeyName {
  name: string;
  sent: boolean;
}

/** Whether a status is a refusal of the credentials (401 Unauthorized, 403 Forbidden). */
export const refusesKey = (status: number): boolean => status === 401 || status === 403;

/**
 * A 401/403 named by the key it refused (`rejected the API key (baseline.apiKey)`, or `requires
 * an API key: none was sent (…)`), followed by the answer's own reason; null for any other answer.
 */
export function keyRefusal(s: FailedAnswer, key: KeyName): string | null {
  if ((s.error !== undefined && s.error !== null) || !refusesKey(s.status)) return null;
  return `${refusedKey(key)}: ${failureReason(s)}`;
}

/** What a 401/403 says of the key: `rejected the API key (baseline.apiKey)`. */
export function refusedKey(key: KeyName): string {
  return key.sent ? `rejected the API key (${key.name})` : `requires an API key: none was sent (${key.name})`;
}

/**
 * The key a backend's mirrored copies carry: the candidate gets each client's own (forwarded);
 * the baseline `baseline.apiKey`, else the client's with `baseline.forwardAuth`, else none.
 */
export function copyKey(
  backend: 'candidate' | 'baseline',
  config: { baseline: { apiKey: string | null; forwardAuth: boolean } },
): KeyName {
  if (backend === 'candidate') return { name: "the client's own, forwarded", sent: true };
  if (config.baseline.apiKey) return { name: 'baseline.apiKey', sent: true };
  if (config.baseline.forwardAuth) return { name: "the client's own, baseline.forwardAuth", sent: true };
  return { name: 'set baseline.apiKey', sent: false };
}

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

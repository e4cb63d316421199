import { isIP } from 'node:net';

/**
 * The checks of values the config schema and the CLI's flags share, so a URL or a `none` reads
 * the same in `candidate.url`, `LOGPROBE_BASELINE_URL` and `--baseline`.
 */

/** An absolute http(s) URL. */
export function isHttpUrl(s: string): boolean {
  try {
    const u = new URL(s);
    return u.protocol === 'http:' || u.protocol === 'https:';
  } catch {
    return false;
  }
}

/**
 * Why `s` is not an http(s) URL, in words for after "expected an http(s) URL": with `http://` in
 * front when that would make one (`localhost:8000` parses as the scheme `localhost:`, so the
 * scheme's absence is guessed from the text, not from the parser).
 */
export function httpUrlHint(s: string): string {
  const t = s.trim();
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(t) && isHttpUrl(`http://${t}`)) return `: did you mean http://${t}?`;
  return '';
}

/**
 * A backend's base URL as logprobe uses it: without a trailing `/v1` (the OpenAI clients'
 * `base_url` convention). logprobe forwards the client's own path (`/v1/chat/completions`) and
 * calls the engine's native routes (`/tokenize`, `/generate`, `/completion`) under the URL's path,
 * so a `/v1` there would make every call `/v1/v1/…` (a 404). Any other path prefix is kept.
 */
export function backendBase(url: string): string {
  if (!URL.canParse(url)) return url;
  const u = new URL(url);
  const path = u.pathname.replace(/\/+$/, '');
  if (!/\/v1$/i.test(path)) return url;
  u.pathname = path.slice(0, -3) || '/';
  const out = u.toString();
  // No trailing slash on a bare origin, as URLs are written in the config.
  return u.pathname === '/' && !u.search && !u.hash ? out.replace(/\/$/, '') : out;
}

/** `none` or `null` (any case, blanks around it): no baseline. */
export function isNone(s: string): boolean {
  return /^(none|null)$/i.test(s.trim());
}

/** True for a bind address only this machine can reach (127.0.0.0/8, ::1, localhost). */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || /^::ffff:127\./.test(h);
  return false;
}

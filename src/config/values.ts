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

/** `none` or `null` (any case, blanks around it): no baseline. */
export function isNone(s: string): boolean {
  return /^(none|null)$/i.test(s.trim());
}

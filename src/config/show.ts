import { Document, isMap, isPair, isScalar, isSeq, visit, type Node, type Pair } from 'yaml';
import type { ResolvedConfig } from './load.js';

/** What `[redacted]` replaces. */
export const REDACTED = '[redacted]';

/** Alertmanager's alerts endpoints: a webhook URL with one of these paths is shown whole. */
const ALERTMANAGER_PATHS = new Set(['/api/v2/alerts', '/api/v1/alerts']);

/** Keys whose value is a credential: shown as {@link REDACTED} when set. */
const SECRET_KEYS = new Set([
  'baseline.apiKey',
  'candidate.adminApiKey',
  'baseline.adminApiKey',
  'admin.auth.bearerToken',
]);

/**
 * A config value as `serve --check-config` may print it: a credential never (the API keys, the
 * admin bearer token, the admin users' password hashes: a hash can be attacked offline); a webhook
 * URL without its credentials, query or path (webhook services put their token there), except
 * Alertmanager's own path.
 */
export function redactValue(path: readonly string[], value: unknown): unknown {
  const key = path.join('.');
  if (SECRET_KEYS.has(key)) return value === null ? null : REDACTED;
  if (path.length === 4 && key.startsWith('admin.auth.basicAuthUsers.')) return REDACTED;
  if (key === 'alert.webhookUrl' && typeof value === 'string' && URL.canParse(value)) {
    const u = new URL(value);
    const auth = u.username !== '' || u.password !== '' ? `${REDACTED}@` : '';
    const path = u.pathname === '/' || ALERTMANAGER_PATHS.has(u.pathname) ? u.pathname : `/${REDACTED}`;
    return `${u.protocol}//${auth}${u.host}${path}${u.search !== '' ? `?${REDACTED}` : ''}`;
  }
  return value;
}

function redactTree(value: unknown, path: string[] = []): unknown {
  const v = redactValue(path, value);
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return v;
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, redactTree(x, [...path, k])]));
}

/**
 * The effective config as YAML, secrets replaced by `[redacted]`, each value followed by a
 * comment saying where it came from (`# default`, `# file`, `# file ${VAR}`, `# env LOGPROBE_X`,
 * `# --mode`). Lists and empty mappings are printed on one line, so that each has one origin.
 */
export function renderConfigYaml(resolved: ResolvedConfig, header: readonly string[] = []): string {
  const doc = new Document(redactTree(resolved.config));
  visit(doc, {
    Pair(_, pair: Pair, ancestors) {
      const value = pair.value as Node | null;
      if (!value || (isMap(value) && value.items.length > 0)) return;
      if (isSeq(value) || isMap(value)) value.flow = true;
      const keyOf = (p: Pair) => String(isScalar(p.key) ? p.key.value : p.key);
      const path = [...ancestors.filter(isPair).map(keyOf), keyOf(pair)];
      value.comment = ` ${resolved.origin(path)}`;
      // A one-line list or mapping is complete: nothing inside it has an origin of its own.
      return isScalar(value) ? undefined : visit.SKIP;
    },
  });
  doc.commentBefore = header.map((l) => ` ${l}`).join('\n') || null;
  return doc.toString({ lineWidth: 0 });
}

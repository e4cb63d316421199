/**
 * Bounded values for the `route` label: the OpenAI-compatible paths users send, anything else
 * is `other` (a path in a label would make the series count unbounded).
 */
export const KNOWN_ROUTES = ['/v1/completions', '/v1/chat/completions', '/v1/models', '/v1/embeddings', '/v1/responses', '/health'] as const;

const known = new Set<string>(KNOWN_ROUTES);

/** The `route` label of a request URL (query string ignored). */
export function routeLabel(url: string): string {
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  return known.has(path) ? path : 'other';
}

/** The path of a request URL without its query string. */
export function pathOf(url: string): string {
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

import { createHash } from 'node:crypto';

/**
 * What a capture must never hold: credentials (by field name, wherever they appear, and by value,
 * wherever a known secret turns up) and, with `capture.includePrompts: false`, the prompts.
 */

/** Field names that carry credentials, compared case-insensitively, in headers and bodies alike. */
export const SECRET_FIELDS: readonly string[] = ['authorization', 'proxy-authorization', 'x-api-key', 'api-key', 'api_key', 'apikey', 'cookie', 'set-cookie'];

/** Client headers a capture may keep: they say which client sent the request, nothing more. */
export const HARMLESS_HEADERS: readonly string[] = ['user-agent', 'content-type', 'x-request-id'];

/** What replaces a secret. */
export const REDACTED = '[redacted]';

/**
 * Secrets shorter than this are not searched for inside other strings: a cookie such as
 * `theme=dark` would otherwise blank out a generated token `dark` and change the comparison that
 * `analyze` re-runs. Credential headers themselves are never written, whatever their length.
 */
const MIN_SECRET_LENGTH = 8;

/**
 * The secret values a client sent (full header values, the token after `Bearer`/`Basic`, each
 * cookie's value) plus configured keys (`baseline.apiKey`), longest first so that a longer
 * secret is replaced before a shorter one it contains.
 */
export function secretValues(headers: Readonly<Record<string, string | string[] | undefined>>, extra: ReadonlyArray<string | null | undefined> = []): string[] {
  const found = new Set<string>();
  const add = (s: string | null | undefined) => {
    const v = s?.trim();
    if (v && v.length >= MIN_SECRET_LENGTH) found.add(v);
  };
  const secretNames = new Set(SECRET_FIELDS);
  for (const [name, raw] of Object.entries(headers)) {
    if (raw === undefined || !secretNames.has(name.toLowerCase())) continue;
    for (const value of Array.isArray(raw) ? raw : [raw]) {
      add(value);
      const scheme = /^\s*(bearer|basic|token)\s+(.+)$/i.exec(value);
      if (scheme) add(scheme[2]);
      if (name.toLowerCase().endsWith('cookie')) {
        for (const pair of value.split(';')) {
          const eq = pair.indexOf('=');
          add(eq >= 0 ? pair.slice(eq + 1).split(';')[0] : pair);
        }
      }
    }
  }
  for (const e of extra) add(e);
  return [...found].sort((a, b) => b.length - a.length);
}

/**
 * A copy of `value` with every occurrence of a secret inside a string (or an object key) replaced
 * by `[redacted]`, and, unless `byName` is false, every field named like a credential too.
 * Unchanged subtrees are returned as they are, so a clean 50 KB body costs one walk and no copy.
 *
 * Response bodies are scrubbed with `byName: false`: the keys of a completions `top_logprobs`
 * dict are generated tokens, and a token spelled `cookie` must keep its logprob.
 */
export function scrub(value: unknown, secrets: readonly string[], options: { extraFields?: readonly string[]; byName?: boolean } = {}): unknown {
  const names = new Set(options.byName === false ? [] : [...SECRET_FIELDS, ...(options.extraFields ?? []).map((f) => f.toLowerCase())]);
  const scrubString = (s: string): string => {
    let out = s;
    for (const secret of secrets) if (out.includes(secret)) out = out.split(secret).join(REDACTED);
    return out;
  };
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return secrets.length > 0 ? scrubString(v) : v;
    if (v === null || typeof v !== 'object') return v;
    if (Array.isArray(v)) {
      let copy: unknown[] | null = null;
      for (let i = 0; i < v.length; i++) {
        const w = walk(v[i]);
        if (w !== v[i]) (copy ??= v.slice())[i] = w;
      }
      return copy ?? v;
    }
    let copy: Record<string, unknown> | null = null;
    const src = v as Record<string, unknown>;
    for (const key of Object.keys(src)) {
      const cleanKey = secrets.length > 0 ? scrubString(key) : key;
      const w = names.has(key.toLowerCase()) && src[key] !== null && src[key] !== undefined ? REDACTED : walk(src[key]);
      if (w !== src[key] || cleanKey !== key) {
        copy ??= { ...src };
        if (cleanKey !== key) delete copy[key];
        copy[cleanKey] = w;
      }
    }
    return copy ?? v;
  };
  return walk(value);
}

/** `sha256:<hex>` of a string's UTF-8 bytes, or of the JSON text of anything else. */
export function promptHash(value: unknown): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return `sha256:${createHash('sha256')
    .update(text ?? '', 'utf8')
    .digest('hex')}`;
}

/** Request fields that carry the prompt. */
const PROMPT_FIELDS = ['prompt', 'messages', 'suffix', 'input'];
/** Response fields that echo the prompt back (vLLM's prompt logprobs and ids). */
const ECHO_FIELDS = ['prompt_logprobs', 'prompt_token_ids'];

/** A copy of a request body with its prompt fields replaced by their {@link promptHash}. */
export function hashPrompts(body: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body };
  for (const f of PROMPT_FIELDS) if (out[f] !== undefined) out[f] = promptHash(out[f]);
  return out;
}

/** A copy of a response body without the fields that echo the prompt (hashed like the prompt). */
export function hashEchoedPrompts(body: unknown): unknown {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return body;
  const src = body as Record<string, unknown>;
  if (!ECHO_FIELDS.some((f) => src[f] !== undefined)) return body;
  const out: Record<string, unknown> = { ...src };
  for (const f of ECHO_FIELDS) if (out[f] !== undefined) out[f] = promptHash(out[f]);
  return out;
}

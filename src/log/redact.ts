import { createHash } from 'node:crypto';

/**
 * What a capture, a golden file or a log line must never hold: credentials. One rule, used by the
 * capture writer (src/capture/record.ts), golden records (src/replay/golden.ts), the logger
 * (src/log/logger.ts) and the mirror's per-request log lines:
 *
 * - **By name.** A header or a JSON field named like a credential ({@link CREDENTIAL_HEADERS},
 *   `api_key`/`apiKey`, and every `log.redact` name), compared case-insensitively, is removed
 *   (headers) or its value replaced by `[redacted]` (bodies), wherever it appears.
 * - **By value.** The value of each such header of the request being captured (the whole value,
 *   the token after `Bearer`/`Basic`/`Token`, each cookie's value) and the configured keys
 *   (`baseline.apiKey`) are replaced by `[redacted]` inside every string written — the request,
 *   both answers (an upstream's error page or debug echo that quotes the request headers), scoring
 *   reasons, repeat probes — when they are {@link MIN_SECRET_LENGTH} characters or longer.
 */

/** The request headers the docs call credentials (lower case): never written, their values scrubbed everywhere. */
export const CREDENTIAL_HEADERS: readonly string[] = [
  'authorization',
  'proxy-authorization',
  'cookie',
  'set-cookie',
  'x-api-key',
  'api-key',
  'x-goog-api-key',
  'openai-organization',
  'openai-project',
];

/** Field names that carry credentials, compared case-insensitively, in headers and bodies alike (`apiKey` as the config spells it). */
export const SECRET_FIELDS: readonly string[] = [...CREDENTIAL_HEADERS, 'api_key', 'apiKey', 'adminApiKey'];

/** Client headers a capture may keep: they say which client sent the request, nothing more. */
export const HARMLESS_HEADERS: readonly string[] = ['user-agent', 'content-type', 'x-request-id'];

/** What replaces a secret. */
export const REDACTED = '[redacted]';

/**
 * Secrets shorter than this are not searched for inside other strings: a cookie such as
 * `theme=dark` would otherwise blank out a generated token `dark` and change the comparison that
 * `analyze` re-runs. Fields named like credentials are redacted by name whatever their length.
 */
export const MIN_SECRET_LENGTH = 8;

type Headers = Readonly<Record<string, string | string[] | undefined>>;

/** The text a string has inside a JSON document (without the quotes). */
const jsonText = (s: string): string => JSON.stringify(s).slice(1, -1);

/** What the rule is built from: the extra names (`log.redact`) and the configured keys. */
export interface RedactionOptions {
  /** Header or field names redacted on top of {@link SECRET_FIELDS} (`log.redact`). */
  fields?: readonly string[];
  /** Configured secrets scrubbed wherever they appear (`baseline.apiKey`); null and short ones are ignored. */
  keys?: ReadonlyArray<string | null | undefined>;
}

/** The rule of a process: {@link SECRET_FIELDS} plus `log.redact` by name, `baseline.apiKey` by value. */
export class Redaction {
  /** Every name redacted, lower case. */
  readonly names: ReadonlySet<string>;
  /** The names as configured (the logger's pino paths are case-sensitive). */
  readonly fields: readonly string[];
  /** The configured keys long enough to be searched for, longest first. */
  readonly keys: readonly string[];
  /** `"name":` of any redacted name in JSON text, case-insensitive. */
  private readonly keyPattern: RegExp;

  constructor(options: RedactionOptions = {}) {
    this.fields = [...new Set([...SECRET_FIELDS, ...(options.fields ?? [])])];
    this.names = new Set(this.fields.map((f) => f.toLowerCase()));
    this.keys = longestFirst(options.keys ?? []);
    const alternatives = [...this.names].map((n) => jsonText(n).replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
    this.keyPattern = new RegExp(`"(?:${alternatives.join('|')})":`, 'i');
  }

  /** True for a header or field name the rule removes. */
  isSecretName(name: string): boolean {
    return this.names.has(name.toLowerCase());
  }

  /**
   * The secret values of a request with these headers — each redacted header's full value, the
   * token after `Bearer`/`Basic`/`Token`, each cookie's value — plus the configured keys, at least
   * {@link MIN_SECRET_LENGTH} characters, longest first so that a longer secret is replaced before
   * a shorter one it contains.
   */
  secrets(headers: Headers): string[] {
    const found: string[] = [...this.keys];
    for (const [name, raw] of Object.entries(headers)) {
      if (raw === undefined) continue;
      const lower = name.toLowerCase();
      if (!this.names.has(lower)) continue;
      for (const value of Array.isArray(raw) ? raw : [raw]) {
        found.push(value);
        const scheme = /^\s*(bearer|basic|token)\s+(.+)$/i.exec(value);
        if (scheme) found.push(scheme[2]!);
        if (lower === 'cookie') for (const pair of value.split(';')) found.push(cookieValue(pair));
        // A Set-Cookie's attributes (Path, Expires) are not secret: only its first pair is.
        if (lower === 'set-cookie') found.push(cookieValue(value.split(';')[0]!));
      }
    }
    return longestFirst(found);
  }

  /**
   * A copy of `value` with every occurrence of a secret inside a string (or an object key)
   * replaced by `[redacted]`, and, unless `byName` is false, the value of every field named like
   * a credential too — unless it is a number or a boolean: the keys of a completions
   * `top_logprobs` dict are generated tokens, and a token spelled `cookie` must keep its logprob.
   * Unchanged subtrees are returned as they are, so a clean 50 KB body costs one walk and no copy.
   */
  scrub(value: unknown, secrets: readonly string[], options: { byName?: boolean } = {}): unknown {
    const byName = options.byName !== false;
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
        const x = src[key];
        const named =
          byName &&
          x !== null &&
          x !== undefined &&
          typeof x !== 'number' &&
          typeof x !== 'boolean' &&
          this.names.has(key.toLowerCase());
        const w = named ? REDACTED : walk(x);
        if (w !== x || cleanKey !== key) {
          copy ??= { ...src };
          if (cleanKey !== key) delete copy[key];
          copy[cleanKey] = w;
        }
      }
      return copy ?? v;
    };
    return walk(value);
  }

  /** A copy of a header map without the redacted names, the values of the others scrubbed. */
  headers(headers: Readonly<Record<string, string>>, secrets: readonly string[]): Record<string, string> {
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(headers))
      if (!this.names.has(k.toLowerCase())) out[k] = this.scrub(v, secrets) as string;
    return out;
  }

  /**
   * True when JSON text may hold something to redact: one of `secrets` (as JSON escapes it) or a
   * key named like a credential. False means {@link scrub} would return the document unchanged.
   */
  touches(json: string, secrets: readonly string[]): boolean {
    return this.keyPattern.test(json) || secrets.some((s) => json.includes(jsonText(s)));
  }
}

function cookieValue(pair: string): string {
  const eq = pair.indexOf('=');
  return eq >= 0 ? pair.slice(eq + 1) : pair;
}

function longestFirst(values: ReadonlyArray<string | null | undefined>): string[] {
  const found = new Set<string>();
  for (const s of values) {
    const v = s?.trim();
    if (v && v.length >= MIN_SECRET_LENGTH) found.add(v);
  }
  return [...found].sort((a, b) => b.length - a.length);
}

/** The rule of a config: `log.redact` by name, `baseline.apiKey` by value. */
/** The credentials a config holds, scrubbed by value wherever they appear: the baseline's API key, both engines' admin keys, the admin port's bearer token. */
export function configuredKeys(config: {
  baseline: { apiKey: string | null; adminApiKey?: string | null };
  candidate: { adminApiKey?: string | null };
  admin?: { auth?: { bearerToken?: string | null } };
}): Array<string | null> {
  return [
    config.baseline.apiKey,
    config.baseline.adminApiKey ?? null,
    config.candidate.adminApiKey ?? null,
    config.admin?.auth?.bearerToken ?? null,
  ];
}

export function redactionOf(config: {
  log: { redact: readonly string[] };
  baseline: { apiKey: string | null; adminApiKey?: string | null };
  candidate: { adminApiKey?: string | null };
}): Redaction {
  return new Redaction({ fields: config.log.redact, keys: configuredKeys(config) });
}

/** The secret values of a request (see {@link Redaction.secrets}), with `extra` configured keys and `extraNames` redacted headers. */
export function secretValues(
  headers: Headers,
  extra: ReadonlyArray<string | null | undefined> = [],
  extraNames: readonly string[] = [],
): string[] {
  return new Redaction({ fields: extraNames, keys: extra }).secrets(headers);
}

/** {@link Redaction.scrub} with the built-in names plus `extraFields`. */
export function scrub(
  value: unknown,
  secrets: readonly string[],
  options: { extraFields?: readonly string[]; byName?: boolean } = {},
): unknown {
  return new Redaction({ fields: options.extraFields }).scrub(value, secrets, { byName: options.byName });
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

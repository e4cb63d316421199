import type { z } from 'zod';
import { configSchema } from './schema.js';

/**
 * What the config schema (src/config/schema.ts) says about a key, read from the schema itself so
 * that a value from the environment is coerced by its key's type (a numeric API key stays a
 * string) and a typo can be answered with the nearest real key.
 */

/** The primitive kinds of value a key takes: `string` any string, `literal` only some strings (an enum, `auto`). */
export type ValueKind = 'string' | 'literal' | 'number' | 'boolean' | 'null' | 'array' | 'object' | 'other';

type Def = {
  type: string;
  innerType?: z.ZodType;
  in?: z.ZodType;
  out?: z.ZodType;
  options?: z.ZodType[];
  values?: unknown[];
  shape?: Record<string, z.ZodType>;
};

function def(schema: z.ZodType): Def {
  return (schema as unknown as { def: Def }).def;
}

/** The schema without its defaults, nullability and transforms: what the value is checked against. */
function unwrap(schema: z.ZodType): z.ZodType {
  let s = schema;
  for (;;) {
    const d = def(s);
    if (
      (d.type === 'default' ||
        d.type === 'prefault' ||
        d.type === 'optional' ||
        d.type === 'nullable' ||
        d.type === 'readonly' ||
        d.type === 'catch') &&
      d.innerType
    )
      s = d.innerType;
    // z.preprocess(fn, schema) is a pipe from a transform into the schema; s.transform(fn) a pipe from s into one.
    else if (d.type === 'pipe' && d.in && d.out) s = def(d.out).type === 'transform' ? d.in : d.out;
    else return s;
  }
}

/** The schema of the key at `path` (`['baseline', 'apiKey']`), or undefined when there is none. */
export function schemaAt(path: readonly string[], root: z.ZodType = configSchema): z.ZodType | undefined {
  let s: z.ZodType | undefined = root;
  for (const key of path) {
    const d = def(unwrap(s));
    s = d.type === 'object' ? d.shape?.[key] : undefined;
    if (s === undefined) return undefined;
  }
  return s;
}

/** The keys of the mapping at `path` (`[]`: the top level), or [] when it is not one with fixed keys. */
export function keysAt(path: readonly string[]): string[] {
  const s = schemaAt(path);
  if (s === undefined) return [];
  const d = def(unwrap(s));
  return d.type === 'object' && d.shape ? Object.keys(d.shape) : [];
}

/** The kind of value one literal of a `z.literal` schema is. */
function literalKind(v: unknown): ValueKind {
  return v === null
    ? 'null'
    : typeof v === 'string'
      ? 'literal'
      : typeof v === 'number'
        ? 'number'
        : typeof v === 'boolean'
          ? 'boolean'
          : 'other';
}

/** Every kind of value the schema accepts for this key (a union's options, `null` when nullable). */
export function valueKinds(schema: z.ZodType): Set<ValueKind> {
  const kinds = new Set<ValueKind>();
  const visit = (s: z.ZodType): void => {
    const d = def(s);
    switch (d.type) {
      case 'nullable':
        kinds.add('null');
        if (d.innerType) visit(d.innerType);
        return;
      case 'default':
      case 'prefault':
      case 'optional':
      case 'readonly':
      case 'catch':
        if (d.innerType) visit(d.innerType);
        return;
      case 'pipe':
        if (d.in && d.out) visit(def(d.out).type === 'transform' ? d.in : d.out);
        return;
      case 'union':
        for (const o of d.options ?? []) visit(o);
        return;
      case 'string':
        kinds.add('string');
        return;
      case 'enum':
        kinds.add('literal');
        return;
      case 'literal':
        for (const v of d.values ?? []) kinds.add(literalKind(v));
        return;
      case 'number':
        kinds.add('number');
        return;
      case 'boolean':
        kinds.add('boolean');
        return;
      case 'null':
        kinds.add('null');
        return;
      case 'array':
        kinds.add('array');
        return;
      case 'object':
      case 'record':
        kinds.add('object');
        return;
      default:
        kinds.add('other');
    }
  };
  visit(schema);
  return kinds;
}

/**
 * A string from the environment as the value its key takes: kept as a string when the key takes
 * any string (a path, an API key, a model name, whatever it looks like); a number when the key
 * takes numbers and the text is one (`auto` stays `auto` for `analysis.noiseFloor`); true/false
 * for `1|true|yes|on` / `0|false|no|off` when the key is a boolean. Anything else is passed on
 * unchanged, for the schema to refuse with its own message.
 */
export function coerceForKey(raw: string, path: readonly string[]): unknown {
  const schema = schemaAt(path);
  if (schema === undefined) return raw;
  const kinds = valueKinds(schema);
  if (kinds.has('string')) return raw;
  if (kinds.has('number')) {
    const n = Number(raw);
    if (raw.trim() !== '' && Number.isFinite(n)) return n;
  }
  if (kinds.has('boolean')) {
    if (/^(1|true|yes|on)$/i.test(raw)) return true;
    if (/^(0|false|no|off)$/i.test(raw)) return false;
  }
  return raw;
}

/** Levenshtein distance (insertions, deletions, substitutions), case-sensitive. */
export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++)
      row.push(Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)));
    prev = row;
  }
  return prev[b.length]!;
}

/** A name's words: split at `_` and at camelCase humps, lower-cased. */
function words(s: string): string[] {
  return s
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toLowerCase()
    .split('_')
    .filter(Boolean);
}

/**
 * The candidate nearest to `name` (case-insensitive), when it is near enough to be the one meant:
 * one of them extends the other (`LOGPROBE_CANDIDATE` → `LOGPROBE_CANDIDATE_URL`), has all the
 * other's words (`LOGPROBE_BASELINE_KEY` → `LOGPROBE_BASELINE_API_KEY`), or at most about a third
 * of the longer name differs (`sampleRatio` → `sampleRate`). `strip`: a common prefix to ignore.
 */
export function closest(name: string, candidates: readonly string[], strip = ''): string | undefined {
  const core = (s: string) => (s.toUpperCase().startsWith(strip.toUpperCase()) ? s.slice(strip.length) : s);
  const n = core(name);
  const nw = words(n);
  let best: { c: string; d: number } | undefined;
  for (const c of candidates) {
    const k = core(c);
    const kw = words(k);
    const [a, b] = [n.toLowerCase(), k.toLowerCase()];
    let d = editDistance(a, b);
    if (a.length > 0 && (b.startsWith(a) || a.startsWith(b))) d = Math.min(d, 0.5);
    const [few, many] = nw.length <= kw.length ? [nw, kw] : [kw, nw];
    if (few.length > 0 && few.every((w) => many.includes(w))) d = Math.min(d, 1 + 0.1 * (many.length - few.length));
    if (best === undefined || d < best.d) best = { c, d };
  }
  if (best === undefined) return undefined;
  const limit = Math.max(2, Math.ceil(Math.max(n.length, core(best.c).length) / 3));
  return best.d <= limit ? best.c : undefined;
}

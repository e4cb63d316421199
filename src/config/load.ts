import { readFileSync } from 'node:fs';
import { isPair, isScalar, LineCounter, parseDocument, visit, type Document, type Pair } from 'yaml';
import { configSchema, type Config, type ConfigInput } from './schema.js';
import { closest, coerceForKey, keysAt, schemaAt, valueKinds } from './keys.js';
import { isLoopback, isNone } from './values.js';
import { ConfigError, errnoReason } from '../errors/index.js';

/**
 * Environment overrides, applied after the file. Empty strings count as unset, so that
 * `LOGPROBE_PORT=` in a compose file does not turn into port 0. Each value is coerced by its key's
 * type in the schema (src/config/keys.ts): `LOGPROBE_BASELINE_API_KEY=12345` stays a string.
 */
export const ENV_OVERRIDES: ReadonlyArray<{ name: string; path: readonly string[] }> = [
  { name: 'LOGPROBE_MODE', path: ['mode'] },
  { name: 'LOGPROBE_CANDIDATE_URL', path: ['candidate', 'url'] },
  { name: 'LOGPROBE_BASELINE_URL', path: ['baseline', 'url'] },
  { name: 'LOGPROBE_BASELINE_API_KEY', path: ['baseline', 'apiKey'] },
  { name: 'LOGPROBE_CANDIDATE_ADMIN_API_KEY', path: ['candidate', 'adminApiKey'] },
  { name: 'LOGPROBE_BASELINE_ADMIN_API_KEY', path: ['baseline', 'adminApiKey'] },
  { name: 'LOGPROBE_HOST', path: ['listen', 'host'] },
  { name: 'LOGPROBE_PORT', path: ['listen', 'port'] },
  { name: 'LOGPROBE_ADMIN_HOST', path: ['admin', 'host'] },
  { name: 'LOGPROBE_ADMIN_PORT', path: ['admin', 'port'] },
  { name: 'LOGPROBE_ADMIN_BEARER_TOKEN', path: ['admin', 'auth', 'bearerToken'] },
  { name: 'LOGPROBE_LOG_LEVEL', path: ['log', 'level'] },
  { name: 'LOGPROBE_SAMPLE_RATE', path: ['mirror', 'sampleRate'] },
  { name: 'LOGPROBE_NOISE_FLOOR', path: ['analysis', 'noiseFloor'] },
  { name: 'LOGPROBE_CAPTURE_DIR', path: ['capture', 'dir'] },
  { name: 'LOGPROBE_CAPTURE_ENABLED', path: ['capture', 'enabled'] },
  { name: 'LOGPROBE_ALERT_WEBHOOK_URL', path: ['alert', 'webhookUrl'] },
  { name: 'LOGPROBE_ALERT_GENERATOR_URL', path: ['alert', 'generatorUrl'] },
];
for (const o of ENV_OVERRIDES)
  if (schemaAt(o.path) === undefined) throw new Error(`${o.name}: no config key ${o.path.join('.')}`);

/**
 * `LOGPROBE_*` variables that are not config keys, so that they are not reported as unknown:
 * the engine doubles' model cache (packages/engine), the live page test's screenshot path, and
 * every `LOGPROBE_BENCH_*` variable of bench/.
 */
export const NON_CONFIG_ENV: readonly string[] = ['LOGPROBE_CACHE_DIR', 'LOGPROBE_UI_SCREENSHOT'];
export const NON_CONFIG_ENV_PREFIXES: readonly string[] = ['LOGPROBE_BENCH_'];

/**
 * One line per set `LOGPROBE_*` variable that is neither a config override nor a known other one
 * (a typo must not silently leave the default in force), with the nearest known name.
 */
export function unknownEnvWarnings(env: Env = process.env): string[] {
  const overrides = ENV_OVERRIDES.map((o) => o.name);
  const known = [...overrides, ...NON_CONFIG_ENV];
  const out: string[] = [];
  for (const name of Object.keys(env).sort()) {
    if (
      !name.toUpperCase().startsWith('LOGPROBE_') ||
      known.includes(name) ||
      NON_CONFIG_ENV_PREFIXES.some((p) => name.startsWith(p))
    )
      continue;
    const near = closest(name, overrides, 'LOGPROBE_') ?? closest(name, NON_CONFIG_ENV, 'LOGPROBE_');
    out.push(
      `unknown environment variable ${name}, ignored${near ? `: did you mean ${near}?` : ''} (every LOGPROBE_* variable: config/logprobe.example.yaml)`,
    );
  }
  return out;
}

type Env = Record<string, string | undefined>;

/**
 * Lines about a valid config that is probably not what was meant. candidate.url and baseline.url
 * naming the same server is allowed (an A/A run: what logprobe reports when nothing differs), but
 * it is far more often a copied line, and then every verdict is noise. An admin port bound beyond
 * loopback without admin.auth refuses the live page (src/admin/auth.ts): said at start, not first
 * found by whoever opens /ui.
 */
export function configWarnings(config: Config): string[] {
  const out: string[] = [];
  const same = (a: string, b: string) => {
    const x = new URL(a);
    const y = new URL(b);
    return x.origin === y.origin && x.pathname.replace(/\/+$/, '') === y.pathname.replace(/\/+$/, '');
  };
  if (config.baseline.url !== null && same(config.candidate.url, config.baseline.url))
    out.push(
      `candidate.url and baseline.url are the same server (${new URL(config.candidate.url).origin}): every copy compares it with itself; give baseline.url the reference server, or baseline.url: none for a baseline-free mirror (an A/A run on purpose can ignore this)`,
    );
  const a = config.admin.auth;
  if (
    !isLoopback(config.admin.host) &&
    Object.keys(a.basicAuthUsers).length === 0 &&
    a.bearerToken === null &&
    a.bearerTokenFile === null
  )
    out.push(
      `admin.host ${config.admin.host} without admin.auth: the live page (/ui, /ui/data) answers 403 (docs/operations.md#securing-the-admin-port); /metrics, /healthz and /readyz are open`,
    );
  return out;
}

function setPath(target: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (next === null || typeof next !== 'object' || Array.isArray(next)) {
      node[key] = {};
    }
    node = node[key] as Record<string, unknown>;
  }
  node[path[path.length - 1] as string] = value;
}

function coerceEnv(raw: string, path: readonly string[], name: string): unknown {
  // No baseline: the candidate's repeat probes alone (baseline-free mode).
  if (name === 'LOGPROBE_BASELINE_URL' && isNone(raw)) return null;
  return coerceForKey(raw, path);
}

/**
 * `${VAR}` references are swapped for plain placeholder tokens before YAML parsing, because `{`
 * inside a flow mapping (`baseline: { apiKey: ${KEY} }`, as the docs write it) is YAML syntax;
 * after parsing each placeholder takes its variable's value. A value that is only a reference to
 * an unset or empty variable becomes null.
 */
function protectReferences(text: string): { text: string; names: string[] } {
  const names: string[] = [];
  const out = text.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, name: string) => {
    names.push(name);
    return `__LOGPROBE_ENV_${names.length - 1}__`;
  });
  return { text: out, names };
}

/**
 * Each placeholder takes its variable's value. A value that is only a reference takes its key's
 * type (`port: ${ADMIN_PORT}` is a number, `apiKey: ${KEY}` a string whatever it looks like), or
 * null when the variable is unset or empty; `refs` gets the variable of each such key.
 */
function interpolate(
  value: unknown,
  names: string[],
  env: Env,
  path: string[] = [],
  refs?: Map<string, string>,
): unknown {
  if (typeof value === 'string') {
    const whole = /^__LOGPROBE_ENV_(\d+)__$/.exec(value);
    if (whole) {
      const name = names[Number(whole[1])] as string;
      refs?.set(path.join('.'), name);
      const v = env[name];
      return v === undefined || v === '' ? null : coerceForKey(v, path);
    }
    return value.replace(/__LOGPROBE_ENV_(\d+)__/g, (_, i: string) => env[names[Number(i)] as string] ?? '');
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolate(v, names, env, [...path, String(i)], refs));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, interpolate(v, names, env, [...path, k], refs)]),
    );
  }
  return value;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/**
 * Validates a config object (defaults filled in) and freezes it; throws {@link ConfigError}.
 * `origins` names where a key's value came from when it was not the file (`mirror.sampleRate` →
 * `LOGPROBE_SAMPLE_RATE=5%`), so that the error points at the variable to fix.
 */
export function buildConfig(input: unknown = {}, source?: string, origins?: ReadonlyMap<string, string>): Config {
  const result = configSchema.safeParse(input ?? {});
  if (!result.success) {
    const issues = result.error.issues.map((issue) => {
      const path = issue.path.length > 0 ? issue.path.map(String).join('.') : '(root)';
      if (issue.code === 'unrecognized_keys') {
        return issue.keys
          .map((k) => {
            const near = closest(k, keysAt(issue.path.map(String)));
            const prefix = path === '(root)' ? '' : `${path}.`;
            return `${prefix}${k}: unknown key${near ? ` (did you mean ${prefix}${near}?)` : ''}`;
          })
          .join('; ');
      }
      const from = origins && [...origins].find(([key]) => path === key || path.startsWith(`${key}.`))?.[1];
      return `${path}${from ? ` (from ${from})` : ''}: ${issue.message}`;
    });
    throw new ConfigError(issues, source);
  }
  return deepFreeze(result.data);
}

/**
 * A plain YAML scalar that reads as a number or a boolean (`model: 2024`, `dir: 2024`,
 * `apiKey: 0123`) is kept as its text when its key takes strings: the schema decides, not how the
 * text looks (`1.10` would otherwise become the model `1.1`). Quoted values are strings already.
 */
function keepStringKeysText(doc: Document): void {
  visit(doc, {
    Pair(_, pair: Pair, ancestors) {
      const v = pair.value;
      if (
        !isScalar(v) ||
        v.type !== 'PLAIN' ||
        v.source === undefined ||
        (typeof v.value !== 'number' && typeof v.value !== 'boolean')
      )
        return;
      const keyOf = (p: Pair) => String(isScalar(p.key) ? p.key.value : p.key);
      const schema = schemaAt([...ancestors.filter(isPair).map(keyOf), keyOf(pair)]);
      const kinds = schema ? valueKinds(schema) : undefined;
      if (kinds?.has('string') && !kinds.has(typeof v.value as 'number' | 'boolean')) v.value = v.source;
    },
  });
}

/** Reads and parses a YAML file into a plain object; throws ConfigError naming the file. */
export function readConfigFile(
  file: string,
  env: Env = process.env,
  refs?: Map<string, string>,
): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError([`cannot read config file (${errnoReason(err, 'read')})`], file);
  }
  const protectedText = protectReferences(text);
  const lineCounter = new LineCounter();
  const doc = parseDocument(protectedText.text, { prettyErrors: false, lineCounter });
  if (doc.errors.length > 0) {
    const e = doc.errors[0]!;
    // Where the error is, as the editor counts (1-based); a `${VAR}` before it on its line moves the column.
    const at = e.linePos?.[0] ?? lineCounter.linePos(e.pos[0]);
    const where = at ? ` at line ${at.line}, column ${at.col}` : '';
    throw new ConfigError([`YAML syntax error${where}: ${e.message.split('\n')[0]}`], file);
  }
  keepStringKeysText(doc);
  const parsed: unknown = doc.toJS();
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new ConfigError(['(root): expected a mapping of keys'], file);
  }
  return interpolate(parsed, protectedText.names, env, [], refs) as Record<string, unknown>;
}

/**
 * The keys the `LOGPROBE_*` environment sets, each with its variable as an error should cite it
 * (`LOGPROBE_SAMPLE_RATE=5%`; a key's value is never shown).
 */
export function envOrigins(env: Env = process.env): Map<string, string> {
  const out = new Map<string, string>();
  for (const o of ENV_OVERRIDES) {
    const v = env[o.name];
    if (v === undefined || v === '') continue;
    out.set(o.path.join('.'), /KEY|TOKEN/.test(o.name) ? o.name : `${o.name}=${JSON.stringify(v).slice(1, -1)}`);
  }
  return out;
}

/** Applies the `LOGPROBE_*` environment overrides to a raw config object (mutates a copy). */
export function applyEnv(raw: Record<string, unknown>, env: Env = process.env): Record<string, unknown> {
  const out = structuredClone(raw);
  for (const o of ENV_OVERRIDES) {
    const v = env[o.name];
    if (v === undefined || v === '') continue;
    setPath(out, o.path, coerceEnv(v, o.path, o.name));
  }
  return out;
}

/** A validated config and where each of its values came from. */
export interface ResolvedConfig {
  config: Config;
  /**
   * Where the value at `path` came from: `--mode` (a flag: `overridesFrom`), `env LOGPROBE_X`,
   * `file` (`file ${VAR}` for a value that is only a reference), or `default`.
   */
  origin(path: readonly string[]): string;
}

/** Defaults ← YAML file ← env ← flags, validated and frozen, with each value's origin. */
export function resolveConfig(
  options: { file?: string | undefined; env?: Env; overrides?: ConfigInput; overridesFrom?: string } = {},
): ResolvedConfig {
  const env = options.env ?? process.env;
  const refs = new Map<string, string>();
  const fromFile = options.file ? readConfigFile(options.file, env, refs) : {};
  const merged = applyEnv(fromFile, env);
  if (options.overrides) mergeInto(merged, structuredClone(options.overrides) as Record<string, unknown>);
  const config = buildConfig(merged, options.file, envOrigins(env));
  // A token written in the file is read by whoever reads the file (a ConfigMap, a repository).
  const fileAuth = (fromFile.admin as { auth?: { bearerToken?: unknown } } | undefined)?.auth;
  if (
    fileAuth?.bearerToken !== undefined &&
    fileAuth.bearerToken !== null &&
    !refs.has('admin.auth.bearerToken') &&
    !env.LOGPROBE_ADMIN_BEARER_TOKEN
  )
    throw new ConfigError(
      [
        'admin.auth.bearerToken: not written in the file: put the token in a file (admin.auth.bearerTokenFile) or in LOGPROBE_ADMIN_BEARER_TOKEN (or write ${VAR})',
      ],
      options.file,
    );

  const flagPaths = options.overrides ? leafPaths(options.overrides) : [];
  const envPaths = ENV_OVERRIDES.filter((o) => env[o.name] !== undefined && env[o.name] !== '');
  // As the schema reads it: `baseline: null` is `baseline: { url: null }`.
  const file = fromFile.baseline === null ? { ...fromFile, baseline: { url: null } } : fromFile;
  const covers = (set: readonly string[], path: readonly string[]) =>
    set.length <= path.length && set.every((k, i) => path[i] === k);
  return {
    config,
    origin(path) {
      if (flagPaths.some((f) => covers(f, path))) return options.overridesFrom ?? 'command line';
      const e = envPaths.find((o) => covers(o.path, path));
      if (e) return `env ${e.name}`;
      let node: unknown = file;
      for (const key of path) {
        if (node === null || typeof node !== 'object' || !Object.hasOwn(node, key)) return 'default';
        node = (node as Record<string, unknown>)[key];
      }
      const ref = refs.get(path.join('.'));
      return ref !== undefined ? `file \${${ref}}` : 'file';
    },
  };
}

/** The paths of an object's leaves (scalars, arrays, empty objects). */
function leafPaths(value: unknown, path: string[] = []): string[][] {
  if (value === null || typeof value !== 'object' || Array.isArray(value) || Object.keys(value).length === 0)
    return [path];
  return Object.entries(value).flatMap(([k, v]) => leafPaths(v, [...path, k]));
}

/** Defaults ← YAML file ← env, validated and frozen. */
export function loadConfig(options: { file?: string | undefined; env?: Env; overrides?: ConfigInput } = {}): Config {
  return resolveConfig(options).config;
}

function mergeInto(target: Record<string, unknown>, src: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(src)) {
    const t = target[k];
    if (
      v !== null &&
      typeof v === 'object' &&
      !Array.isArray(v) &&
      t !== null &&
      typeof t === 'object' &&
      !Array.isArray(t)
    ) {
      mergeInto(t as Record<string, unknown>, v as Record<string, unknown>);
    } else {
      target[k] = v;
    }
  }
}

export type { Config, ConfigInput };

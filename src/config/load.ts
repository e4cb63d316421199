import { readFileSync } from 'node:fs';
import { parseDocument } from 'yaml';
import { configSchema, type Config, type ConfigInput } from './schema.js';
import { ConfigError, errnoReason } from '../errors.js';

/**
 * Environment overrides, applied after the file. Empty strings count as unset, so that
 * `LOGPROBE_PORT=` in a compose file does not turn into port 0.
 */
const ENV_OVERRIDES: ReadonlyArray<{ name: string; path: string[]; kind: 'string' | 'number' | 'boolean' }> = [
  { name: 'LOGPROBE_MODE', path: ['mode'], kind: 'string' },
  { name: 'LOGPROBE_CANDIDATE_URL', path: ['candidate', 'url'], kind: 'string' },
  { name: 'LOGPROBE_BASELINE_URL', path: ['baseline', 'url'], kind: 'string' },
  { name: 'LOGPROBE_BASELINE_API_KEY', path: ['baseline', 'apiKey'], kind: 'string' },
  { name: 'LOGPROBE_CANDIDATE_ADMIN_API_KEY', path: ['candidate', 'adminApiKey'], kind: 'string' },
  { name: 'LOGPROBE_BASELINE_ADMIN_API_KEY', path: ['baseline', 'adminApiKey'], kind: 'string' },
  { name: 'LOGPROBE_HOST', path: ['listen', 'host'], kind: 'string' },
  { name: 'LOGPROBE_PORT', path: ['listen', 'port'], kind: 'number' },
  { name: 'LOGPROBE_ADMIN_HOST', path: ['admin', 'host'], kind: 'string' },
  { name: 'LOGPROBE_ADMIN_PORT', path: ['admin', 'port'], kind: 'number' },
  { name: 'LOGPROBE_LOG_LEVEL', path: ['log', 'level'], kind: 'string' },
  { name: 'LOGPROBE_SAMPLE_RATE', path: ['mirror', 'sampleRate'], kind: 'number' },
  { name: 'LOGPROBE_NOISE_FLOOR', path: ['analysis', 'noiseFloor'], kind: 'string' },
  { name: 'LOGPROBE_CAPTURE_DIR', path: ['capture', 'dir'], kind: 'string' },
  { name: 'LOGPROBE_CAPTURE_ENABLED', path: ['capture', 'enabled'], kind: 'boolean' },
  { name: 'LOGPROBE_ALERT_WEBHOOK_URL', path: ['alert', 'webhookUrl'], kind: 'string' },
];

type Env = Record<string, string | undefined>;

function setPath(target: Record<string, unknown>, path: string[], value: unknown): void {
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

function coerceEnv(raw: string, kind: 'string' | 'number' | 'boolean', name?: string): unknown {
  // No baseline: the candidate's repeat probes alone (baseline-free mode).
  if (name === 'LOGPROBE_BASELINE_URL' && /^(none|null)$/i.test(raw.trim())) return null;
  if (kind === 'number') {
    const n = Number(raw);
    return raw.trim() !== '' && Number.isFinite(n) ? n : raw;
  }
  if (kind === 'boolean') {
    if (/^(1|true|yes|on)$/i.test(raw)) return true;
    if (/^(0|false|no|off)$/i.test(raw)) return false;
    return raw;
  }
  // A noise floor is a number or `auto`.
  const n = Number(raw);
  return raw.trim() !== '' && Number.isFinite(n) ? n : raw;
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

function interpolate(value: unknown, names: string[], env: Env): unknown {
  if (typeof value === 'string') {
    const whole = /^__LOGPROBE_ENV_(\d+)__$/.exec(value);
    if (whole) {
      const v = env[names[Number(whole[1])] as string];
      return v === undefined || v === '' ? null : v;
    }
    return value.replace(/__LOGPROBE_ENV_(\d+)__/g, (_, i: string) => env[names[Number(i)] as string] ?? '');
  }
  if (Array.isArray(value)) return value.map((v) => interpolate(v, names, env));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolate(v, names, env)]));
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
        return issue.keys.map((k) => `${path === '(root)' ? '' : `${path}.`}${k}: unknown key`).join('; ');
      }
      const from = origins && [...origins].find(([key]) => path === key || path.startsWith(`${key}.`))?.[1];
      return `${path}${from ? ` (from ${from})` : ''}: ${issue.message}`;
    });
    throw new ConfigError(issues, source);
  }
  return deepFreeze(result.data);
}

/** Reads and parses a YAML file into a plain object; throws ConfigError naming the file. */
export function readConfigFile(file: string, env: Env = process.env): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError([`cannot read config file (${errnoReason(err, 'read')})`], file);
  }
  const protectedText = protectReferences(text);
  const doc = parseDocument(protectedText.text, { prettyErrors: false });
  if (doc.errors.length > 0) {
    const e = doc.errors[0]!;
    const line = e.linePos?.[0]?.line;
    throw new ConfigError([`YAML syntax error${line ? ` at line ${line}` : ''}: ${e.message.split('\n')[0]}`], file);
  }
  const parsed: unknown = doc.toJS();
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new ConfigError(['(root): expected a mapping of keys'], file);
  }
  return interpolate(parsed, protectedText.names, env) as Record<string, unknown>;
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
    out.set(o.path.join('.'), /KEY/.test(o.name) ? o.name : `${o.name}=${JSON.stringify(v).slice(1, -1)}`);
  }
  return out;
}

/** Applies the `LOGPROBE_*` environment overrides to a raw config object (mutates a copy). */
export function applyEnv(raw: Record<string, unknown>, env: Env = process.env): Record<string, unknown> {
  const out = structuredClone(raw);
  for (const o of ENV_OVERRIDES) {
    const v = env[o.name];
    if (v === undefined || v === '') continue;
    setPath(out, o.path, coerceEnv(v, o.kind, o.name));
  }
  return out;
}

/** Defaults ← YAML file ← env, validated and frozen. */
export function loadConfig(options: { file?: string | undefined; env?: Env; overrides?: ConfigInput } = {}): Config {
  const env = options.env ?? process.env;
  const fromFile = options.file ? readConfigFile(options.file, env) : {};
  const merged = applyEnv(fromFile, env);
  if (options.overrides) mergeInto(merged, options.overrides as Record<string, unknown>);
  return buildConfig(merged, options.file, envOrigins(env));
}

function mergeInto(target: Record<string, unknown>, src: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(src)) {
    const t = target[k];
    if (v !== null && typeof v === 'object' && !Array.isArray(v) && t !== null && typeof t === 'object' && !Array.isArray(t)) {
      mergeInto(t as Record<string, unknown>, v as Record<string, unknown>);
    } else {
      target[k] = v;
    }
  }
}

export type { Config, ConfigInput };

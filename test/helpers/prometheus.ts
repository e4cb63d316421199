// A real Prometheus server (Debian's `prometheus` package) for integration tests: started on
// loopback with a generated config and a temporary TSDB, queried through its HTTP API, stopped
// and removed by the caller's `close()`.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { request } from 'undici';
import { startDaemon, type RunningDaemon } from './daemon.js';

export { freePort } from './daemon.js';

export const PROMETHEUS_INSTALL_HINT = 'prometheus not installed: apt-get install -y prometheus';

/** Whether the `prometheus` binary runs. */
export function prometheusPresent(): boolean {
  const r = spawnSync('prometheus', ['--version'], { encoding: 'utf8' });
  return r.error === undefined && r.status === 0;
}

/** Skips locally without prometheus; in CI (.ci/run installs it) its absence is a failure. */
export function needPrometheus(t: TestContext): boolean {
  if (prometheusPresent()) return true;
  if (process.env.CI) assert.fail(`${PROMETHEUS_INSTALL_HINT} (.ci/run installs it; CI must run the Prometheus test)`);
  t.skip(PROMETHEUS_INSTALL_HINT);
  return false;
}

/**
 * The rule file as a test loads it: every alert's `for:` replaced by `forDuration` and every
 * group's evaluation `interval:` set to `interval`. Expressions, labels, annotations and the
 * rate windows are left exactly as written.
 */
export function rulesForTest(text: string, options: { forDuration: string; interval: string }): string {
  const doc = parseYaml(text) as {
    groups: Array<{ interval?: string; rules: Array<{ alert?: string; for?: string }> }>;
  };
  for (const group of doc.groups) {
    group.interval = options.interval;
    for (const rule of group.rules)
      if (rule.alert !== undefined && rule.for !== undefined) rule.for = options.forDuration;
  }
  return stringifyYaml(doc, { lineWidth: 0 });
}

export type RunningPrometheus = RunningDaemon;

export interface PrometheusFiles {
  /** prometheus.yml, as an object (written as YAML; JSON is YAML). */
  config: Record<string, unknown>;
  /** Other files beside it (rule files), by name; `config` refers to them by name (Prometheus
   * resolves rule_files relative to the config file). */
  files?: Record<string, string>;
}

/**
 * Starts Prometheus on a free loopback port with the given config, in a temporary directory that
 * holds the config, the extra files and the TSDB; resolves when `/-/ready` answers 200. Retries
 * with another port when the chosen one was taken in between.
 */
export function startPrometheus(
  setup: PrometheusFiles,
  options: { timeoutMs?: number } = {},
): Promise<RunningPrometheus> {
  return startDaemon({
    name: 'prometheus',
    files: { ...(setup.files ?? {}), 'prometheus.yml': stringifyYaml(setup.config) },
    args: (dir, port) => [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
  });
}

/** One element of an instant vector. */
export interface VectorSample {
  metric: Record<string, string>;
  value: number;
}

/** GET /api/v1/query: the instant vector of `expr` now (throws on an error or another type). */
export async function promQuery(url: string, expr: string): Promise<VectorSample[]> {
  const res = await request(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`, {
    headersTimeout: 10_000,
    bodyTimeout: 10_000,
  });
  const body = (await res.body.json()) as {
    status: string;
    error?: string;
    data?: { resultType: string; result: Array<{ metric: Record<string, string>; value: [number, string] }> };
  };
  if (res.statusCode !== 200 || body.status !== 'success' || !body.data)
    throw new Error(`query ${expr}: ${res.statusCode} ${body.error ?? JSON.stringify(body)}`);
  if (body.data.resultType !== 'vector') throw new Error(`query ${expr}: a ${body.data.resultType}, not a vector`);
  return body.data.result.map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
}

/** An active alert as GET /api/v1/alerts lists it. */
export interface PromAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: 'pending' | 'firing' | string;
  activeAt: string;
  value: string;
}

/** GET /api/v1/alerts: every pending or firing alert. */
export async function promAlerts(url: string): Promise<PromAlert[]> {
  const res = await request(`${url}/api/v1/alerts`, { headersTimeout: 10_000, bodyTimeout: 10_000 });
  const body = (await res.body.json()) as { status: string; data?: { alerts: PromAlert[] } };
  if (res.statusCode !== 200 || body.status !== 'success' || !body.data)
    throw new Error(`alerts: ${res.statusCode} ${JSON.stringify(body)}`);
  return body.data.alerts;
}

/** Health of every active scrape target: `job` → health (`up`, `down`, `unknown`) and last error. */
export async function promTargets(
  url: string,
): Promise<Array<{ job: string; health: string; lastError: string; scrapeUrl: string }>> {
  const res = await request(`${url}/api/v1/targets?state=active`, { headersTimeout: 10_000, bodyTimeout: 10_000 });
  const body = (await res.body.json()) as {
    data?: {
      activeTargets: Array<{ labels: Record<string, string>; health: string; lastError: string; scrapeUrl: string }>;
    };
  };
  return (body.data?.activeTargets ?? []).map((t) => ({
    job: t.labels.job ?? '',
    health: t.health,
    lastError: t.lastError,
    scrapeUrl: t.scrapeUrl,
  }));
}

/** A loaded rule as GET /api/v1/rules lists it. */
export interface PromRule {
  name: string;
  type: 'recording' | 'alerting' | string;
  health: string;
  lastError?: string;
  /** Alerting rules: `for:` in seconds. */
  duration?: number;
}

/** GET /api/v1/rules: the loaded rule groups and their rules. */
export async function promRules(url: string): Promise<Array<{ name: string; interval: number; rules: PromRule[] }>> {
  const res = await request(`${url}/api/v1/rules`, { headersTimeout: 10_000, bodyTimeout: 10_000 });
  const body = (await res.body.json()) as {
    status: string;
    data?: { groups: Array<{ name: string; interval: number; rules: PromRule[] }> };
  };
  if (res.statusCode !== 200 || body.status !== 'success' || !body.data)
    throw new Error(`rules: ${res.statusCode} ${JSON.stringify(body)}`);
  return body.data.groups;
}

/** The loaded rules that failed to evaluate (`group/rule: error`), for assertions and messages. */
export async function promRuleErrors(url: string): Promise<string[]> {
  const out: string[] = [];
  for (const g of await promRules(url))
    for (const r of g.rules)
      if (r.health === 'err' || r.lastError) out.push(`${g.name}/${r.name}: ${r.lastError ?? r.health}`);
  return out;
}

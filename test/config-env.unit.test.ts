import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import {
  ENV_OVERRIDES,
  NON_CONFIG_ENV,
  NON_CONFIG_ENV_PREFIXES,
  buildConfig,
  loadConfig,
  resolveConfig,
  unknownEnvWarnings,
} from '../src/config/load.js';
import { closest, coerceForKey, schemaAt, valueKinds } from '../src/config/keys.js';
import { REDACTED, renderConfigYaml } from '../src/config/show.js';
import { issuesOf, yamlFile } from './helpers/config.js';

// #23 / #26: environment values take their key's type, --check-config says where each value came
// from, mistyped variables and keys are named with the one meant.

test('environment values keep the type of their key: numeric API keys, paths and names stay strings, numbers and booleans still parse', () => {
  const c = loadConfig({
    env: {
      LOGPROBE_BASELINE_API_KEY: '12345',
      LOGPROBE_CAPTURE_DIR: '2024',
      LOGPROBE_ADMIN_HOST: '1e3',
      LOGPROBE_LOG_LEVEL: 'debug',
      LOGPROBE_PORT: '9000',
      LOGPROBE_SAMPLE_RATE: '0.5',
      LOGPROBE_NOISE_FLOOR: '0.05',
      LOGPROBE_CAPTURE_ENABLED: 'off',
    },
  });
  assert.equal(c.baseline.apiKey, '12345');
  assert.equal(c.capture.dir, '2024');
  assert.equal(c.admin.host, '1e3', 'a host that reads as a number is still a host');
  assert.equal(c.log.level, 'debug');
  assert.equal(c.listen.port, 9000);
  assert.equal(c.mirror.sampleRate, 0.5);
  assert.equal(c.analysis.noiseFloor, 0.05);
  assert.equal(c.capture.enabled, false);
  // Leading zeros and exponents are the key's text, not a number's.
  assert.equal(loadConfig({ env: { LOGPROBE_BASELINE_API_KEY: '000123' } }).baseline.apiKey, '000123');
  assert.equal(loadConfig({ env: { LOGPROBE_CAPTURE_DIR: '1e3' } }).capture.dir, '1e3');
  assert.equal(loadConfig({ env: { LOGPROBE_NOISE_FLOOR: 'auto' } }).analysis.noiseFloor, 'auto');
  assert.equal(loadConfig({ env: { LOGPROBE_CAPTURE_ENABLED: 'yes' } }).capture.enabled, true);
  assert.equal(loadConfig({ env: { LOGPROBE_BASELINE_URL: 'none' } }).baseline.url, null);
  // Values the key cannot take are still refused with the key's own message.
  assert.deepEqual(
    issuesOf(() => loadConfig({ env: { LOGPROBE_CAPTURE_ENABLED: 'maybe' } })),
    ['capture.enabled (from LOGPROBE_CAPTURE_ENABLED=maybe): expected true or false'],
  );
  assert.deepEqual(
    issuesOf(() => loadConfig({ env: { LOGPROBE_ADMIN_PORT: '12x' } })),
    ['admin.port (from LOGPROBE_ADMIN_PORT=12x): expected a port number'],
  );
});

test('in the YAML file too: ${VAR} takes its key type, and plain scalars that look numeric stay text where the key takes strings', () => {
  const file = yamlFile(
    [
      'listen: { port: ${PORT} }',
      'candidate: { model: 1.10 }',
      'baseline: { apiKey: ${KEY}, model: ${MODEL} }',
      'capture: { dir: 2024, enabled: ${CAPTURE} }',
      'mirror: { sampleRate: 1, extraParams: { top_k: 1, seed_text: "7" } }',
      'admin: { allowedHosts: [metrics] }',
    ].join('\n'),
  );
  const c = loadConfig({ file, env: { PORT: '8123', KEY: '0123', MODEL: '2024', CAPTURE: 'false' } });
  assert.equal(c.listen.port, 8123);
  assert.equal(c.candidate.model, '1.10', 'the model name as written, not the number 1.1');
  assert.equal(c.baseline.apiKey, '0123');
  assert.equal(c.baseline.model, '2024');
  assert.equal(c.capture.dir, '2024');
  assert.equal(c.capture.enabled, false);
  assert.equal(c.mirror.sampleRate, 1);
  assert.deepEqual(
    { ...c.mirror.extraParams },
    { top_k: 1, seed_text: '7' },
    'free-form parameters keep their YAML types',
  );
  // A port is still a number, and a string where a number belongs is still refused.
  assert.deepEqual(
    issuesOf(() => loadConfig({ file: yamlFile('listen: { port: eighty }\n'), env: {} })),
    ['listen.port: expected a port number'],
  );
});

test('every LOGPROBE_* override names a key of the schema, and its kind comes from the schema', () => {
  for (const o of ENV_OVERRIDES) assert.ok(schemaAt(o.path), o.name);
  const kinds = Object.fromEntries(
    ENV_OVERRIDES.map((o) => [o.name, [...valueKinds(schemaAt(o.path)!)].sort().join('|')]),
  );
  assert.equal(kinds.LOGPROBE_BASELINE_API_KEY, 'null|string');
  assert.equal(kinds.LOGPROBE_PORT, 'number');
  assert.equal(kinds.LOGPROBE_NOISE_FLOOR, 'literal|number');
  assert.equal(kinds.LOGPROBE_CAPTURE_ENABLED, 'boolean');
  assert.equal(kinds.LOGPROBE_MODE, 'literal');
  assert.equal(coerceForKey('5', ['no', 'such', 'key']), '5');
});

test('unknown LOGPROBE_* variables are reported with the nearest known one; the known non-config ones are not', () => {
  assert.deepEqual(unknownEnvWarnings({ LOGPROBE_CANDIDATE: 'http://x:1', PATH: '/bin' }), [
    'unknown environment variable LOGPROBE_CANDIDATE, ignored: did you mean LOGPROBE_CANDIDATE_URL? (every LOGPROBE_* variable: config/logprobe.example.yaml)',
  ]);
  const [one] = unknownEnvWarnings({ LOGPROBE_SAMPLERATE: '1' });
  assert.match(one!, /did you mean LOGPROBE_SAMPLE_RATE\?/);
  assert.match(unknownEnvWarnings({ LOGPROBE_ADMINPORT: '1' })[0]!, /did you mean LOGPROBE_ADMIN_PORT\?/);
  assert.match(unknownEnvWarnings({ LOGPROBE_BASELINE_KEY: '1' })[0]!, /did you mean LOGPROBE_BASELINE_API_KEY\?/);
  assert.match(unknownEnvWarnings({ LOGPROBE_CACHEDIR: '/x' })[0]!, /did you mean LOGPROBE_CACHE_DIR\?/);
  const far = unknownEnvWarnings({ LOGPROBE_QQQQQQQQQQQQ: '1' });
  assert.equal(far.length, 1);
  assert.doesNotMatch(far[0]!, /did you mean/);
  const known = Object.fromEntries(
    [...ENV_OVERRIDES.map((o) => o.name), ...NON_CONFIG_ENV, 'LOGPROBE_BENCH_NODE_ARGS', 'NOT_LOGPROBE_X'].map((n) => [
      n,
      'x',
    ]),
  );
  assert.deepEqual(unknownEnvWarnings(known), []);
});

test('every LOGPROBE_* variable the repository reads is a config override or listed as a known non-config one', () => {
  const root = new URL('..', import.meta.url).pathname;
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      if (name === 'node_modules' || name === 'dist' || name.startsWith('.')) continue;
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (/\.(ts|mts|js|mjs)$/.test(name)) files.push(p);
    }
  };
  for (const d of ['src', 'bench', 'test', 'packages', 'bin']) walk(join(root, d));
  const read = new Set<string>();
  for (const f of files)
    for (const m of readFileSync(f, 'utf8').matchAll(/env(?:\.|\[\s*['"])(LOGPROBE_[A-Z0-9_]+)/g)) read.add(m[1]!);
  assert.ok(read.has('LOGPROBE_CACHE_DIR') && read.has('LOGPROBE_BENCH_NODE_ARGS'), [...read].join(', '));
  const unlisted = [...read].filter(
    (n) =>
      !ENV_OVERRIDES.some((o) => o.name === n) &&
      !NON_CONFIG_ENV.includes(n) &&
      !NON_CONFIG_ENV_PREFIXES.some((p) => n.startsWith(p)),
  );
  assert.deepEqual(unlisted, [], 'add them to NON_CONFIG_ENV in src/config/load.ts');
});

test('config-file key typos say which key was meant, at every level', () => {
  assert.deepEqual(
    issuesOf(() => buildConfig({ mirror: { sampleRatio: 0.1 } })),
    ['mirror.sampleRatio: unknown key (did you mean mirror.sampleRate?)'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ mirrors: {} })),
    ['mirrors: unknown key (did you mean mirror?)'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ admin: { allowedHost: [] } })),
    ['admin.allowedHost: unknown key (did you mean admin.allowedHosts?)'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ analysis: { scoring: { maxPosition: 1 } } })),
    ['analysis.scoring.maxPosition: unknown key (did you mean analysis.scoring.maxPositions?)'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ baseline: { apikey: 'k' } })),
    ['baseline.apikey: unknown key (did you mean baseline.apiKey?)'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ mirror: { zzzzzzzz: 1 } })),
    ['mirror.zzzzzzzz: unknown key'],
    'no guess when nothing is near',
  );
  assert.equal(closest('sampleRatio', ['sampleRate', 'sampleBy']), 'sampleRate');
});

test('the effective config as YAML: every value with its origin, secrets redacted, and it reads back as the config', () => {
  const file = yamlFile(
    'listen: { port: 8123 }\nbaseline: { url: http://b:1, apiKey: ${KEY} }\nmirror: { extraParams: { top_k: 1 } }\nalert: { webhookUrl: "https://u:p@hooks.example/services/T0/B0/SECRETPATH?token=SECRETQ" }\n',
  );
  const env = {
    KEY: 'sk-0123456789',
    LOGPROBE_SAMPLE_RATE: '1',
    LOGPROBE_CAPTURE_DIR: '2024',
    LOGPROBE_BASELINE_API_KEY: '',
  };
  const resolved = resolveConfig({ file, env, overrides: { mode: 'shadow' }, overridesFrom: '--mode' });
  const text = renderConfigYaml(resolved, ['a header']);
  assert.match(text, /^# a header\n/);
  for (const secret of ['sk-0123456789', 'SECRETPATH', 'SECRETQ', 'u:p'])
    assert.ok(!text.includes(secret), `${secret} is not printed`);
  const line = (key: string) => text.split('\n').find((l) => l.trimStart().startsWith(`${key}:`)) ?? '';
  assert.equal(line('mode'), 'mode: shadow # --mode');
  assert.equal(line('port').trim(), 'port: 8123 # file');
  assert.equal(line('apiKey').trim(), `apiKey: "${REDACTED}" # file \${KEY}`);
  assert.equal(line('sampleRate').trim(), 'sampleRate: 1 # env LOGPROBE_SAMPLE_RATE');
  assert.equal(
    line('dir').trim(),
    'dir: "2024" # env LOGPROBE_CAPTURE_DIR',
    'a string that looks like a number is quoted',
  );
  assert.equal(line('top_k').trim(), 'top_k: 1 # file');
  assert.equal(
    line('routes').trim(),
    'routes: [ /v1/completions, /v1/chat/completions, /v1/responses, /generate ] # default',
  );
  assert.equal(
    line('webhookUrl').trim(),
    `webhookUrl: https://${REDACTED}@hooks.example/${REDACTED}?${REDACTED} # file`,
  );
  assert.equal(line('drainSeconds').trim(), 'drainSeconds: 30 # default');
  // Every value has exactly one origin comment.
  const values = text.split('\n').filter((l) => /^\s*[A-Za-z_]+: \S/.test(l));
  assert.ok(values.length > 60, `${values.length} values`);
  for (const l of values) assert.match(l, / # (default|file|file \$\{[A-Z_]+\}|env LOGPROBE_[A-Z_]+|--mode)$/, l);
  // It reads back as the effective config, but for the redacted values.
  const back = parse(text) as Record<string, Record<string, unknown>>;
  const expected = JSON.parse(JSON.stringify(resolved.config)) as Record<string, Record<string, unknown>>;
  expected.baseline!.apiKey = REDACTED;
  expected.alert!.webhookUrl = `https://${REDACTED}@hooks.example/${REDACTED}?${REDACTED}`;
  assert.deepEqual(back, expected);
  // Alertmanager's own path is shown: it is what one checks.
  const am = renderConfigYaml(resolveConfig({ env: { LOGPROBE_ALERT_WEBHOOK_URL: 'http://am:9093/api/v2/alerts' } }));
  assert.match(am, /webhookUrl: http:\/\/am:9093\/api\/v2\/alerts # env LOGPROBE_ALERT_WEBHOOK_URL/);
  // `baseline: null` in the file is the file's, not the default's.
  assert.match(renderConfigYaml(resolveConfig({ file: yamlFile('baseline: null\n'), env: {} })), /url: null # file\n/);
});

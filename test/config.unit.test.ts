import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildConfig, configWarnings, envOrigins, loadConfig, readConfigFile } from '../src/config/load.js';
import { ConfigError } from '../src/errors/index.js';
import { issuesOf, yamlFile } from './helpers/config.js';

test('the defaults are the documented ones (config/logprobe.example.yaml)', () => {
  const c = buildConfig({});
  assert.deepEqual(c.listen, { host: '0.0.0.0', port: 8080 });
  assert.deepEqual(
    { ...c.admin, allowedHosts: [...c.admin.allowedHosts] },
    {
      host: '127.0.0.1',
      port: 9464,
      allowedHosts: [],
      auth: { basicAuthUsers: {}, bearerTokenFile: null, bearerToken: null, metrics: false },
      tls: null,
    },
  );
  assert.equal(c.candidate.url, 'http://127.0.0.1:30000');
  assert.equal(c.candidate.timeoutMs, 120000);
  assert.equal(c.baseline.url, 'http://127.0.0.1:30001');
  assert.equal(c.baseline.apiKey, null);
  assert.equal(c.baseline.forwardAuth, false);
  assert.equal(c.tlsInsecure, false);
  assert.equal(c.limits.bodyMB, 32);
  assert.equal(c.shutdown.drainSeconds, 30);
  assert.deepEqual(
    {
      ...c.mirror,
      extraParams: { ...c.mirror.extraParams },
      routes: [...c.mirror.routes],
      repeat: { ...c.mirror.repeat, backends: [...c.mirror.repeat.backends] },
    },
    {
      sampleRate: 0.05,
      sampleBy: 'random',
      routes: ['/v1/completions', '/v1/chat/completions', '/v1/responses', '/generate'],
      topLogprobs: 5,
      maxTokens: 64,
      concurrency: 4,
      queueSize: 128,
      seed: 1234,
      extraParams: {},
      repeat: { rate: 0, backends: ['candidate'], flush: false },
    },
  );
  assert.deepEqual(
    { ...c.analysis, scoring: { ...c.analysis.scoring } },
    {
      noiseFloor: 0.1,
      gapAmbiguous: 0.3,
      gapSystematic: 0.4,
      globalFraction: 0.8,
      minAligned: 3,
      scoring: { when: 'diverged', maxPositions: 64 },
    },
  );
  assert.equal(c.candidate.engine, 'auto');
  assert.equal(c.baseline.engine, 'auto');
  assert.deepEqual({ ...c.calibration }, { rate: 0, margin: 3, minSamples: 20, minFloor: 0.1 });
  assert.equal(c.alert.window, 50);
  assert.equal(c.alert.minRequests, 10);
  assert.equal(c.alert.fireFraction, 0.5);
  assert.equal(c.alert.forSeconds, 0);
  assert.deepEqual({ ...c.alert.cusum }, { k: 0.5, h: 5, targetShift: null, falseAlarmPairs: null });
  assert.equal(c.alert.webhookUrl, null);
  assert.deepEqual(
    { ...c.capture },
    { enabled: true, dir: './captures', maxFileMB: 100, gzip: false, includePrompts: true },
  );
  assert.equal(c.log.level, 'info');
});

test('the config is frozen all the way down', () => {
  const c = buildConfig({});
  assert.ok(Object.isFrozen(c));
  assert.ok(Object.isFrozen(c.mirror));
  assert.ok(Object.isFrozen(c.mirror.routes));
  assert.throws(() => {
    (c.listen as { port: number }).port = 1;
  }, TypeError);
});

test('invalid values are reported with their path and reason', () => {
  assert.deepEqual(
    issuesOf(() => buildConfig({ listen: { port: 99999 } })),
    ['listen.port: expected a port number'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ listen: { port: 'http' } })),
    ['listen.port: expected a port number'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ candidate: { url: 'not a url' } })),
    ['candidate.url: expected an http(s) URL'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ mirror: { sampleRate: 2 } })),
    ['mirror.sampleRate: expected a number from 0 to 1'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ mirror: { sampleBy: 'prompt' } })),
    ['mirror.sampleBy: expected random or hash'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ analysis: { noiseFloor: 'loud' } })),
    ['analysis.noiseFloor: expected a positive number of nats, auto or exact'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ analysis: { gapAmbiguous: 0.5, gapSystematic: 0.4 } })),
    ['analysis.gapSystematic: gapSystematic must be ≥ gapAmbiguous'],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ log: { level: 'verbose' } })),
    ['log.level: expected one of fatal, error, warn, info, debug, trace, silent'],
  );
});

test('every invalid or unknown key is reported, not just the first', () => {
  const issues = issuesOf(() => buildConfig({ listen: { port: -1, hots: 'x' }, mirorr: {}, alert: { window: 0 } }));
  assert.ok(issues.includes('listen.port: expected a port number'), issues.join('\n'));
  assert.ok(issues.includes('listen.hots: unknown key (did you mean listen.host?)'), issues.join('\n'));
  assert.ok(issues.includes('mirorr: unknown key (did you mean mirror?)'), issues.join('\n'));
  assert.ok(issues.includes('alert.window: expected a positive whole number'), issues.join('\n'));
});

test('YAML file, then LOGPROBE_* environment; empty variables count as unset', () => {
  const file = yamlFile(
    'listen: { port: 8081 }\ncandidate: { url: http://10.0.0.1:8000 }\nmirror: { sampleRate: 0.5 }\n',
  );
  const fromFile = loadConfig({ file, env: {} });
  assert.equal(fromFile.listen.port, 8081);
  assert.equal(fromFile.candidate.url, 'http://10.0.0.1:8000');
  const env = {
    LOGPROBE_PORT: '9000',
    LOGPROBE_ADMIN_PORT: '9001',
    LOGPROBE_CANDIDATE_URL: 'http://cand:1',
    LOGPROBE_BASELINE_URL: 'http://base:2',
    LOGPROBE_LOG_LEVEL: 'debug',
    LOGPROBE_SAMPLE_RATE: '',
  };
  const c = loadConfig({ file, env });
  assert.equal(c.listen.port, 9000);
  assert.equal(c.admin.port, 9001);
  assert.equal(c.candidate.url, 'http://cand:1');
  assert.equal(c.baseline.url, 'http://base:2');
  assert.equal(c.log.level, 'debug');
  assert.equal(c.mirror.sampleRate, 0.5, 'an empty variable does not override');
  assert.deepEqual(
    issuesOf(() => loadConfig({ env: { LOGPROBE_PORT: 'eighty' } })),
    ['listen.port (from LOGPROBE_PORT=eighty): expected a port number'],
  );
  // The variable is named: the user set it, not mirror.sampleRate in a file.
  assert.deepEqual(
    issuesOf(() => loadConfig({ env: { LOGPROBE_SAMPLE_RATE: '5%' } })),
    ['mirror.sampleRate (from LOGPROBE_SAMPLE_RATE=5%): expected a number from 0 to 1'],
  );
  // A key's value is never quoted back.
  assert.deepEqual(
    envOrigins({ LOGPROBE_BASELINE_API_KEY: 'sk-secret', LOGPROBE_PORT: '' }),
    new Map([['baseline.apiKey', 'LOGPROBE_BASELINE_API_KEY']]),
  );
});

test('${VAR} in the YAML is taken from the environment; unset means null', () => {
  const file = yamlFile('baseline: { url: http://b:1, apiKey: ${BASELINE_API_KEY} }\n');
  assert.equal(loadConfig({ file, env: { BASELINE_API_KEY: 'sk-b' } }).baseline.apiKey, 'sk-b');
  assert.equal(loadConfig({ file, env: {} }).baseline.apiKey, null);
  assert.equal(loadConfig({ file, env: { BASELINE_API_KEY: '' } }).baseline.apiKey, null);
});

test('an unreadable file, a YAML syntax error and a non-mapping are reported with the file name', () => {
  assert.throws(
    () => loadConfig({ file: '/nonexistent/logprobe.yaml', env: {} }),
    /\/nonexistent\/logprobe\.yaml: invalid configuration: cannot read config file \(no such file\)/,
  );
  const bad = yamlFile('listen: { port: 80\n');
  assert.throws(
    () => loadConfig({ file: bad, env: {} }),
    (err: unknown) => err instanceof ConfigError && /YAML syntax error/.test(err.message) && err.message.includes(bad),
  );
  // Where: the line and column, as an editor counts them.
  const nested = yamlFile('mirror:\n  sampleRate: 1\n   bad: x\n');
  assert.deepEqual(
    issuesOf(() => loadConfig({ file: nested, env: {} })),
    ['YAML syntax error at line 2, column 15: Nested mappings are not allowed in compact mappings'],
  );
  const list = yamlFile('- a\n- b\n');
  assert.deepEqual(
    issuesOf(() => loadConfig({ file: list, env: {} })),
    ['(root): expected a mapping of keys'],
  );
  const empty = yamlFile('# nothing\n');
  assert.equal(loadConfig({ file: empty, env: {} }).listen.port, 8080);
});

test('noiseFloor accepts auto', () => {
  assert.equal(buildConfig({ analysis: { noiseFloor: 'auto' } }).analysis.noiseFloor, 'auto');
  assert.equal(loadConfig({ env: { LOGPROBE_NOISE_FLOOR: 'auto' } }).analysis.noiseFloor, 'auto');
  assert.equal(loadConfig({ env: { LOGPROBE_NOISE_FLOOR: '0.05' } }).analysis.noiseFloor, 0.05);
});

test('canary.noiseFloor: null, a number or auto; auto needs the live baseline it learns from', () => {
  assert.equal(buildConfig({}).canary.noiseFloor, null);
  assert.equal(buildConfig({ canary: { noiseFloor: 0.004 } }).canary.noiseFloor, 0.004);
  assert.equal(buildConfig({ canary: { noiseFloor: 'auto' } }).canary.noiseFloor, 'auto');
  assert.deepEqual(
    issuesOf(() => buildConfig({ canary: { noiseFloor: 'auto', reference: 'ref.jsonl' } })),
    [
      "canary.noiseFloor: auto learns from the live baseline's repeat of each probe, and canary.reference has none: give a number of nats (or null: analysis.noiseFloor)",
    ],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ canary: { noiseFloor: 'exact' } })),
    ['canary.noiseFloor: expected a positive number of nats, auto or null'],
  );
});

test('config/logprobe.example.yaml is valid, states every key, and its values are the defaults', () => {
  const file = new URL('../config/logprobe.example.yaml', import.meta.url).pathname;
  const raw = readConfigFile(file, {});
  const keysOf = (o: unknown, prefix = ''): string[] =>
    o !== null && typeof o === 'object' && !Array.isArray(o) && Object.keys(o).length > 0
      ? Object.entries(o).flatMap(([k, v]) => keysOf(v, `${prefix}${k}.`))
      : [prefix.slice(0, -1)];
  const example = loadConfig({ file, env: {} });
  const defaults = buildConfig({});
  assert.deepEqual(keysOf(raw).sort(), keysOf(defaults).sort(), 'the example names every key');
  assert.deepEqual(JSON.parse(JSON.stringify(example)), JSON.parse(JSON.stringify(defaults)));
});

test("serve's start line says what the mirror does: sample rate, routes, how to force a copy, the baseline, where captures go and that prompts are kept", async () => {
  const { mirrorStartLine } = await import('../src/config/summary.js');
  const { loadConfig } = await import('../src/config/load.js');
  const line = mirrorStartLine(loadConfig({ env: {} }));
  assert.equal(
    line,
    'mirroring 5% of /v1/completions, /v1/chat/completions, /v1/responses, /generate — for a first try send header x-logprobe-mirror: 1, or set LOGPROBE_SAMPLE_RATE=1; against the baseline http://127.0.0.1:30001; captures to ./captures, prompts included (capture.includePrompts: false drops them)',
  );
  assert.equal(
    mirrorStartLine(
      loadConfig({
        env: { LOGPROBE_SAMPLE_RATE: '1', LOGPROBE_BASELINE_URL: 'none', LOGPROBE_CAPTURE_ENABLED: 'false' },
      }),
    ),
    "mirroring 100% of /v1/completions, /v1/chat/completions, /v1/responses, /generate; baseline-free (the candidate's own repeats); captures off",
  );
  assert.match(
    mirrorStartLine(loadConfig({ env: { LOGPROBE_SAMPLE_RATE: '0' } })),
    /^mirroring nothing by default .* x-logprobe-mirror: 1 is mirrored/,
  );
});

test('a URL without a scheme: did you mean http://…', () => {
  assert.deepEqual(
    issuesOf(() => buildConfig({ candidate: { url: 'localhost:8000' }, baseline: { url: '10.0.0.7:8000/v1' } })),
    [
      'candidate.url: expected an http(s) URL: did you mean http://localhost:8000?',
      'baseline.url: expected an http(s) URL: did you mean http://10.0.0.7:8000/v1?',
    ],
  );
  // A scheme that is not http(s), or text that would not make a URL, gets no guess.
  assert.deepEqual(
    issuesOf(() => buildConfig({ candidate: { url: 'ftp://x' }, baseline: { url: 'not a url' } })),
    ['candidate.url: expected an http(s) URL', 'baseline.url: expected an http(s) URL'],
  );
});

test('candidate.url and baseline.url naming the same server: a warning naming both keys', () => {
  for (const [c, b] of [
    ['http://vllm:8000', 'http://vllm:8000/'],
    ['http://VLLM:8000/v1', 'http://vllm:8000/v1/'],
  ])
    assert.deepEqual(
      configWarnings(buildConfig({ candidate: { url: c }, baseline: { url: b } })).map((w) => w.slice(0, 59)),
      ['candidate.url and baseline.url are the same server (http://'],
      `${c} ${b}`,
    );
  for (const [c, b] of [
    ['http://vllm:8000', 'http://vllm:8001'],
    ['http://vllm:8000/a', 'http://vllm:8000/b'],
  ])
    assert.deepEqual(configWarnings(buildConfig({ candidate: { url: c }, baseline: { url: b } })), []);
  assert.deepEqual(configWarnings(buildConfig({ baseline: null })), []);
  // The live page refused on an exposed admin port without auth: said at start.
  assert.deepEqual(
    configWarnings(buildConfig({ admin: { host: '0.0.0.0' } })).map((w) => w.slice(0, 38)),
    ['admin.host 0.0.0.0 without admin.auth:'],
  );
  assert.deepEqual(configWarnings(buildConfig({ admin: { host: '0.0.0.0', auth: { bearerToken: 't' } } })), []);
  for (const host of ['127.0.0.1', '::1', 'localhost', '127.0.0.2'])
    assert.deepEqual(configWarnings(buildConfig({ admin: { host } })), [], host);
});

test('admin.auth: bcrypt hashes only, one token source, metrics only with a credential', () => {
  const hash = '$2y$10$' + 'a'.repeat(53);
  assert.deepEqual(buildConfig({ admin: { auth: { basicAuthUsers: { ops: hash } } } }).admin.auth.basicAuthUsers, {
    ops: hash,
  });
  assert.deepEqual(
    issuesOf(() => buildConfig({ admin: { auth: { basicAuthUsers: { ops: 'hunter2' } } } })),
    [
      'admin.auth.basicAuthUsers.ops: expected a bcrypt hash, never the password itself (make one with: htpasswd -nBC 10 USER | cut -d: -f2)',
    ],
  );
  assert.deepEqual(
    issuesOf(() => buildConfig({ admin: { auth: { bearerToken: 't', bearerTokenFile: '/f' } } })),
    ['admin.auth.bearerTokenFile: set one of bearerToken and bearerTokenFile, not both'],
  );
  assert.match(
    issuesOf(() => buildConfig({ admin: { auth: { metrics: true } } }))[0]!,
    /^admin\.auth\.metrics: applies only with a credential/,
  );
  // The token in the file itself is refused; through ${VAR} it is not written there.
  const literal = yamlFile('admin: { auth: { bearerToken: abcdef123456 } }\n');
  assert.match(
    issuesOf(() => loadConfig({ file: literal, env: {} }))[0]!,
    /^admin\.auth\.bearerToken: not written in the file/,
  );
  const ref = yamlFile('admin: { auth: { bearerToken: ${ADMIN_TOKEN} } }\n');
  assert.equal(loadConfig({ file: ref, env: { ADMIN_TOKEN: 'abcdef123456' } }).admin.auth.bearerToken, 'abcdef123456');
  assert.equal(
    envOrigins({ LOGPROBE_ADMIN_BEARER_TOKEN: 'abcdef123456' }).get('admin.auth.bearerToken'),
    'LOGPROBE_ADMIN_BEARER_TOKEN',
  );
});

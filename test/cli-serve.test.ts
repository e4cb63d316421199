import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { runCli, startCli } from './helpers/cli.js';
import { metricValue, startSim } from './helpers/sim.js';
import { startUpstream } from './helpers/upstream.js';

// The CLI runs the compiled sources (dist/), as after `npm ci`; `npm test` builds them first.

function configFile(text: string): string {
  const file = join(mkdtempSync(join(tmpdir(), 'logprobe-cli-')), 'logprobe.yaml');
  writeFileSync(file, text);
  return file;
}

test('logprobe --help lists the commands', async () => {
  const r = await runCli(['--help']);
  assert.equal(r.code, 0);
  assert.match(r.stdout, /serve/);
});

test('an invalid config exits 2 with one line naming the field, no stack trace', async () => {
  const file = configFile('listen:\n  port: 123456\nmirror:\n  sampleRatio: 0.1\n');
  const r = await runCli(['serve', '--config', file]);
  assert.equal(r.code, 2);
  assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, /listen\.port: expected a port number/);
  assert.match(r.stderr, /mirror\.sampleRatio: unknown key/);
  assert.doesNotMatch(r.stderr, /\n\s+at /);
  const check = await runCli(['serve', '--config', file, '--check-config']);
  assert.equal(check.code, 2);
});

test('a missing config file and unknown options exit 2', async () => {
  const missing = await runCli(['serve', '--config', '/nonexistent.yaml']);
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /\/nonexistent\.yaml.*no such file/);
  const unknown = await runCli(['serve', '--bogus']);
  assert.equal(unknown.code, 2);
  const badEnv = await runCli(['serve', '--check-config'], { env: { LOGPROBE_ADMIN_PORT: 'x' } });
  assert.equal(badEnv.code, 2);
  assert.match(
    badEnv.stderr,
    /admin\.port \(from LOGPROBE_ADMIN_PORT=x\): expected a port number/,
    'the variable it came from is named',
  );
});

test('a port in use: one line, exit 2, and no "logprobe stopped" after the error', async (t) => {
  const taken = await startUpstream((_req, res) => res.end());
  t.after(() => taken.close());
  const port = new URL(taken.url).port;
  const file = configFile(
    `listen: { host: 127.0.0.1, port: ${port} }\nadmin: { host: 127.0.0.1, port: 0 }\ncapture: { enabled: false }\n`,
  );
  const r = await runCli(['serve', '--config', file]);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, new RegExp(`^logprobe: cannot listen: .*EADDRINUSE.*${port}`, 'm'));
  assert.doesNotMatch(r.stdout + r.stderr, /logprobe stopped/, 'a start that failed reports no stop');
  assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
});

test('--check-config validates and exits 0, printing the effective config as YAML with each origin, secrets redacted, and warning of unknown LOGPROBE_* variables', async () => {
  const example = new URL('../config/logprobe.example.yaml', import.meta.url).pathname;
  const r = await runCli(['serve', '--config', example, '--check-config']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^# logprobe: config ok \(file .*logprobe\.example\.yaml, then LOGPROBE_\* environment\)/);
  assert.match(r.stdout, /^ {2}port: 8080 # file$/m);

  const file = configFile('baseline: { url: http://trusted:8000, apiKey: ${KEY} }\ncapture: { dir: 2024 }\n');
  const env = {
    KEY: 'sk-file-secret-1',
    LOGPROBE_BASELINE_API_KEY: '12345678',
    LOGPROBE_CANDIDATE_URL: 'http://staging:8000',
    LOGPROBE_CANDIDATE: 'http://typo:1',
    LOGPROBE_CACHE_DIR: '/tmp/x',
  };
  const c = await runCli(['serve', '--config', file, '--check-config', '--mode', 'shadow'], { env });
  assert.equal(c.code, 0, c.stderr);
  assert.ok(!c.stdout.includes('12345678') && !c.stdout.includes('sk-file-secret-1'), 'no secret is printed');
  assert.match(c.stdout, /^ {2}apiKey: "\[redacted\]" # env LOGPROBE_BASELINE_API_KEY$/m);
  assert.match(c.stdout, /^ {2}url: http:\/\/staging:8000 # env LOGPROBE_CANDIDATE_URL$/m);
  assert.match(c.stdout, /^ {2}url: http:\/\/trusted:8000 # file$/m);
  assert.match(c.stdout, /^ {2}dir: "2024" # file$/m);
  assert.match(c.stdout, /^mode: shadow # --mode$/m);
  assert.match(c.stdout, /^ {2}timeoutMs: 120000 # default$/m);
  assert.equal(
    c.stderr,
    'logprobe: warning: unknown environment variable LOGPROBE_CANDIDATE, ignored: did you mean LOGPROBE_CANDIDATE_URL? (every LOGPROBE_* variable: config/logprobe.example.yaml)\n',
    "one line for the typo, none for LOGPROBE_CACHE_DIR (the engines', not a config key)",
  );

  const typo = await runCli(['serve', '--config', configFile('mirror: { sampleRatio: 1 }\n'), '--check-config']);
  assert.equal(typo.code, 2);
  assert.match(typo.stderr, /mirror\.sampleRatio: unknown key \(did you mean mirror\.sampleRate\?\)/);
});

test('SIGTERM lets an in-flight request finish, then exits 0', async (t) => {
  const up = await startUpstream(async (_req, res) => {
    await new Promise((r) => setTimeout(r, 800));
    res.end('{"done":true}');
  });
  t.after(() => up.close());
  const file = configFile(
    `listen: { host: 127.0.0.1, port: 0 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${up.url} }\ncapture: { enabled: false }\nprobe: { atStart: off }\n`,
  );
  const proc = await startCli(['serve', '--config', file], /"proxyUrl":"(http:\/\/[^"]+)"/, {
    env: { LOGPROBE_SAMPLERATE: '1' },
  });
  t.after(() => proc.child.kill('SIGKILL'));
  const proxyUrl = proc.match[1]!;
  // A mistyped variable is said at start, in the log.
  assert.match(
    proc.output(),
    /"level":"warn".*unknown environment variable LOGPROBE_SAMPLERATE, ignored: did you mean LOGPROBE_SAMPLE_RATE\?/,
  );
  const inflight = request(`${proxyUrl}/v1/completions`, {
    method: 'POST',
    body: '{}',
    headers: { 'content-type': 'application/json' },
  });
  // Wait for this request at the candidate (not a probe's: the probe is off, and only this path counts).
  while (!up.seen.some((r) => r.url === '/v1/completions' && r.body.toString() === '{}'))
    await new Promise((r) => setTimeout(r, 10));
  proc.child.kill('SIGTERM');
  const res = await inflight;
  assert.equal(res.statusCode, 200);
  assert.equal(await res.body.text(), '{"done":true}');
  assert.equal(await proc.exited, 0, proc.output());
  assert.match(proc.output(), /logprobe stopped/);
});

test('a capture directory that cannot be created refuses the start: one line, exit 2, at once', async () => {
  const file = configFile(
    'listen: { host: 127.0.0.1, port: 0 }\nadmin: { host: 127.0.0.1, port: 0 }\ncapture: { dir: /proc/logprobe-nope }\n',
  );
  const started = Date.now();
  const r = await runCli(['serve', '--config', file], { timeoutMs: 15_000 });
  assert.equal(r.code, 2, r.stdout + r.stderr);
  assert.equal(
    r.stderr,
    'logprobe: capture.dir /proc/logprobe-nope: cannot create the directory: no such directory (set capture.dir to a writable directory, or capture.enabled: false)\n',
  );
  assert.doesNotMatch(r.stdout, /listening/, 'nothing listened');
  assert.ok(Date.now() - started < 10_000);
});

/** CPU seconds a process has used (user + system), from /proc. */
function cpuSeconds(pid: number): number {
  const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

test(
  'capture writes that fail after the start are counted in logprobe_capture_errors_total, without spinning, and SIGTERM stops serve',
  { skip: process.platform !== 'linux' },
  async (t) => {
    const baseline = await startSim();
    const candidate = await startSim();
    t.after(() => Promise.all([baseline.close(), candidate.close()]));
    const dir = join(mkdtempSync(join(tmpdir(), 'logprobe-cli-')), 'captures');
    const file = configFile(
      `listen: { host: 127.0.0.1, port: 0 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${candidate.url} }\nbaseline: { url: ${baseline.url} }\nmirror: { sampleRate: 1 }\ncapture: { dir: ${dir} }\n`,
    );
    const proc = await startCli(
      ['serve', '--config', file],
      /"proxyUrl":"(http:\/\/[^"]+)","adminUrl":"(http:\/\/[^"]+)"/,
    );
    t.after(() => proc.child.kill('SIGKILL'));
    const [proxyUrl, adminUrl] = [proc.match[1]!, proc.match[2]!];
    assert.deepEqual(readdirSync(dir), [], 'the start checked the directory and left nothing in it');
    // The directory becomes a plain file: every open of a capture file now fails (ENOTDIR).
    rmSync(dir, { recursive: true });
    writeFileSync(dir, 'not a directory');
    for (let i = 0; i < 3; i++) {
      const res = await request(`${proxyUrl}/v1/completions`, {
        method: 'POST',
        body: JSON.stringify({ model: 'sim', prompt: `p ${i}`, max_tokens: 8 }),
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(res.statusCode, 200, 'clients never notice');
      await res.body.dump();
    }
    let errors = 0;
    for (let i = 0; i < 50 && errors === 0; i++) {
      await new Promise((r) => setTimeout(r, 100));
      errors =
        metricValue(await (await request(`${adminUrl}/metrics`)).body.text(), 'logprobe_capture_errors_total') ?? 0;
    }
    assert.ok(errors >= 1, 'the lost records are counted');
    const before = cpuSeconds(proc.child.pid!);
    await new Promise((r) => setTimeout(r, 2000));
    const used = cpuSeconds(proc.child.pid!) - before;
    assert.ok(used < 0.5, `${used.toFixed(2)} CPU seconds in 2 s: no retry loop`);
    const stopped = Date.now();
    proc.child.kill('SIGTERM');
    assert.equal(await proc.exited, 0, proc.output());
    assert.ok(Date.now() - stopped < 10_000, 'SIGTERM stops it');
  },
);

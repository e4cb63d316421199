import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { runCli, startCli } from './helpers/cli.js';
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
  assert.match(badEnv.stderr, /admin\.port \(from LOGPROBE_ADMIN_PORT=x\): expected a port number/, 'the variable it came from is named');
});

test('a port in use: one line, exit 2, and no "logprobe stopped" after the error', async (t) => {
  const taken = await startUpstream((_req, res) => res.end());
  t.after(() => taken.close());
  const port = new URL(taken.url).port;
  const file = configFile(`listen: { host: 127.0.0.1, port: ${port} }\nadmin: { host: 127.0.0.1, port: 0 }\ncapture: { enabled: false }\n`);
  const r = await runCli(['serve', '--config', file]);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, new RegExp(`^logprobe: cannot listen: .*EADDRINUSE.*${port}`, 'm'));
  assert.doesNotMatch(r.stdout + r.stderr, /logprobe stopped/, 'a start that failed reports no stop');
  assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
});

test('--check-config validates and exits 0', async () => {
  const r = await runCli(['serve', '--config', new URL('../config/logprobe.example.yaml', import.meta.url).pathname, '--check-config']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /config ok/);
});

test('SIGTERM lets an in-flight request finish, then exits 0', async (t) => {
  const up = await startUpstream(async (_req, res) => {
    await new Promise((r) => setTimeout(r, 800));
    res.end('{"done":true}');
  });
  t.after(() => up.close());
  const file = configFile(`listen: { host: 127.0.0.1, port: 0 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${up.url} }\ncapture: { enabled: false }\n`);
  const proc = await startCli(['serve', '--config', file], /"proxyUrl":"(http:\/\/[^"]+)"/);
  t.after(() => proc.child.kill('SIGKILL'));
  const proxyUrl = proc.match[1]!;
  const inflight = request(`${proxyUrl}/v1/completions`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
  while (up.seen.length === 0) await new Promise((r) => setTimeout(r, 10));
  proc.child.kill('SIGTERM');
  const res = await inflight;
  assert.equal(res.statusCode, 200);
  assert.equal(await res.body.text(), '{"done":true}');
  assert.equal(await proc.exited, 0, proc.output());
  assert.match(proc.output(), /logprobe stopped/);
});

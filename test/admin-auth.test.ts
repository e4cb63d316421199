import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import bcrypt from 'bcryptjs';
import { startLogprobe } from './helpers/logprobe.js';
import { startSim } from './helpers/sim.js';
import { runCli } from './helpers/cli.js';
import { EXPOSED_WITHOUT_AUTH } from '../src/admin/auth.js';

// The admin port's access (src/admin/auth.ts): each route with the right, a wrong and no credential.

const dir = mkdtempSync(join(tmpdir(), 'logprobe-admin-auth-'));
const PASSWORD = 'correct horse battery staple';
const HASH = bcrypt.hashSync(PASSWORD, 4).replace(/^\$2b\$/, '$2y$'); // htpasswd -B writes $2y$
const TOKEN = 'tok-3f9a1c0b7d2e4a68';
const tokenFile = join(dir, 'token');
writeFileSync(tokenFile, `${TOKEN}\n`);

const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

async function status(
  url: string,
  authorization?: string,
  dispatcher?: Agent,
): Promise<{ code: number; body: string; challenge: unknown }> {
  const res = await request(url, {
    headers: authorization ? { authorization } : {},
    ...(dispatcher ? { dispatcher } : {}),
  });
  return { code: res.statusCode, body: await res.body.text(), challenge: res.headers['www-authenticate'] };
}

async function sims(t: import('node:test').TestContext) {
  const baseline = await startSim();
  const candidate = await startSim();
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  return { candidate: { url: candidate.url }, baseline: { url: baseline.url } };
}

test('basic auth (bcrypt): /ui and /ui/data need the credential, /metrics only with auth.metrics, probes never', async (t) => {
  const up = await sims(t);
  for (const metrics of [false, true]) {
    const lp = await startLogprobe({ ...up, admin: { auth: { basicAuthUsers: { ops: HASH }, metrics } } });
    t.after(() => lp.close());
    const right = basic('ops', PASSWORD);
    for (const path of ['/ui', '/ui/data', '/metrics']) {
      const guarded = path !== '/metrics' || metrics;
      const url = `${lp.adminUrl}${path}`;
      assert.equal((await status(url, right)).code, 200, `${path} right`);
      assert.equal((await status(url, right)).code, 200, `${path} right, remembered`);
      for (const [what, auth] of [
        ['missing', undefined],
        ['wrong password', basic('ops', 'wrong')],
        ['unknown user', basic('eve', PASSWORD)],
        ['a bearer token', `Bearer ${TOKEN}`],
        ['garbage', 'Basic !!!'],
      ] as const) {
        const r = await status(url, auth);
        assert.equal(r.code, guarded ? 401 : 200, `${path} ${what} (metrics: ${metrics})`);
        if (guarded) assert.match(String(r.challenge), /^Basic realm="logprobe admin"/);
      }
    }
    for (const path of ['/healthz', '/readyz'])
      assert.equal((await status(`${lp.adminUrl}${path}`)).code, 200, `${path} stays open`);
    assert.doesNotMatch(lp.logs.text(), new RegExp(`${PASSWORD}|${TOKEN}`));
  }
});

test('a bearer token from a file and from LOGPROBE_ADMIN_BEARER_TOKEN', async (t) => {
  const up = await sims(t);
  const fromFile = await startLogprobe({ ...up, admin: { auth: { bearerTokenFile: tokenFile, metrics: true } } });
  t.after(() => fromFile.close());
  // The variable becomes admin.auth.bearerToken through the config's environment overrides.
  const { loadConfig } = await import('../src/config/load.js');
  const fromEnv = loadConfig({ env: { LOGPROBE_ADMIN_BEARER_TOKEN: TOKEN } }).admin.auth;
  assert.equal(fromEnv.bearerToken, TOKEN);
  const viaEnv = await startLogprobe({ ...up, admin: { auth: fromEnv } });
  t.after(() => viaEnv.close());
  for (const [lp, metrics] of [
    [fromFile, true],
    [viaEnv, false],
  ] as const) {
    for (const path of ['/ui', '/ui/data', '/metrics']) {
      const guarded = path !== '/metrics' || metrics;
      const url = `${lp.adminUrl}${path}`;
      assert.equal((await status(url, `Bearer ${TOKEN}`)).code, 200, path);
      assert.equal((await status(url, `bearer ${TOKEN}`)).code, 200, `${path}: the scheme in any case`);
      for (const auth of [undefined, `Bearer ${TOKEN}x`, `Bearer ${TOKEN.slice(0, -1)}`, basic('ops', TOKEN)]) {
        const r = await status(url, auth);
        assert.equal(r.code, guarded ? 401 : 200, `${path} ${auth}`);
        if (guarded) assert.match(String(r.challenge), /^Bearer/);
      }
    }
    assert.doesNotMatch(lp.logs.text(), new RegExp(TOKEN));
  }
});

test('an admin port bound beyond loopback without auth: the live page answers 403 with one line, metrics and probes stay open', async (t) => {
  const up = await sims(t);
  const lp = await startLogprobe({ ...up, admin: { host: '0.0.0.0', port: 0 } });
  t.after(() => lp.close());
  const base = `http://127.0.0.1:${new URL(lp.adminUrl).port}`;
  for (const path of ['/ui', '/ui/data']) {
    const r = await status(`${base}${path}`);
    assert.equal(r.code, 403, path);
    assert.equal(r.body, `${EXPOSED_WITHOUT_AUTH}\n`);
    assert.equal(r.body.trim().split('\n').length, 1);
    assert.match(r.body, /admin\.auth/);
  }
  for (const path of ['/metrics', '/healthz', '/readyz'])
    assert.equal((await status(`${base}${path}`)).code, 200, path);
  // On loopback (the default) the page is open without auth.
  const local = await startLogprobe(up);
  t.after(() => local.close());
  assert.equal((await status(`${local.adminUrl}/ui/data`)).code, 200);
});

test('admin.tls: the admin port over HTTPS with a self-signed certificate, auth on top', async (t) => {
  const key = join(dir, 'key.pem');
  const cert = join(dir, 'cert.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
    ],
    { stdio: 'ignore' },
  );
  const up = await sims(t);
  const lp = await startLogprobe({
    ...up,
    admin: { tls: { certFile: cert, keyFile: key }, auth: { bearerTokenFile: tokenFile } },
  });
  t.after(() => lp.close());
  assert.match(lp.adminUrl, /^https:\/\//);
  const agent = new Agent({ connect: { rejectUnauthorized: false } });
  t.after(() => agent.close());
  assert.equal((await status(`${lp.adminUrl}/healthz`, undefined, agent)).code, 200);
  assert.equal((await status(`${lp.adminUrl}/ui/data`, undefined, agent)).code, 401);
  assert.equal((await status(`${lp.adminUrl}/ui/data`, `Bearer ${TOKEN}`, agent)).code, 200);
  // Plain HTTP on the TLS port gets no answer from the admin app.
  await assert.rejects(request(`${lp.adminUrl.replace('https:', 'http:')}/healthz`).then((r) => r.body.text()));
});

test('serve --check-config: the admin credentials redacted; a missing token file or certificate is one line, exit 2', async () => {
  const file = join(dir, 'logprobe.yaml');
  writeFileSync(file, `admin:\n  auth:\n    basicAuthUsers:\n      ops: "${HASH}"\n    metrics: true\n`);
  const ok = await runCli(['serve', '--check-config', '--config', file], {
    env: { LOGPROBE_ADMIN_BEARER_TOKEN: TOKEN },
  });
  assert.equal(ok.code, 0, ok.stderr);
  assert.doesNotMatch(ok.stdout + ok.stderr, new RegExp(`${TOKEN}|${HASH.replace(/\$/g, '\\$')}`));
  assert.match(ok.stdout, /bearerToken: "?\[redacted\]"? # env LOGPROBE_ADMIN_BEARER_TOKEN/);
  assert.match(ok.stdout, /ops: "?\[redacted\]"?/);

  for (const [yaml, line] of [
    [
      'admin: { auth: { bearerTokenFile: /nonexistent/token } }',
      /admin\.auth\.bearerTokenFile: cannot read \/nonexistent\/token \(no such file\)/,
    ],
    [
      'admin: { tls: { certFile: /nonexistent/c.pem, keyFile: /nonexistent/k.pem } }',
      /admin\.tls\.certFile: cannot read/,
    ],
    [`admin: { auth: { bearerToken: ${TOKEN} } }`, /admin\.auth\.bearerToken: not written in the file/],
    [
      'admin: { auth: { basicAuthUsers: { ops: hunter2 } } }',
      /admin\.auth\.basicAuthUsers\.ops: expected a bcrypt hash, never the password itself/,
    ],
  ] as const) {
    writeFileSync(file, `${yaml}\n`);
    const r = await runCli(['serve', '--check-config', '--config', file]);
    assert.equal(r.code, 2, yaml);
    assert.match(r.stderr, line);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.doesNotMatch(r.stderr, new RegExp(`${TOKEN}|hunter2`));
  }
});

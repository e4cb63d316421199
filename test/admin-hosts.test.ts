import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parse, parseAllDocuments } from 'yaml';
import { AdminHosts } from '../src/admin/hosts.js';
import { buildConfig } from '../src/config/load.js';
import { getWithHost, rawExchange } from './helpers/host.js';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import { startUpstream } from './helpers/upstream.js';

// admin.allowedHosts (#23): a DNS-rebinding page reaches the admin port under its own name; every
// name but localhost, the bind address and the listed ones gets 421 on every route, IP literals pass.

const ROUTES = ['/metrics', '/healthz', '/readyz', '/ui', '/ui/data', '/no-such-route'];

async function candidate(t: import('node:test').TestContext): Promise<string> {
  const up = await startUpstream((_req, res) => res.end('ok'));
  t.after(() => up.close());
  return up.url;
}

test('the admin port answers localhost, IP literals and admin.allowedHosts, and 421 for every other name on every route', async (t) => {
  const lp = await startLogprobe({
    candidate: { url: await candidate(t) },
    admin: { allowedHosts: ['logprobe-admin.monitoring.svc'] },
  });
  t.after(() => lp.close());

  const allowed = [
    '10.1.2.3:9464', // a pod IP, as Prometheus and the kubelet send it
    '10.1.2.3',
    '127.0.0.1:9464',
    '[::1]:9464',
    '[2001:db8::1]',
    '0x7f000001', // an IPv4 form: the browser reads it as 127.0.0.1, not as a name
    'localhost:1234',
    'localhost',
    'LocalHost.',
    'logprobe-admin.monitoring.svc:9464', // configured (any port, any case, trailing dot)
    'LOGPROBE-ADMIN.monitoring.svc.',
  ];
  const refused = [
    'attacker.example',
    'attacker.example:9464',
    'localhost.attacker.example',
    '127.0.0.1.attacker.example',
    'logprobe-admin.monitoring.svc.attacker.example',
    'user@127.0.0.1',
    '127.0.0.1/x',
    'monitoring.svc',
  ];
  for (const path of ROUTES) {
    const expectOk = path === '/no-such-route' ? 404 : 200;
    for (const host of allowed)
      assert.equal((await getWithHost(lp.adminUrl, path, host)).status, expectOk, `${path} Host: ${host}`);
    for (const host of refused) {
      const r = await getWithHost(lp.adminUrl, path, host);
      assert.equal(r.status, 421, `${path} Host: ${host}`);
      assert.match(r.contentType, /^application\/json/);
      const body = JSON.parse(r.body) as { status: string; error: string };
      assert.equal(body.status, 'misdirected');
      assert.match(body.error, /admin\.allowedHosts/);
      assert.ok(!r.body.includes('logprobe_'), 'no metric leaks in the refusal');
    }
  }

  // /ui/data's pairs and /metrics' series are what a rebinding page is after: neither shows.
  const data = await getWithHost(lp.adminUrl, '/ui/data', 'attacker.example');
  assert.doesNotMatch(data.body, /"worker"/);

  const metrics = await getWithHost(lp.adminUrl, '/metrics', '127.0.0.1');
  assert.equal(metricValue(metrics.body, 'logprobe_admin_misdirected_total'), ROUTES.length * refused.length + 1);
  const warned = lp.logs.lines.filter(
    (l) =>
      l.msg ===
      'admin port: request for a Host not in admin.allowedHosts answered 421 (add the name there if it is yours)',
  );
  assert.equal(warned.length, 1, 'logged once, not per request');
  assert.equal(warned[0]!.host, 'attacker.example');
});

test('a request without Host (HTTP/1.0) is answered; HTTP/1.1 without Host is refused by node with 400', async (t) => {
  const lp = await startLogprobe({ candidate: { url: await candidate(t) } });
  t.after(() => lp.close());
  const http10 = await rawExchange(lp.adminUrl, 'GET /healthz HTTP/1.0\r\n\r\n');
  assert.match(http10, /^HTTP\/1\.1 200 /);
  assert.match(http10, /\{"status":"ok"\}$/);
  const http11 = await rawExchange(lp.adminUrl, 'GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n');
  assert.match(http11, /^HTTP\/1\.1 400 /);
  const http10Named = await rawExchange(lp.adminUrl, 'GET /metrics HTTP/1.0\r\nHost: attacker.example\r\n\r\n');
  assert.match(http10Named, /^HTTP\/1\.1 421 /);
});

test('the image and the k8s manifests (admin on 0.0.0.0, scraped by pod IP) keep working', async (t) => {
  const url = await candidate(t);
  // config/k8s/configmap.yaml's logprobe.yaml, and the Dockerfile's default config, as written.
  const configMap = parseAllDocuments(
    readFileSync(new URL('../config/k8s/configmap.yaml', import.meta.url), 'utf8'),
  )[0]!.toJS() as { data: Record<string, string> };
  const { auth: k8sAuth, ...k8sAdmin } = (
    parse(configMap.data['logprobe.yaml']!) as {
      admin: { host: string; port: number; allowedHosts?: string[]; auth?: unknown };
    }
  ).admin;
  // The live page's token from the Secret (test/fleet-k8s.test.ts); absent here, as without the Secret.
  assert.deepEqual(k8sAuth, { bearerToken: '${ADMIN_TOKEN}' });
  const dockerfile = readFileSync(new URL('../Dockerfile', import.meta.url), 'utf8');
  const imageAdmin = /'admin: \{ host: ([^,]+), port: (\d+) \}'/.exec(dockerfile);
  assert.ok(imageAdmin, 'the Dockerfile writes an admin line');
  assert.deepEqual(k8sAdmin, { host: '0.0.0.0', port: 9464 });
  assert.equal(imageAdmin[1], '0.0.0.0');

  const lp = await startLogprobe({ candidate: { url }, admin: { ...k8sAdmin, port: 0 } });
  t.after(() => lp.close());
  const port = new URL(lp.adminUrl).port;
  const local = `http://127.0.0.1:${port}`;
  for (const path of ['/metrics', '/healthz', '/readyz']) {
    assert.equal((await getWithHost(local, path, '10.1.2.3:9464')).status, 200, `${path} by pod IP`);
    assert.equal((await getWithHost(local, path, `127.0.0.1:${port}`)).status, 200, `${path}: the image's HEALTHCHECK`);
    assert.equal((await getWithHost(local, path, 'attacker.example')).status, 421);
  }
  // Without the Secret's token the live page is refused on this non-loopback bind (test/admin-auth.test.ts).
  assert.equal((await getWithHost(local, '/ui/data', '10.1.2.3:9464')).status, 403);
});

test('AdminHosts: a name as the bind address is allowed, addresses add nothing, allowedHosts entries are validated', () => {
  const named = new AdminHosts('logprobe.internal', []);
  assert.equal(named.allows('logprobe.internal:9464'), true);
  assert.equal(named.allows('other.internal'), false);
  const any = new AdminHosts('0.0.0.0', []);
  assert.equal(any.allows('0.0.0.0'), true);
  assert.equal(any.allows('attacker.example'), false);
  assert.equal(new AdminHosts('::', []).allows('[::]:9464'), true);

  assert.deepEqual(buildConfig({ admin: { allowedHosts: ['Admin.Example.', 'metrics'] } }).admin.allowedHosts, [
    'admin.example',
    'metrics',
  ]);
  for (const bad of ['admin.example:9464', 'http://admin.example', '', 'a b']) {
    assert.throws(
      () => buildConfig({ admin: { allowedHosts: [bad] } }),
      /admin\.allowedHosts\.0: expected a host name without port or scheme/,
      bad,
    );
  }
});

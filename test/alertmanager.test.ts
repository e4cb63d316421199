// The alert webhook against a real Alertmanager (Debian's `prometheus-alertmanager`, started by
// the test): a candidate with a state shift fires LogprobGlobalShift, Alertmanager lists it active
// with logprobe's labels and a generatorURL back to the live page; the candidate fixed, the
// resolved alert ends it and Alertmanager lists it no more.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { request } from 'undici';
import { startDaemon } from './helpers/daemon.js';
import { startLogprobe } from './helpers/logprobe.js';
import { startSim } from './helpers/sim.js';
import { startUpstream } from './helpers/upstream.js';

const BIN = 'prometheus-alertmanager';
const HINT = `${BIN} not installed: apt-get install -y prometheus-alertmanager`;

function needAlertmanager(t: TestContext): boolean {
  const r = spawnSync(BIN, ['--version'], { encoding: 'utf8' });
  if (r.error === undefined && r.status === 0) return true;
  if (process.env.CI) assert.fail(`${HINT} (.ci/run installs it; CI must run the Alertmanager test)`);
  t.skip(HINT);
  return false;
}

interface AmAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  generatorURL?: string;
  startsAt: string;
  endsAt: string;
  status: { state: string };
}

async function amAlerts(url: string): Promise<AmAlert[]> {
  const res = await request(`${url}/api/v2/alerts`, { headersTimeout: 5000, bodyTimeout: 5000 });
  assert.equal(res.statusCode, 200);
  return (await res.body.json()) as AmAlert[];
}

async function send(proxyUrl: string, i: number) {
  const res = await request(`${proxyUrl}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({
      model: 'sim',
      prompt: `Prompt ${i}: the capital of France is`,
      max_tokens: 24,
      temperature: 0.8,
    }),
    headers: { 'content-type': 'application/json' },
  });
  await res.body.dump();
  assert.equal(res.statusCode, 200);
}

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 15_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('Alertmanager receives LogprobGlobalShift firing with a link to the live page, then resolved', async (t) => {
  if (!needAlertmanager(t)) return;
  const am = await startDaemon({
    name: BIN,
    files: { 'am.yml': 'route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n' },
    args: (dir, port) => [
      `--config.file=${join(dir, 'am.yml')}`,
      `--storage.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--cluster.listen-address=',
      '--log.level=warn',
    ],
  });
  t.after(() => am.close());
  const baseline = await startSim();
  const faulty = await startSim({ stateShift: 0.6 });
  const clean = await startSim();
  let target = faulty.url;
  // The candidate is a switch in front of a faulty and a clean engine: a fix being deployed.
  const candidate = await startUpstream(async (req, res, body) => {
    const up = await request(target + req.url, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json' },
    });
    res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type']) });
    res.end(Buffer.from(await up.body.arrayBuffer()));
  });
  t.after(() => Promise.all([baseline.close(), faulty.close(), clean.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1 },
    alert: { window: 10, minRequests: 5, fireFraction: 0.5, forSeconds: 1, webhookUrl: `${am.url}/api/v2/alerts` },
  });
  t.after(() => lp.close());

  const global = async () => (await amAlerts(am.url)).find((a) => a.labels.alertname === 'LogprobGlobalShift');
  for (let i = 0; i < 10; i++) await send(lp.proxyUrl, i);
  await lp.runtime.mirror!.idle();
  const fired = await until('the firing alert in Alertmanager', global);
  assert.equal(fired.status.state, 'active', am.output());
  assert.equal(fired.labels.severity, 'critical');
  assert.equal(fired.labels.service, 'logprobe');
  assert.match(fired.annotations.summary ?? '', /every decode step moved/);
  assert.ok(Number(fired.annotations.pooled_share) >= 0.5, `pooled share ${fired.annotations.pooled_share}`);
  // The link back: the live page on logprobe's admin address, which answers it.
  assert.equal(fired.generatorURL, `${lp.adminUrl}/ui`);
  const page = await request(fired.generatorURL!);
  assert.equal(page.statusCode, 200);
  assert.match(await page.body.text(), /<html/i);

  target = clean.url;
  for (let i = 0; i < 10; i++) await send(lp.proxyUrl, 100 + i);
  await lp.runtime.mirror!.idle();
  await until('the resolved alert to leave Alertmanager', async () =>
    (await global()) === undefined ? true : undefined,
  );
});

test('generatorURL: the configured link, else the live page on the admin address', async () => {
  const { generatorUrl } = await import('../src/mirror/notify.js');
  const cfg = (host: string, url: string | null = null) =>
    ({ admin: { host, port: 9464 }, alert: { generatorUrl: url } }) as Parameters<typeof generatorUrl>[0];
  assert.equal(generatorUrl(cfg('127.0.0.1')), 'http://127.0.0.1:9464/ui');
  assert.equal(
    generatorUrl(cfg('127.0.0.1'), 40001),
    'http://127.0.0.1:40001/ui',
    'the bound port, not the configured 0',
  );
  assert.equal(generatorUrl(cfg('0.0.0.0')), 'http://localhost:9464/ui', 'a wildcard bind links to localhost');
  assert.equal(generatorUrl(cfg('::')), 'http://localhost:9464/ui');
  assert.equal(generatorUrl(cfg('::1')), 'http://[::1]:9464/ui');
  assert.equal(generatorUrl(cfg('0.0.0.0', 'https://logprobe.example/ui')), 'https://logprobe.example/ui');
});

test('alert summaries: the global alert names both loci, "small" only near the floor', async () => {
  const { alertSummary } = await import('../src/mirror/notify.js');
  const evidence = {
    pooledShare: 0.9,
    requestsInWindow: 20,
    medianShift: 0.5,
    cusum: 6,
    cusumRequests: 21,
    medianX: 1.4,
    exampleRequestId: null,
  };
  const t = (
    alert: 'LogprobGlobalShift' | 'LogprobSustainedShift' | 'LogprobSelfInconsistency',
    medianX: number | null,
  ) =>
    ({ alert, to: 'firing', at: 1, startsAt: 1, evidence: { ...evidence, medianX } }) as unknown as Parameters<
      typeof alertSummary
    >[0];
  assert.match(alertSummary(t('LogprobSustainedShift', 1.4)), /^a small shift \(median 1\.40× the noise floor\)/);
  assert.match(alertSummary(t('LogprobSustainedShift', 13.4)), /^a shift of 13\.40× the noise floor/);
  assert.doesNotMatch(alertSummary(t('LogprobSustainedShift', 13.4)), /small/);
  assert.match(
    alertSummary(t('LogprobGlobalShift', null)),
    /compute: the prompt moved too; decode state: only the continuation/,
  );
});

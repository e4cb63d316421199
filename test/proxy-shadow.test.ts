import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { request } from 'undici';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, startSim } from './helpers/sim.js';
import { stripShadowSuffix } from '../src/proxy/shadow.js';
import { loadConfig } from '../src/config/load.js';
import type { MirroredPair } from '../src/pair/types.js';

const FAST_ALERTS = { window: 10, minRequests: 5, fireFraction: 0.5, forSeconds: 0, cusum: { k: 0.5, h: 5 } };

function body(i: number): string {
  return JSON.stringify({
    model: 'sim',
    messages: [{ role: 'user', content: `shadow question ${i}: why is the sky blue?` }],
    max_tokens: 16,
    temperature: 0.9,
  });
}

async function metrics(adminUrl: string): Promise<string> {
  return (await request(`${adminUrl}/metrics`)).body.text();
}

test('stripShadowSuffix: the -shadow Envoy adds, before or after the port, and nothing else', () => {
  assert.equal(stripShadowSuffix('llm.svc.cluster.local-shadow'), 'llm.svc.cluster.local');
  assert.equal(stripShadowSuffix('llm-shadow:8000'), 'llm:8000');
  assert.equal(stripShadowSuffix('127.0.0.1-shadow:8000'), '127.0.0.1:8000');
  assert.equal(stripShadowSuffix('[::1]-shadow:8000'), '[::1]:8000');
  assert.equal(stripShadowSuffix('llm:8000-shadow'), 'llm:8000');
  assert.equal(stripShadowSuffix('llm'), 'llm');
  assert.equal(stripShadowSuffix('shadow-llm:80'), 'shadow-llm:80');
  assert.equal(stripShadowSuffix('llm-shadowy'), 'llm-shadowy');
});

test('mode: inline by default; serve --mode and LOGPROBE_MODE set it; anything else is refused with the key named', () => {
  assert.equal(loadConfig({ env: {} }).mode, 'inline');
  assert.equal(loadConfig({ env: { LOGPROBE_MODE: 'shadow' } }).mode, 'shadow');
  assert.equal(loadConfig({ env: {}, overrides: { mode: 'shadow' } }).mode, 'shadow');
  assert.throws(
    () => loadConfig({ env: { LOGPROBE_MODE: 'tap' } }),
    /mode \(from LOGPROBE_MODE=tap\): expected inline or shadow/,
  );
});

test('shadow mode: each copy is answered 202 with an empty body, never forwarded, and mirrored to candidate and baseline', async (t) => {
  const baseline = await startSim();
  const candidate = await startSim({ stateShift: 0.6 });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const pairs: MirroredPair[] = [];
  const lp = await startLogprobe(
    {
      mode: 'shadow',
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1 },
      alert: FAST_ALERTS,
    },
    { listeners: { onPair: (p) => pairs.push(p) } },
  );
  t.after(() => lp.close());

  for (let i = 0; i < 8; i++) {
    const res = await request(`${lp.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      body: body(i),
      headers: { 'content-type': 'application/json', host: 'llm.prod.svc-shadow:8000', 'x-request-id': `shadow-${i}` },
    });
    assert.equal(res.statusCode, 202);
    assert.equal(res.headers['content-length'], '0');
    assert.equal(await res.body.text(), '');
  }
  // A copy that is not a generation: answered, not mirrored, not forwarded.
  const models = await request(`${lp.proxyUrl}/v1/models`, { headers: { 'x-request-id': 'models-copy' } });
  assert.equal(models.statusCode, 202);
  await models.body.dump();
  // x-logprobe-mirror: 0 still opts a request out.
  const out = await request(`${lp.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    body: body(99),
    headers: { 'content-type': 'application/json', 'x-logprobe-mirror': '0' },
  });
  assert.equal(out.statusCode, 202);
  await out.body.dump();

  await lp.runtime.mirror!.idle();
  assert.equal(pairs.length, 8);
  assert.ok(pairs.every((p) => p.outcome === 'ok' && p.analysis !== null));
  assert.deepEqual(pairs.map((p) => p.id).sort(), Array.from({ length: 8 }, (_, i) => `shadow-${i}`).sort());
  assert.ok(
    pairs.every((p) => p.clientHeaders.host === 'llm.prod.svc:8000'),
    'the -shadow suffix is stripped',
  );

  // The candidate saw only the mirror's rewritten copies (greedy, logprobs, the mirror's seed):
  // none of the client requests themselves (temperature 0.9), nothing for /v1/models.
  const gens = candidate.requests.filter((r) => r.path === '/v1/chat/completions' || r.path === '/v1/completions');
  assert.ok(gens.length >= 8, `${gens.length} copies`);
  for (const r of gens) {
    const b = JSON.parse(r.body) as Record<string, unknown>;
    assert.equal(b.temperature, 0, 'a mirrored copy, not the client request');
    assert.equal(b.seed, 1234);
  }
  // (The engine profile's detection may ask the candidate for /v1/models itself: not the copy's.)
  assert.ok(
    !candidate.requests.some((r) => r.headers['x-request-id'] === 'models-copy'),
    'the /v1/models copy was not forwarded',
  );
  assert.ok(!candidate.requests.some((r) => r.body.includes('shadow question 99')), 'the opted-out copy went nowhere');

  const m = await metrics(lp.adminUrl);
  assert.equal(
    metricValue(m, 'logprobe_shadow_requests_total', { route: '/v1/chat/completions', status_class: '2xx' }),
    9,
  );
  assert.equal(metricValue(m, 'logprobe_shadow_requests_total', { route: '/v1/models', status_class: '2xx' }), 1);
  assert.equal(metricValue(m, 'logprobe_proxy_requests_total'), 0, 'nothing was proxied');
  assert.equal(metricValue(m, 'logprobe_mirror_total', { outcome: 'ok' }), 8);
  assert.ok(
    (metricValue(m, 'logprobe_verdicts_total', { kind: 'pair', verdict: 'global_shift' }) ?? 0) +
      (metricValue(m, 'logprobe_verdicts_total', { kind: 'pair', verdict: 'early_shift' }) ?? 0) ===
      8,
  );
  assert.equal(metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }), 1);

  const lines = lp.logs.lines.filter((l) => l.msg === 'shadow request');
  assert.equal(lines.length, 10);
  assert.equal(lines[0]!.host, 'llm.prod.svc:8000');
  assert.equal(lines[0]!.shadowHost, 'llm.prod.svc-shadow:8000');
  assert.equal(lines[0]!.status, 202);
  assert.ok(lp.logs.lines.some((l) => l.msg === 'logprobe listening' && l.mode === 'shadow'));
});

test('shadow mode: a body over limits.bodyMB is refused 413 (by its length, or as it streams), and nothing is mirrored', async (t) => {
  const baseline = await startSim();
  const candidate = await startSim();
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    mode: 'shadow',
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1 },
    limits: { bodyMB: 0.01 },
  });
  t.after(() => lp.close());
  const big = JSON.stringify({ model: 'sim', prompt: 'x'.repeat(20_000), max_tokens: 4 });
  const res = await request(`${lp.proxyUrl}/v1/completions`, {
    method: 'POST',
    body: big,
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(res.statusCode, 413);
  assert.match(await res.body.text(), /limits\.bodyMB/);

  // Chunked, no length: refused when the limit is passed (a sampled copy is read, an unsampled one discarded).
  for (const forced of ['1', '0']) {
    const { port } = new URL(lp.proxyUrl);
    const answer = await new Promise<string>((resolve, reject) => {
      const sock = connect(Number(port), '127.0.0.1');
      let got = '';
      sock.on('data', (d) => (got += d.toString('latin1')));
      sock.on('close', () => resolve(got));
      sock.on('error', (err) => (got ? resolve(got) : reject(err)));
      const chunk = 'y'.repeat(4096);
      sock.write(
        `POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nx-logprobe-mirror: ${forced}\r\n\r\n`,
      );
      for (let i = 0; i < 4; i++) sock.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
      sock.end('0\r\n\r\n');
    });
    assert.match(answer, /^HTTP\/1\.1 413 /, `x-logprobe-mirror: ${forced}`);
  }
  await lp.runtime.mirror!.idle();
  assert.equal(candidate.requests.length, 0);
  const m = await metrics(lp.adminUrl);
  assert.equal(metricValue(m, 'logprobe_shadow_requests_total', { status_class: '4xx' }), 3);
  assert.equal(metricValue(m, 'logprobe_mirror_total', { outcome: 'ok' }) ?? 0, 0);
});

test('docs/operations.md: the shadow-mode config is valid, and the nginx snippet is the tested one', async () => {
  const { readFileSync } = await import('node:fs');
  const { parse } = await import('yaml');
  const { buildConfig } = await import('../src/config/load.js');
  const doc = readFileSync(new URL('../docs/operations.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf('## Shadow mode'), doc.indexOf('## The live page'));
  const blocks = [...section.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map((m) => ({ lang: m[1], text: m[2]! }));
  const own = blocks.find((b) => b.lang === 'yaml' && b.text.startsWith('mode: shadow'));
  assert.ok(own);
  const c = buildConfig(parse(own.text));
  assert.equal(c.mode, 'shadow');
  assert.equal(c.mirror.sampleRate, 1);
  const nginx = blocks.find((b) => b.lang === 'nginx')!.text;
  const test = readFileSync(new URL('./shadow-nginx.test.ts', import.meta.url), 'utf8');
  for (const directive of [
    'mirror /_logprobe_mirror;',
    'mirror_request_body on;',
    'internal;',
    'proxy_pass http://logprobe$request_uri;',
    'proxy_set_header Host $host;',
    'proxy_set_header X-Request-Id $request_id;',
  ]) {
    assert.ok(nginx.includes(directive) && test.includes(directive), directive);
  }
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, startSim } from './helpers/sim.js';
import { startUpstream } from './helpers/upstream.js';

async function send(proxyUrl: string, i: number, maxTokens = 24) {
  const res = await request(`${proxyUrl}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({
      model: 'sim',
      prompt: `Prompt ${i}: the capital of France is`,
      max_tokens: maxTokens,
      temperature: 0.8,
    }),
    headers: { 'content-type': 'application/json' },
  });
  await res.body.dump();
  return res.statusCode;
}

async function metrics(adminUrl: string): Promise<string> {
  return (await request(`${adminUrl}/metrics`)).body.text();
}

test('a small sustained shift fires LogprobSustainedShift but not LogprobGlobalShift', async (t) => {
  const baseline = await startSim();
  // stateShift 0.1 on this model: maxShift ≈ 1.5× the floor on every request, pooled share ≈ 0.26.
  const candidate = await startSim({ stateShift: 0.1 });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1, maxTokens: 32 },
    alert: { window: 20, minRequests: 10, fireFraction: 0.5, forSeconds: 0 },
  });
  t.after(() => lp.close());
  for (let i = 0; i < 30; i++) assert.equal(await send(lp.proxyUrl, i, 32), 200);
  await lp.runtime.mirror!.idle();
  const m = await metrics(lp.adminUrl);
  assert.equal(metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobSustainedShift' }), 1);
  assert.equal(metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }), 0);
  const ratio = metricValue(m, 'logprobe_window_global_shift_ratio') ?? 1;
  assert.ok(ratio < 0.5, `pooled share ${ratio}`);
  assert.ok((metricValue(m, 'logprobe_cusum_statistic') ?? 0) > 5);
});

test("calibration measures each backend's run-to-run noise and noiseFloor auto follows the trusted side (the baseline)", async (t) => {
  const baseline = await startSim({ noise: 0.001 });
  const candidate = await startSim({ noise: 0.01 });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1, maxTokens: 16 },
    analysis: { noiseFloor: 'auto' },
    calibration: { rate: 1, margin: 3, minSamples: 10, minFloor: 0.01 },
  });
  t.after(() => lp.close());
  let m = await metrics(lp.adminUrl);
  assert.equal(
    metricValue(m, 'logprobe_noise_floor_nats', { model: 'other' }),
    0.01,
    'minFloor until minSamples repeats exist (a slice seen first starts there)',
  );
  for (let i = 0; i < 15; i++) assert.equal(await send(lp.proxyUrl, i, 16), 200);
  await lp.runtime.mirror!.idle();
  m = await metrics(lp.adminUrl);
  const cand = metricValue(m, 'logprobe_noise_floor_observed_nats', { backend: 'candidate', model: 'sim' })!;
  const base = metricValue(m, 'logprobe_noise_floor_observed_nats', { backend: 'baseline', model: 'sim' })!;
  assert.ok(cand >= 0.01 && cand <= 0.1, `candidate p99 ${cand} for σ = 0.01`);
  assert.ok(base >= 0.001 && base <= 0.01, `baseline p99 ${base} for σ = 0.001`);
  assert.ok(cand / base > 4 && cand / base < 25, `ten times the noise gives ~ten times the p99 (${cand / base})`);
  const floor = metricValue(m, 'logprobe_noise_floor_nats', { model: 'sim' })!;
  assert.ok(
    Math.abs(floor - Math.max(0.01, base * 3)) < 1e-9,
    `auto floor ${floor} = max(minFloor, baseline p99 × margin), never the candidate's ${cand}`,
  );
});

test('the webhook receives the firing and the resolved alert in Alertmanager v2 format', async (t) => {
  const baseline = await startSim();
  const faulty = await startSim({ stateShift: 0.6 });
  let target = faulty.url;
  const clean = await startSim();
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
  const received: Array<Array<Record<string, unknown>>> = [];
  const webhook = await startUpstream((_req, res, body) => {
    received.push(JSON.parse(body.toString()) as Array<Record<string, unknown>>);
    res.end('{}');
  });
  t.after(() => Promise.all([baseline.close(), faulty.close(), clean.close(), candidate.close(), webhook.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1 },
    alert: { window: 10, minRequests: 5, fireFraction: 0.5, forSeconds: 1, webhookUrl: `${webhook.url}/api/v2/alerts` },
  });
  t.after(() => lp.close());

  const globalAlerts = () =>
    received.flat().filter((a) => (a.labels as Record<string, string>).alertname === 'LogprobGlobalShift');
  for (let i = 0; i < 10; i++) await send(lp.proxyUrl, i);
  await lp.runtime.mirror!.idle();
  const deadline = Date.now() + 5000;
  while (globalAlerts().length < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  const fired = globalAlerts()[0];
  assert.ok(fired, 'firing alert posted');
  assert.equal(fired.endsAt, undefined);
  assert.match(String(fired.startsAt), /^\d{4}-\d{2}-\d{2}T/);
  assert.equal((fired.labels as Record<string, string>).severity, 'critical');
  assert.match(String((fired.annotations as Record<string, string>).summary), /every decode step moved/);

  target = clean.url;
  for (let i = 0; i < 10; i++) await send(lp.proxyUrl, 100 + i);
  await lp.runtime.mirror!.idle();
  const deadline2 = Date.now() + 5000;
  while (globalAlerts().length < 2 && Date.now() < deadline2) await new Promise((r) => setTimeout(r, 100));
  const resolved = globalAlerts()[1];
  assert.ok(resolved, 'resolved alert posted');
  assert.match(String(resolved.endsAt), /^\d{4}-\d{2}-\d{2}T/);
  assert.equal(resolved.startsAt, fired.startsAt);
  const warnLines = lp.logs.lines.filter((l) => l['level'] === 40 || l['level'] === 'warn');
  assert.ok(
    warnLines.some((l) => String(l['msg']).startsWith('LogprobGlobalShift (model sim) firing')),
    'the transition is logged at warn',
  );
  assert.ok(
    warnLines.some((l) => (l['evidence'] as Record<string, unknown> | undefined)?.['exampleRequestId']),
    'with an example request id',
  );
});

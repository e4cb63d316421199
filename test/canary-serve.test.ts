/**
 * Canaries in `serve` (issue #37): with no client traffic at all, logprobe's own probes go to the
 * candidate and the baseline every `canary.intervalSeconds`; a state-shift fault on the candidate
 * fires LogprobCanaryShift within two intervals and a redeploy without it resolves it; a tiny
 * token budget stops the probes, counted, never passed; a busy client path pauses them, counted.
 * Real engines (the simulated vLLM of @logprobe/engine) on port 0, behind a switch that plays the
 * redeploy and holds client requests open.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { request } from 'undici';
import { createSimModel, startEngineServer, type SimOptions } from '@logprobe/engine';
import type { AlertTransition } from '../src/core/detector.js';
import type { MirroredPair } from '../src/pair/types.js';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { startLogprobe } from './helpers/logprobe.js';
import { candidateSwitch } from './helpers/switch.js';
import { metricValue } from './helpers/sim.js';
import { tempDir } from './helpers/capture.js';
import { runCli } from './helpers/cli.js';

const engine = (o: SimOptions = {}) =>
  startEngineServer({ model: createSimModel({ seed: 5, id: 'm', ...o }), api: 'vllm' });

async function scrape(adminUrl: string): Promise<string> {
  return (await request(`${adminUrl}/metrics`)).body.text();
}

async function until(what: string, cond: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('an idle serve with canaries: a state-shift fault fires LogprobCanaryShift within two intervals, a redeploy without it resolves it', async (t) => {
  const [faulty, clean, base] = await Promise.all([engine({ stateShift: 0.6 }), engine(), engine()]);
  t.after(() => Promise.all([faulty.close(), clean.close(), base.close()]));
  const sw = await candidateSwitch(t, faulty.url);
  const alerts: Array<AlertTransition & { t: number }> = [];
  const pairs: MirroredPair[] = [];
  const INTERVAL = 2;
  const dir = tempDir(t);
  const lp = await startLogprobe(
    {
      capture: { enabled: true, dir },
      candidate: { url: sw.url },
      baseline: { url: base.url },
      mirror: { sampleRate: 0 },
      canary: { enabled: true, intervalSeconds: INTERVAL, jitterSeconds: 0 },
    },
    {
      listeners: {
        onAlert: (a) => alerts.push({ ...a, t: Date.now() }),
        onPair: (p) => pairs.push(p),
      },
    },
  );
  t.after(() => lp.close());
  const started = Date.now();
  await until('LogprobCanaryShift firing', () => alerts.some((a) => a.to === 'firing'), 4 * INTERVAL * 1000);
  const fired = alerts.find((a) => a.to === 'firing')!;
  t.diagnostic(`fired ${((fired.t - started) / 1000).toFixed(2)} s after start: ${fired.detail}`);
  assert.equal(fired.alert, 'LogprobCanaryShift');
  assert.equal(fired.model, 'm');
  assert.ok(fired.t - started <= 2 * INTERVAL * 1000, 'within two canary intervals');
  assert.match(
    fired.detail ?? '',
    /canary round \d+ \(model m\) at floor [\d.e+-]+ nats: changed: \d+ of 12 probes shifted/,
  );
  // Every pair was a canary's: no client request was ever sent.
  assert.ok(pairs.length >= 12);
  assert.ok(pairs.every((p) => p.canary !== undefined && Object.keys(p.clientHeaders).length === 0));
  const m = await scrape(lp.adminUrl);
  assert.equal(metricValue(m, 'logprobe_proxy_requests_total', { route: '/v1/completions', status_class: '2xx' }), 0);
  assert.ok(metricValue(m, 'logprobe_canary_probes_total', { outcome: 'ok' })! >= 12);
  assert.ok(metricValue(m, 'logprobe_canary_tokens_total', {})! > 0);
  assert.equal(metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobCanaryShift', model: 'm' }), 1);
  // The live page: the canary pairs tagged, the traffic's verdict mix untouched, the model's canary alert firing.
  const live = (await (await request(`${lp.adminUrl}/ui/data`)).body.json()) as {
    data: {
      pairs: Array<{ canary?: { round: number } }>;
      verdicts: Record<string, number>;
      models: Array<{ model: string; alerts: Array<{ alert: string; phase: string }> }>;
    };
  };
  assert.ok(live.data.pairs.length > 0 && live.data.pairs.every((p) => p.canary !== undefined));
  assert.equal(
    Object.values(live.data.verdicts).reduce((a, b) => a + b, 0),
    0,
    'canary pairs are not in the verdict mix',
  );
  const row = live.data.models.find((m) => m.model === 'm');
  assert.equal(row?.alerts.find((a) => a.alert === 'LogprobCanaryShift')?.phase, 'firing');
  // The redeploy: the same server without the fault.
  const redeployed = Date.now();
  sw.to(clean.url);
  await until('LogprobCanaryShift resolved', () => alerts.some((a) => a.to === 'resolved'), 4 * INTERVAL * 1000);
  const resolved = alerts.find((a) => a.to === 'resolved')!;
  assert.ok(resolved.t - redeployed <= 2 * INTERVAL * 1000 + 1000, 'resolved within two intervals of the redeploy');
  assert.equal(alerts.filter((a) => a.to === 'firing').length, 1, 'fired once');
  // Offline: the capture holds the canary pairs, and analyze counts them apart from traffic.
  await lp.close();
  const files = readdirSync(dir).map((f) => join(dir, f));
  const text = await runCli(['analyze', ...files], { timeoutMs: 60_000 });
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, /^pairs 0, compared 0/, 'no traffic: no mirrored pair');
  const rounds = new Set(pairs.map((p) => p.canary!.round)).size;
  const line = new RegExp(`^  model m: ${pairs.length} probes in ${rounds} rounds: (.*)$`, 'm').exec(text.stdout);
  assert.ok(line, text.stdout);
  const counts: Record<string, number> = {};
  for (const p of pairs) if (p.analysis) counts[p.analysis.verdict] = (counts[p.analysis.verdict] ?? 0) + 1;
  assert.deepEqual(
    Object.fromEntries(line[1]!.split(', ').map((e) => [e.split(' ')[0]!, Number(e.split(' ')[1])])),
    counts,
    'the online verdicts of the canary pairs',
  );
  const json = await runCli(['analyze', '--json', ...files], { timeoutMs: 60_000 });
  const lines = json.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { canary?: { round: number } });
  assert.equal(lines.length, pairs.length);
  assert.ok(lines.every((l) => typeof l.canary?.round === 'number'));
});

test('the token budget holds: probes stop before canary.tokensPerHour would be passed, counted as budget', async (t) => {
  const [cand, base] = await Promise.all([engine(), engine()]);
  t.after(() => Promise.all([cand.close(), base.close()]));
  const BUDGET = 400;
  const lp = await startLogprobe({
    candidate: { url: cand.url },
    baseline: { url: base.url },
    mirror: { sampleRate: 0 },
    canary: { enabled: true, intervalSeconds: 0.3, jitterSeconds: 0, tokensPerHour: BUDGET },
  });
  t.after(() => lp.close());
  await until(
    'a probe refused by the budget',
    async () =>
      (metricValue(await scrape(lp.adminUrl), 'logprobe_canary_probes_total', { outcome: 'budget' }) ?? 0) > 0,
    10_000,
  );
  await new Promise((r) => setTimeout(r, 1000));
  const m = await scrape(lp.adminUrl);
  const tokens = metricValue(m, 'logprobe_canary_tokens_total', {})!;
  const ok = metricValue(m, 'logprobe_canary_probes_total', { outcome: 'ok' })!;
  t.diagnostic(`${ok} probes sent for ${tokens} tokens, budget ${BUDGET}`);
  assert.ok(ok > 0, 'some probes went');
  assert.ok(tokens <= BUDGET, `never past the budget (${tokens} tokens)`);
  assert.ok(metricValue(m, 'logprobe_canary_probes_total', { outcome: 'budget' })! > ok, 'the rest refused, counted');
  assert.match(lp.logs.text(), /canaries paused: the next probe would pass canary\.tokensPerHour \(400\)/);
});

test('a busy client path pauses the canaries (canary.maxCandidateInFlight), counted as saturated; they resume after', async (t) => {
  const [cand, base] = await Promise.all([engine(), engine()]);
  t.after(() => Promise.all([cand.close(), base.close()]));
  const sw = await candidateSwitch(t, cand.url);
  const lp = await startLogprobe({
    candidate: { url: sw.url },
    baseline: { url: base.url },
    mirror: { sampleRate: 0 },
    canary: { enabled: true, intervalSeconds: 0.5, jitterSeconds: 0, maxCandidateInFlight: 1 },
  });
  t.after(() => lp.close());
  const ok = async () => metricValue(await scrape(lp.adminUrl), 'logprobe_canary_probes_total', { outcome: 'ok' }) ?? 0;
  await until('a first round', async () => (await ok()) >= 12, 10_000);
  // Two client requests held open at the candidate: two in flight, above the limit of 1.
  const clients = [1, 2].map(() =>
    request(`${lp.proxyUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: 'HOLD this', max_tokens: 4 }),
    }),
  );
  await until('both client requests held', () => sw.held() === 2, 5_000);
  await new Promise((r) => setTimeout(r, 600)); // the load reaches the worker (4 times a second); a round in flight ends
  const before = await ok();
  await new Promise((r) => setTimeout(r, 1500)); // three intervals
  const m = await scrape(lp.adminUrl);
  assert.equal(metricValue(m, 'logprobe_canary_probes_total', { outcome: 'ok' }), before, 'no probe while busy');
  assert.ok(metricValue(m, 'logprobe_canary_probes_total', { outcome: 'saturated' })! >= 12, 'counted as saturated');
  sw.release();
  for (const c of await Promise.all(clients)) {
    assert.equal(c.statusCode, 200, 'the clients were answered');
    await c.body.dump();
  }
  await until('probes again', async () => (await ok()) > before, 5_000);
});

test("canary.noiseFloor auto: on noisy twins the canaries learn their own floor from the baseline's repeats — inconclusive while learning, then quiet — where the traffic's fixed floor keeps firing", async (t) => {
  // Two engines of the same model, each request jittered (σ 0.05 nats on every logit): a GPU's
  // run-to-run noise, far above the 0.01-nat floor the traffic is configured with.
  const [cand, base] = await Promise.all([engine({ noise: 0.05 }), engine({ noise: 0.05 })]);
  t.after(() => Promise.all([cand.close(), base.close()]));
  const run = async (noiseFloor: 'auto' | null) => {
    const alerts: AlertTransition[] = [];
    const pairs: MirroredPair[] = [];
    const lp = await startLogprobe(
      {
        candidate: { url: cand.url },
        baseline: { url: base.url },
        mirror: { sampleRate: 0 },
        analysis: { noiseFloor: 0.01 },
        calibration: { minSamples: 12, minFloor: 0.01 },
        canary: { enabled: true, intervalSeconds: 1, jitterSeconds: 0, noiseFloor },
      },
      { listeners: { onAlert: (a) => alerts.push(a), onPair: (p) => pairs.push(p) } },
    );
    t.after(() => lp.close());
    await until('four canary rounds', () => pairs.some((p) => (p.canary?.round ?? 0) >= 4), 30_000);
    return { alerts, pairs };
  };
  const [fixed, auto] = await Promise.all([run(null), run('auto')]);
  assert.ok(
    fixed.alerts.some((a) => a.alert === 'LogprobCanaryShift' && a.to === 'firing'),
    "at the traffic's floor the noise reads as a change",
  );
  assert.deepEqual(
    auto.alerts.filter((a) => a.alert === 'LogprobCanaryShift'),
    [],
    'auto: round 1 inconclusive (learning), the later rounds the same',
  );
  const floorOf = (round: number) => [
    ...new Set(auto.pairs.filter((p) => p.canary?.round === round).map((p) => p.noiseFloor)),
  ];
  assert.deepEqual(floorOf(1), [0.01], 'round 1 at calibration.minFloor');
  const learned = floorOf(3);
  assert.equal(learned.length, 1);
  const twinShift = Math.max(...auto.pairs.filter((p) => p.canary?.round === 3).map((p) => p.analysis?.maxShift ?? 0));
  t.diagnostic(`learned floor ${learned[0]} nats; round 3's largest shift ${twinShift}`);
  assert.ok(learned[0]! > 0.05, `the floor learned above the noise: ${learned[0]}`);
});

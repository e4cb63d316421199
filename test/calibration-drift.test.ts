import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, startSim } from './helpers/sim.js';
import { startUpstream } from './helpers/upstream.js';

/**
 * #25: a candidate drifting slowly (0.01 nats an hour) must not teach `noiseFloor: auto` its
 * drift. The candidate is a switch over engines a simulated hour apart — stateShift 0, then the
 * knob for 0.08, 0.16 and 0.24 nats (8, 16 and 24 hours of drift; the sim's stateShift moves the
 * median position by ≈ 0.86× its value, bench/arl.ts calibrates it) — each with its own run-to-run
 * noise; calibration repeats every pair on both sides. The floor follows the baseline's repeats
 * alone, so it stays put while the candidate moves away, and the drift is caught, not absorbed.
 */
async function send(proxyUrl: string, i: number) {
  const res = await request(`${proxyUrl}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({ model: 'sim', prompt: `Drift ${i}: the river runs`, max_tokens: 16, temperature: 0 }),
    headers: { 'content-type': 'application/json' },
  });
  await res.body.dump();
  return res.statusCode;
}

test('a slow 0.01-nat/hour candidate drift cannot raise the auto floor: it learns from the baseline side only', async (t) => {
  const baseline = await startSim({ noise: 0.001 });
  const hours = [0, 8, 16, 24];
  const engines = await Promise.all(hours.map((h) => startSim({ noise: 0.003, stateShift: (0.01 * h) / 0.86 })));
  let phase = 0;
  const candidate = await startUpstream(async (req, res, body) => {
    const up = await request(engines[phase]!.url + req.url, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json' },
    });
    res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type']) });
    res.end(Buffer.from(await up.body.arrayBuffer()));
  });
  t.after(() => Promise.all([baseline.close(), candidate.close(), ...engines.map((e) => e.close())]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1, maxTokens: 16, concurrency: 1 },
    analysis: { noiseFloor: 'auto' },
    calibration: { rate: 1, margin: 3, minSamples: 10, minFloor: 0.005 },
    alert: { window: 20, minRequests: 10, forSeconds: 0 },
  });
  t.after(() => lp.close());
  const floors: number[] = [];
  /** The CUSUM statistic after each request, by phase. */
  const cusums: number[][] = [];
  let n = 0;
  for (phase = 0; phase < hours.length; phase++) {
    cusums.push([]);
    for (let i = 0; i < 15; i++) {
      assert.equal(await send(lp.proxyUrl, n++), 200);
      await lp.runtime.mirror!.idle();
      const after = await (await request(`${lp.adminUrl}/metrics`)).body.text();
      cusums[phase]!.push(metricValue(after, 'logprobe_cusum_statistic')!);
    }
    const m = await (await request(`${lp.adminUrl}/metrics`)).body.text();
    const floor = metricValue(m, 'logprobe_noise_floor_nats', { model: 'sim' })!;
    const base = metricValue(m, 'logprobe_noise_floor_observed_nats', { backend: 'baseline', model: 'sim' })!;
    assert.ok(
      Math.abs(floor - Math.max(0.005, 3 * base)) < 1e-9,
      `hour ${hours[phase]}: floor ${floor} = max(minFloor, 3 × the baseline's p99 ${base})`,
    );
    floors.push(floor);
  }
  // The candidate moved by 0.24 nats; the floor did not follow it.
  assert.ok(Math.max(...floors) <= 1.5 * Math.min(...floors), `floors over the drift: ${floors.join(', ')}`);
  assert.ok(
    Math.max(...floors) < 0.05,
    `the floor stays at the baseline's noise, far below the 0.24-nat drift: ${floors.join(', ')}`,
  );
  // The CUSUM: S += min(x, k + h/minRequests) − k per request, x = maxShift / floor, S ≤ 2h.
  const { h } = lp.runtime.config.alert.cusum;
  const step = h / lp.runtime.config.alert.minRequests; // the most one request adds
  const shown = cusums.map((c) => c.map((v) => v.toFixed(2)).join(' ')).join(' | ');
  // The first 10 requests are calibration's warm-up: the floor is still minFloor (0.005), a third
  // of what it learns, so each adds the full step and S reaches h on noise alone. The end-of-run
  // alert therefore cannot tell the drift from the warm-up; what S does a request can.
  // Noise, once the floor is learnt (requests 11–15 of hour 0): a request adds the full step only
  // when its maxShift reaches the floor, which the noise does not (measured over 30 such requests:
  // S rose at most 0.43 for a step of 0.5, 0.1 on average; S may also fall below h and restart
  // from 0).
  const noise = cusums[0]!;
  const rises = noise.slice(10).map((v, i) => v - noise[9 + i]!);
  assert.ok(
    rises.filter((r) => r > step - 1e-9).length <= 1 && rises.reduce((a, r) => a + r, 0) / rises.length < 0.5 * step,
    `hour 0, calibrated: S rises ${rises.map((r) => r.toFixed(3)).join(', ')} (full step ${step}; ${shown})`,
  );
  // The drift (hours 8, 16 and 24: 0.08 nats and more, ≈ 5 floors): every request adds the full
  // step, up to S's cap 2h.
  const drift = [noise[14]!, ...cusums.slice(1).flat()];
  for (let i = 1; i < drift.length; i++) {
    const expected = Math.min(2 * h, drift[i - 1]! + step);
    assert.ok(Math.abs(drift[i]! - expected) < 1e-9, `drift, request ${i}: S ${drift[i]} ≠ ${expected} (${shown})`);
  }
  const m = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  const fired =
    (metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobSustainedShift' }) ?? 0) +
    (metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }) ?? 0);
  assert.ok(fired >= 1, `the drift is caught by the end (CUSUM by phase: ${shown})`);
});

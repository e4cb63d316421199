// When the mirror's worker thread is gone or does not answer, /metrics still answers within a
// bounded time, keeps the worker's last known values — a firing alert stays firing, counters do
// not reset — and says so with logprobe_mirror_worker_up 0 (src/worker/handle.ts). The faults are
// real: test/helpers/mirror-worker-faults.mjs throws in the worker, or blocks its event loop, when
// a mirrored request asks it to.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, startSim } from './helpers/sim.js';
import { WORKER_METRICS_TIMEOUT_MS } from '../src/worker/handle.js';

const FAULTY_WORKER = new URL('./helpers/mirror-worker-faults.mjs', import.meta.url);
/** What a scrape may take at most: the worker's timeout plus the time to render the text. */
const SCRAPE_BOUND_MS = WORKER_METRICS_TIMEOUT_MS + 1500;

async function send(proxyUrl: string, prompt: string): Promise<number> {
  const res = await request(`${proxyUrl}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({ model: 'sim', prompt, max_tokens: 24 }),
    headers: { 'content-type': 'application/json' },
  });
  await res.body.dump();
  return res.statusCode;
}

async function scrape(adminUrl: string): Promise<{ text: string; ms: number }> {
  const t0 = performance.now();
  const res = await request(`${adminUrl}/metrics`);
  assert.equal(res.statusCode, 200);
  const text = await res.body.text();
  return { text, ms: performance.now() - t0 };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, cond: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** A proxy whose candidate has a corrupted prefill state: LogprobGlobalShift fires within ~10 pairs. */
async function shiftedProxy(t: { after: (fn: () => Promise<unknown>) => void }) {
  const baseline = await startSim();
  const candidate = await startSim({ stateShift: 0.6 });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe(
    {
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1 },
      alert: { window: 20, minRequests: 10, forSeconds: 0 },
    },
    { mirrorWorkerUrl: FAULTY_WORKER },
  );
  t.after(() => lp.close());
  const mirror = lp.runtime.mirror!;
  for (let i = 0; i < 30 && mirror.detectorState.global.phase !== 'firing'; i++) {
    assert.equal(await send(lp.proxyUrl, `Prompt ${i}: the capital of France is`), 200);
    await mirror.idle();
  }
  assert.equal(mirror.detectorState.global.phase, 'firing', 'LogprobGlobalShift fires on the shifted candidate');
  return { lp, mirror };
}

test('a worker that dies: /metrics keeps its last values, the firing alert stays 1, logprobe_mirror_worker_up 0', async (t) => {
  const { lp, mirror } = await shiftedProxy(t);
  // No scrape since the alert fired: the worker sent its state itself, on the transition.
  assert.equal(await send(lp.proxyUrl, 'LOGPROBE-TEST-CRASH'), 200, 'the client never notices');
  await until('the worker to exit', () => !mirror.workerRunning);

  const first = await scrape(lp.adminUrl);
  assert.ok(first.ms < SCRAPE_BOUND_MS, `/metrics answered in ${Math.round(first.ms)} ms`);
  assert.equal(metricValue(first.text, 'logprobe_mirror_worker_up'), 0);
  assert.equal(
    metricValue(first.text, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }),
    1,
    'a firing alert does not read 0',
  );
  const verdicts = metricValue(first.text, 'logprobe_verdicts_total')!;
  assert.ok(verdicts >= 10, `the verdict counters keep their values (${verdicts})`);
  assert.ok(metricValue(first.text, 'logprobe_window_global_shift_ratio')! >= 0.5, 'the window ratio as last seen');

  // Later copies are dropped by the proxy's thread, and added to the worker's last counts.
  const dropped = metricValue(first.text, 'logprobe_mirror_total', { outcome: 'dropped' })!;
  for (let i = 0; i < 3; i++) assert.equal(await send(lp.proxyUrl, `after ${i}`), 200);
  const second = await scrape(lp.adminUrl);
  assert.equal(metricValue(second.text, 'logprobe_mirror_total', { outcome: 'dropped' }), dropped + 3);
  assert.equal(metricValue(second.text, 'logprobe_verdicts_total'), verdicts, 'counters neither reset nor move');
  assert.equal(metricValue(second.text, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }), 1);
  assert.equal(metricValue(second.text, 'logprobe_mirror_worker_up'), 0);
  assert.ok(metricValue(second.text, 'process_start_time_seconds')! > 0, "the proxy's own metrics are live");
  const types = second.text.split('\n').filter((l) => l.startsWith('# TYPE '));
  assert.equal(new Set(types).size, types.length, 'every family once');
  assert.ok(
    lp.logs.lines.some((l) => l.level === 'error' && l.msg === 'mirror worker failed'),
    'the crash is logged',
  );
  assert.ok(
    lp.logs.lines.some((l) => l.level === 'error' && String(l.msg).startsWith('mirror worker stopped')),
    'the stop is logged',
  );
  assert.equal((await request(`${lp.adminUrl}/healthz`)).statusCode, 200);
});

test('a worker that does not answer does not hang /metrics: its last values with logprobe_mirror_worker_up 0, then 1 again', async (t) => {
  const { lp, mirror } = await shiftedProxy(t);
  const before = await scrape(lp.adminUrl);
  assert.equal(metricValue(before.text, 'logprobe_mirror_worker_up'), 1);
  const verdicts = metricValue(before.text, 'logprobe_verdicts_total')!;

  const hangMs = WORKER_METRICS_TIMEOUT_MS * 3;
  assert.equal(await send(lp.proxyUrl, `LOGPROBE-TEST-HANG:${hangMs}`), 200);
  await sleep(100); // the copy is handed over when the client's response closes
  const during = await scrape(lp.adminUrl);
  assert.ok(
    during.ms >= WORKER_METRICS_TIMEOUT_MS - 50 && during.ms < SCRAPE_BOUND_MS,
    `/metrics answered in ${Math.round(during.ms)} ms`,
  );
  assert.equal(metricValue(during.text, 'logprobe_mirror_worker_up'), 0);
  assert.equal(
    metricValue(during.text, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }),
    1,
    'the alert as last seen',
  );
  assert.equal(metricValue(during.text, 'logprobe_verdicts_total'), verdicts, 'the counters as last seen');
  assert.ok(mirror.workerRunning, 'a slow worker is not a dead one');

  // Once it answers again, the values are live and the worker up.
  await mirror.idle();
  const after = await scrape(lp.adminUrl);
  assert.ok(after.ms < SCRAPE_BOUND_MS);
  assert.equal(metricValue(after.text, 'logprobe_mirror_worker_up'), 1);
  assert.equal(metricValue(after.text, 'logprobe_verdicts_total'), verdicts + 1, 'the held pair was compared');
});

test('a worker that cannot start: the proxy serves, /metrics answers with logprobe_mirror_worker_up 0', async (t) => {
  const candidate = await startSim();
  t.after(() => candidate.close());
  const lp = await startLogprobe(
    { candidate: { url: candidate.url }, baseline: { url: candidate.url }, mirror: { sampleRate: 1 } },
    { mirrorWorkerUrl: new URL('./helpers/no-such-worker.mjs', import.meta.url) },
  );
  t.after(() => lp.close());
  assert.equal(await send(lp.proxyUrl, 'a request'), 200);
  const { text, ms } = await scrape(lp.adminUrl);
  assert.ok(ms < SCRAPE_BOUND_MS);
  assert.equal(metricValue(text, 'logprobe_mirror_worker_up'), 0);
  assert.equal(metricValue(text, 'logprobe_mirror_total', { outcome: 'dropped' }), 1, 'the copy is dropped, counted');
  assert.ok(lp.logs.lines.some((l) => l.level === 'error' && String(l.msg).startsWith('mirror worker stopped')));
});

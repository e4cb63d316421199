// Each metric of the catalogue names the thread that owns it and is registered only there
// (src/metrics/catalog.ts, registry.ts); /metrics adds up only the families owned by both.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { METRIC_CATALOG, metricsOf } from '../src/metrics/catalog.js';
import { Metrics } from '../src/metrics/registry.js';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, sendChatOrCompletion, startSim } from './helpers/sim.js';

async function families(m: Metrics): Promise<string[]> {
  return (await m.registry.getMetricsAsJSON())
    .map((f) => f.name)
    .filter((n) => n.startsWith('logprobe_'))
    .sort();
}

test('each thread registers the metrics it owns and those owned by both, nothing else', async () => {
  for (const thread of ['main', 'worker'] as const) {
    const m = new Metrics({ thread, mirrorRoutes: ['/v1/completions'] });
    const owned = METRIC_CATALOG.filter((s) => s.owner === thread || s.owner === 'both')
      .map((s) => s.name)
      .sort();
    assert.deepEqual(await families(m), owned, thread);
    assert.deepEqual(
      metricsOf(thread)
        .map((s) => s.name)
        .sort(),
      owned,
    );
  }
  // Only the proxy's thread has the process metrics.
  const main = await new Metrics({ thread: 'main' }).registry.metrics();
  const worker = await new Metrics({ thread: 'worker' }).registry.metrics();
  assert.match(main, /^process_start_time_seconds /m);
  assert.doesNotMatch(worker, /^process_/m);
  // A metric used on the wrong thread is a bug, said at once.
  assert.throws(
    () => new Metrics({ thread: 'main' }).counter('logprobe_verdicts_total'),
    /not registered on the main thread/,
  );
  assert.throws(
    () => new Metrics({ thread: 'worker' }).observeRequest('/v1/completions', 200, 0.1),
    /not registered on the worker thread/,
  );
});

test('every metric has an owner; the ones owned by both are the counters and gauges both threads move', () => {
  for (const spec of METRIC_CATALOG) assert.ok(['main', 'worker', 'both'].includes(spec.owner), spec.name);
  assert.deepEqual(
    METRIC_CATALOG.filter((s) => s.owner === 'both')
      .map((s) => s.name)
      .sort(),
    ['logprobe_mirror_total', 'logprobe_upstream_connections'],
  );
});

test('/metrics: families owned by one thread come from it alone; the shared ones are the sum of both threads', async (t) => {
  const candidate = await startSim();
  const baseline = await startSim();
  t.after(() => Promise.all([candidate.close(), baseline.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1 },
  });
  t.after(() => lp.close());
  const prompts = { chat: 'threads: the sky is', completion: 'threads: the sea is' };
  for (let i = 0; i < 4; i++) assert.equal(await sendChatOrCompletion(lp.proxyUrl, i, prompts), 200);
  await lp.runtime.mirror!.idle();
  const text = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  const main = await lp.runtime.metrics.registry.metrics();
  // The main registry has no worker family; the merged text has them all, each once.
  assert.equal(metricValue(main, 'logprobe_verdicts_total'), undefined);
  assert.equal(metricValue(text, 'logprobe_verdicts_total'), 4);
  assert.equal(metricValue(text, 'logprobe_mirror_total', { outcome: 'ok' }), 4);
  assert.equal(metricValue(text, 'logprobe_mirror_worker_up'), 1);
  const types = text.split('\n').filter((l) => l.startsWith('# TYPE '));
  assert.equal(new Set(types).size, types.length, 'every family once');
  for (const spec of METRIC_CATALOG) assert.ok(types.includes(`# TYPE ${spec.name} ${spec.type}`), spec.name);
  // Shared: the client path's candidate connections (main) plus the mirror's (worker).
  const mainConns = metricValue(main, 'logprobe_upstream_connections', { backend: 'candidate' })!;
  const merged = metricValue(text, 'logprobe_upstream_connections', { backend: 'candidate' })!;
  assert.ok(mainConns >= 1, `the client path keeps a candidate connection (${mainConns})`);
  assert.ok(merged > mainConns, `the mirror's candidate connections are added (${merged} > ${mainConns})`);
});

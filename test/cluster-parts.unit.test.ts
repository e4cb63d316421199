import { test } from 'node:test';
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { buildConfig } from '../src/config/load.js';
import { ConfigError } from '../src/errors/index.js';
import { HandOver } from '../src/cluster/handover.js';
import { workerCount } from '../src/cluster/primary.js';
import type { FromProxyWorker } from '../src/cluster/protocol.js';
import { mergeProcesses, retiredPart, sumParts, type MetricsJSON } from '../src/metrics/merge.js';
import { Metrics } from '../src/metrics/registry.js';
import type { Exchange } from '../src/proxy/tap.js';
import { metricValue } from './helpers/sim.js';

// The parts of listen.workers that need no process: the key, the proxy worker's bounded
// hand-over, and the merge of the processes' metrics.

test('listen.workers: absent is one process (and the defaults read as before), a positive whole number or auto', () => {
  assert.equal(workerCount(buildConfig({})), 1);
  assert.deepEqual(buildConfig({}).listen, { host: '0.0.0.0', port: 8080 });
  assert.equal(workerCount(buildConfig({ listen: { workers: 3 } })), 3);
  assert.equal(workerCount(buildConfig({ listen: { workers: 'auto' } })), availableParallelism());
  for (const bad of [0, -1, 1.5, 'two', null]) {
    assert.throws(
      () => buildConfig({ listen: { workers: bad } }),
      (err: unknown) =>
        err instanceof ConfigError && /listen\.workers: expected a positive whole number/.test(err.message),
      String(bad),
    );
  }
});

const exchange = (i: number, over: Partial<Exchange> = {}): Exchange => ({
  requestId: `r${i}`,
  method: 'POST',
  path: '/v1/completions',
  route: '/v1/completions',
  headers: { 'content-type': 'application/json' },
  body: Buffer.from(`{"prompt":"p${i}"}`),
  status: 200,
  aborted: false,
  forced: undefined,
  ...over,
});

test('the hand-over sends what the sampler chose, at most queueSize + concurrency unacknowledged, and drops (counted) past that or with the primary gone', async () => {
  const config = buildConfig({ mirror: { sampleRate: 1, queueSize: 2, concurrency: 1 } });
  const metrics = new Metrics({ thread: 'main', mirrorRoutes: config.mirror.routes });
  const sent: FromProxyWorker[] = [];
  let connected = true;
  const h = new HandOver(config, metrics, { send: (m) => sent.push(m), connected: () => connected });
  const count = async (outcome: string) =>
    metricValue(await metrics.registry.metrics(), 'logprobe_mirror_total', { outcome }) ?? 0;

  assert.equal(h.wantsBody('POST', '/v1/completions', undefined), true);
  assert.equal(h.wantsBody('GET', '/v1/completions', undefined), false);
  assert.equal(h.wantsBody('POST', '/v1/completions', false), false, 'x-logprobe-mirror: 0');
  for (let i = 0; i < 5; i++) h.onExchange(exchange(i));
  assert.equal(sent.length, 3, 'queueSize 2 + concurrency 1');
  assert.equal(await count('dropped'), 2);
  const first = sent[0] as Extract<FromProxyWorker, { t: 'job' }>;
  assert.equal(first.t, 'job');
  assert.equal(first.exchange.body.toString(), '{"prompt":"p0"}');

  h.acked(2);
  assert.equal(h.inFlight, 1);
  h.onExchange(exchange(5));
  assert.equal(sent.length, 4);
  h.onExchange(exchange(6, { status: 500 }));
  assert.equal(await count('skipped'), 1, 'an upstream error is not a kind the mirror compares');
  const idle = h.idle(1000);
  h.acked(2);
  assert.equal(await idle, true);

  connected = false;
  h.onExchange(exchange(7));
  assert.equal(sent.length, 4);
  assert.equal(await count('dropped'), 3, 'the primary gone: dropped, never waited for');
});

test('a full hand-over keeps no body: a request that arrives while it is full is counted dropped at once (random, forced), but kept for sampleBy hash', async () => {
  for (const sampleBy of ['random', 'hash'] as const) {
    const config = buildConfig({ mirror: { sampleRate: 1, sampleBy, queueSize: 1, concurrency: 1 } });
    const metrics = new Metrics({ thread: 'main', mirrorRoutes: config.mirror.routes });
    const sent: FromProxyWorker[] = [];
    const h = new HandOver(config, metrics, { send: (m) => sent.push(m), connected: () => true });
    const count = async (outcome: string) =>
      metricValue(await metrics.registry.metrics(), 'logprobe_mirror_total', { outcome, route: '/v1/completions' }) ??
      0;
    h.onExchange(exchange(0));
    h.onExchange(exchange(1));
    assert.equal(h.inFlight, 2, 'full: queueSize 1 + concurrency 1');
    const random = sampleBy === 'random';
    assert.equal(
      h.wantsBody('POST', '/v1/completions', undefined),
      !random,
      `${sampleBy}: keep the body only when its bytes decide`,
    );
    assert.equal(h.wantsBody('POST', '/v1/completions', true), false, `${sampleBy}: forced, full: not kept`);
    assert.equal(await count('dropped'), random ? 2 : 1, `${sampleBy}: each refusal counted once, at once`);
    assert.equal(h.wantsBody('POST', '/v1/completions', false), false);
    assert.equal(h.wantsBody('POST', '/v1/other', undefined), false);
    assert.equal(await count('dropped'), random ? 2 : 1, 'not eligible: nothing counted');
    h.acked(1);
    assert.equal(h.wantsBody('POST', '/v1/completions', undefined), true, 'room again: kept');
    assert.equal(sent.length, 2);
  }
});

test('the hand-over with sampleBy hash decides as a single process does: the same body always or never', () => {
  const config = buildConfig({ mirror: { sampleRate: 0.5, sampleBy: 'hash' } });
  const metrics = new Metrics({ thread: 'main', mirrorRoutes: config.mirror.routes });
  const sent: FromProxyWorker[] = [];
  const h = new HandOver(config, metrics, { send: (m) => sent.push(m), connected: () => true });
  const chosen = (i: number) => {
    const before = sent.length;
    h.onExchange(exchange(i));
    h.acked(sent.length - before);
    return sent.length > before;
  };
  const once = Array.from({ length: 40 }, (_, i) => chosen(i));
  assert.deepEqual(
    Array.from({ length: 40 }, (_, i) => chosen(i)),
    once,
  );
  assert.ok(once.some(Boolean) && !once.every(Boolean));
});

async function registry(setup: (m: Metrics) => void): Promise<MetricsJSON> {
  const m = new Metrics({ thread: 'main', mirrorRoutes: ['/v1/completions'] });
  setup(m);
  return (await m.registry.getMetricsAsJSON()) as MetricsJSON;
}

test("merged /metrics of a cluster: the processes' logprobe families summed, start time the oldest's; an exited process keeps its counters and histograms, not its gauges", async () => {
  const a = await registry((m) => {
    m.observeRequest('/v1/completions', 200, 0.2);
    m.connections('candidate', 1);
    m.counter('logprobe_mirror_total').inc({ route: '/v1/completions', outcome: 'dropped' }, 2);
  });
  const b = await registry((m) => {
    m.observeRequest('/v1/completions', 200, 0.3);
    m.observeRequest('/v1/completions', 502, 0.01);
    m.connections('candidate', 1);
    m.connections('candidate', 1);
  });
  const text = await mergeProcesses([a, b]).metrics();
  assert.equal(
    metricValue(text, 'logprobe_proxy_requests_total', { route: '/v1/completions', status_class: '2xx' }),
    2,
  );
  assert.equal(
    metricValue(text, 'logprobe_proxy_requests_total', { route: '/v1/completions', status_class: '5xx' }),
    1,
  );
  assert.equal(metricValue(text, 'logprobe_proxy_request_duration_seconds_count', { route: '/v1/completions' }), 3);
  assert.equal(
    metricValue(text, 'logprobe_proxy_request_duration_seconds_bucket', { route: '/v1/completions', le: '0.25' }),
    2,
  );
  assert.equal(metricValue(text, 'logprobe_upstream_connections', { backend: 'candidate' }), 3);
  assert.equal(metricValue(text, 'logprobe_mirror_total', { outcome: 'dropped' }), 2);
  const start = (list: MetricsJSON) => list.find((m) => m.name === 'process_start_time_seconds')!.values[0]!.value;
  assert.equal(metricValue(text, 'process_start_time_seconds'), Math.min(start(a), start(b)));

  // b exits: its counters stay, added to what exited before; its connections go.
  const retired = sumParts([sumParts([[], retiredPart(a)]), retiredPart(b)]);
  assert.equal(
    retired.find((m) => m.name === 'logprobe_upstream_connections'),
    undefined,
  );
  const after = await mergeProcesses([retired]).metrics();
  assert.equal(
    metricValue(after, 'logprobe_proxy_requests_total', { route: '/v1/completions', status_class: '2xx' }),
    2,
  );
  assert.equal(
    metricValue(after, 'logprobe_proxy_request_duration_seconds_sum', { route: '/v1/completions' })!.toFixed(2),
    '0.51',
  );
  assert.equal(metricValue(after, 'logprobe_upstream_connections', { backend: 'candidate' }), undefined);
});

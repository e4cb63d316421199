import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { startUpstream } from './helpers/upstream.js';
import { startLogprobe } from './helpers/logprobe.js';

test('metrics are served on the admin port and never on the public one', async (t) => {
  const up = await startUpstream((req, res) => {
    res.writeHead(req.url === '/metrics' ? 404 : 200, { 'content-type': 'text/plain' });
    res.end(req.url === '/metrics' ? 'upstream has no metrics' : 'ok');
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url } });
  t.after(() => lp.close());

  for (let i = 0; i < 3; i++) {
    const r = await request(`${lp.proxyUrl}/v1/completions`, {
      method: 'POST',
      body: '{}',
      headers: { 'content-type': 'application/json' },
    });
    await r.body.dump();
  }
  const other = await request(`${lp.proxyUrl}/some/path`);
  await other.body.dump();

  const metrics = await request(`${lp.adminUrl}/metrics`);
  assert.equal(metrics.statusCode, 200);
  assert.match(String(metrics.headers['content-type']), /text\/plain/);
  const text = await metrics.body.text();
  assert.match(text, /^logprobe_proxy_requests_total\{route="\/v1\/completions",status_class="2xx"\} 3$/m);
  assert.match(text, /^logprobe_proxy_requests_total\{route="other",status_class="2xx"\} 1$/m);
  assert.match(text, /^logprobe_proxy_request_duration_seconds_count\{route="\/v1\/completions"\} 3$/m);
  assert.match(text, /^process_cpu_user_seconds_total /m, 'default process metrics');

  const pub = await request(`${lp.proxyUrl}/metrics`);
  const pubText = await pub.body.text();
  assert.equal(pub.statusCode, 404);
  assert.equal(pubText, 'upstream has no metrics', 'the public port forwards /metrics to the candidate');
  assert.doesNotMatch(pubText, /logprobe_/);
});

test('/healthz says the process is up; /readyz follows the candidate', async (t) => {
  const up = await startUpstream((_req, res) => {
    res.writeHead(404);
    res.end();
  });
  const lp = await startLogprobe({ candidate: { url: up.url } });
  t.after(() => lp.close());

  const health = await request(`${lp.adminUrl}/healthz`);
  assert.equal(health.statusCode, 200);
  assert.deepEqual(await health.body.json(), { status: 'ok' });

  const ready = await request(`${lp.adminUrl}/readyz`);
  assert.equal(ready.statusCode, 200, 'any HTTP answer, even a 404, means reachable');
  await ready.body.dump();

  await up.close();
  const notReady = await request(`${lp.adminUrl}/readyz`);
  assert.equal(notReady.statusCode, 503);
  assert.deepEqual(await notReady.body.json(), { status: 'candidate unreachable' });
});

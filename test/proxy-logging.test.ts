import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { startUpstream } from './helpers/upstream.js';
import { startLogprobe } from './helpers/logprobe.js';

const SECRET = 'sk-live-PLANTED-SECRET-4242';

test('one JSON log line per request with method, route, status, duration and request id', async (t) => {
  const up = await startUpstream((_req, res) => res.end('ok'));
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url } });
  t.after(() => lp.close());
  const r = await request(`${lp.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    body: '{}',
    headers: { 'content-type': 'application/json', 'x-request-id': 'abc-123' },
  });
  await r.body.dump();
  const lines = lp.logs.lines.filter((l) => l['msg'] === 'request');
  assert.equal(lines.length, 1);
  const line = lines[0]!;
  assert.equal(line['method'], 'POST');
  assert.equal(line['route'], '/v1/chat/completions');
  assert.equal(line['status'], 200);
  assert.equal(typeof line['durationMs'], 'number');
  assert.equal(line['reqId'], 'abc-123');
});

test('a secret in Authorization, api-key headers or cookies never reaches the logs, even at trace level', async (t) => {
  const up = await startUpstream((req, res) => {
    // An upstream failure makes the proxy log the error with its context.
    req.socket.destroy();
    void res;
  });
  t.after(() => up.close());
  const lp = await startLogprobe(
    { candidate: { url: up.url }, log: { level: 'trace', redact: ['x-org-token'] } },
    { level: 'trace' },
  );
  t.after(() => lp.close());
  const r = await request(`${lp.proxyUrl}/v1/completions`, {
    method: 'POST',
    body: '{"prompt":"hi"}',
    headers: {
      'content-type': 'application/json',
      authorization: `Bearer ${SECRET}`,
      'x-api-key': SECRET,
      'api-key': SECRET,
      cookie: `session=${SECRET}`,
      'x-org-token': SECRET,
      'x-logprobe-mirror': '1',
    },
  });
  await r.body.dump();
  assert.equal(r.statusCode, 502);
  // Log a request object the way a careless handler might: redaction must still hold.
  lp.runtime.logger.info(
    { req: { headers: { authorization: `Bearer ${SECRET}`, cookie: SECRET, 'x-org-token': SECRET } } },
    'probe',
  );
  lp.runtime.logger.info({ headers: { 'x-api-key': SECRET } }, 'probe');
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.ok(lp.logs.raw.length >= 3, 'logs were written');
  assert.ok(!lp.logs.text().includes(SECRET), 'the secret is not in any log line');
  assert.match(lp.logs.text(), /\[redacted\]/);
});

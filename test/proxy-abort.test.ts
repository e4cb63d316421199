import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startUpstream } from './helpers/upstream.js';
import { startLogprobe } from './helpers/logprobe.js';

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([
    p,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms)),
  ]);
}

test('a client that disconnects before the upstream answered aborts the upstream request', async (t) => {
  const up = await startUpstream(async () => {
    // Never answers: a long generation before its first byte.
    await new Promise(() => undefined);
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url } });
  t.after(() => lp.close());

  const u = new URL(lp.proxyUrl);
  const req = http.request({
    host: u.hostname,
    port: u.port,
    method: 'POST',
    path: '/v1/completions',
    headers: { 'content-type': 'application/json' },
    agent: false,
  });
  req.on('error', () => undefined);
  req.end('{"prompt":"x"}');
  while (up.seen.length === 0) await new Promise((r) => setTimeout(r, 10));
  req.destroy();
  const closed = await withTimeout(up.seen[0]!.closed, 3000, 'upstream saw the abort');
  assert.equal(closed.aborted, true);
});

test('a client that disconnects mid-stream stops the upstream stream', async (t) => {
  let writes = 0;
  const up = await startUpstream(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    while (!res.destroyed && writes < 1000) {
      res.write(`data: {"n":${writes++}}\n\n`);
      await new Promise((r) => setTimeout(r, 20));
    }
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url } });
  t.after(() => lp.close());

  const u = new URL(lp.proxyUrl);
  await new Promise<void>((resolve) => {
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        method: 'POST',
        path: '/v1/chat/completions',
        headers: { 'content-type': 'application/json' },
        agent: false,
      },
      (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      },
    );
    req.on('error', () => undefined);
    req.end('{"stream":true}');
  });
  const closed = await withTimeout(up.seen[0]!.closed, 3000, 'upstream saw the abort');
  assert.equal(closed.aborted, true);
  assert.ok(writes < 200, `generation stopped early (${writes} events written)`);
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startUpstream } from './helpers/upstream.js';
import { startLogprobe } from './helpers/logprobe.js';

/** Writes raw bytes to the proxy and reads until `done(text)` says the answer is complete. */
function exchange(url: string, bytes: string, done: (text: string) => boolean, timeoutMs = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const sock = net.connect(Number(u.port), u.hostname, () => sock.write(bytes));
    let text = '';
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`no complete answer in time; got: ${JSON.stringify(text)}`));
    }, timeoutMs);
    sock.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      if (done(text)) {
        clearTimeout(timer);
        sock.destroy();
        resolve(text);
      }
    });
    sock.on('error', reject);
  });
}

const count = (s: string, sub: string) => s.split(sub).length - 1;

test('keep-alive: sequential requests reuse upstream connections', async (t) => {
  const sockets = new Set<unknown>();
  const up = await startUpstream((req, res) => {
    sockets.add(req.socket);
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' });
    res.end('ok');
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());
  for (let i = 0; i < 20; i++) {
    const r = await fetch(`${lp.proxyUrl}/v1/models`);
    assert.equal(await r.text(), 'ok');
  }
  assert.ok(sockets.size <= 2, `${sockets.size} upstream connections for 20 sequential requests`);
});

test('pipelined requests on one client connection are answered in order', async (t) => {
  const up = await startUpstream(async (req, res) => {
    // The first answer is the slowest: order must still hold.
    if (req.url === '/a') await new Promise((r) => setTimeout(r, 100));
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(req.url!.length) });
    res.end(req.url);
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());
  const host = new URL(lp.proxyUrl).host;
  const text = await exchange(
    lp.proxyUrl,
    `GET /a HTTP/1.1\r\nHost: ${host}\r\n\r\nPOST /bb HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 3\r\n\r\nxyzGET /ccc HTTP/1.1\r\nHost: ${host}\r\n\r\n`,
    (s) => s.endsWith('/ccc'),
  );
  const bodies = [...text.matchAll(/\r\n\r\n(\/[a-c]+)/g)].map((m) => m[1]);
  assert.deepEqual(bodies, ['/a', '/bb', '/ccc']);
  assert.equal(up.seen[1]!.body.toString(), 'xyz');
});

test('HEAD and 204 answers have no body and keep the connection usable', async (t) => {
  const up = await startUpstream((req, res) => {
    if (req.url === '/empty') {
      res.writeHead(204);
      res.end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '12' });
    res.end(req.method === 'HEAD' ? undefined : '{"ok":true} ');
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());
  const host = new URL(lp.proxyUrl).host;
  const text = await exchange(
    lp.proxyUrl,
    `HEAD /x HTTP/1.1\r\nHost: ${host}\r\n\r\nGET /empty HTTP/1.1\r\nHost: ${host}\r\n\r\nGET /x HTTP/1.1\r\nHost: ${host}\r\n\r\n`,
    (s) => s.endsWith('{"ok":true} '),
  );
  assert.equal(count(text, 'HTTP/1.1 200'), 2);
  assert.equal(count(text, 'HTTP/1.1 204'), 1);
  assert.equal(count(text, '{"ok":true}'), 1, 'only the GET has a body');
});

test('a request with both Content-Length and Transfer-Encoding is not forwarded as two requests (no smuggling)', async (t) => {
  const up = await startUpstream((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' });
    res.end('ok');
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());
  const host = new URL(lp.proxyUrl).host;
  // A smuggled "GET /admin" hides in the chunked body if CL were honoured over TE.
  const attack = `POST /v1/completions HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: ${host}\r\n\r\n`;
  // Refused as node:http refuses it (400), not answered twice, and never left hanging.
  const text = await exchange(
    lp.proxyUrl,
    attack,
    (s) => s.includes('\r\n\r\n') && (s.includes('HTTP/1.1 400') || count(s, 'HTTP/1.1 ') >= 2),
    3000,
  );
  await new Promise((r) => setTimeout(r, 200));
  assert.match(text, /^HTTP\/1\.1 400 /, text);
  assert.equal(count(text, 'HTTP/1.1 '), 1, text);
  assert.deepEqual(
    up.seen.filter((r) => r.url === '/admin'),
    [],
    'a request hidden in a body never reaches the upstream',
  );
});

test('HTTP/1.0 clients and chunked upstream answers pass through byte for byte', async (t) => {
  const up = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write('part one;');
    res.end('part two');
  });
  t.after(() => up.close());
  const lp = await startLogprobe({ candidate: { url: up.url }, mirror: { sampleRate: 0 } });
  t.after(() => lp.close());
  const chunked = await exchange(lp.proxyUrl, `GET /c HTTP/1.1\r\nHost: x\r\n\r\n`, (s) => s.endsWith('0\r\n\r\n'));
  assert.match(chunked, /transfer-encoding: chunked/i);
  const body = chunked
    .slice(chunked.indexOf('\r\n\r\n') + 4)
    .replace(/[0-9a-f]+\r\n/g, '')
    .replace(/\r\n/g, '');
  assert.equal(body, 'part one;part two');
  const old = await exchange(lp.proxyUrl, `GET /c HTTP/1.0\r\nHost: x\r\n\r\n`, (s) => s.includes('part two'));
  assert.match(old, /^HTTP\/1\.[01] 200/);
});

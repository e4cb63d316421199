import { test } from 'node:test';
import assert from 'node:assert/strict';
import https from 'node:https';
import net from 'node:net';
import { networkInterfaces } from 'node:os';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { startCli } from './helpers/cli.js';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, startSim } from './helpers/sim.js';
import { startUpstream, type TestUpstream } from './helpers/upstream.js';
import { allText, chatBody, tempDir } from './helpers/capture.js';
import { buildConfig } from '../src/config/load.js';
import {
  ALERT_NAMES,
  CANARY_OUTCOMES,
  MIRROR_SKIP_REASONS,
  LATENCY_BUCKETS,
  METRIC_CATALOG,
  MIRROR_OUTCOMES,
  NATS_BUCKETS,
  POSITION_BUCKETS,
  REFUSAL_REASONS,
  SCORING_OUTCOMES,
} from '../src/metrics/catalog.js';
import { VERDICTS } from '../src/core/types.js';
import { PROBE_SHAPES, SELF_VERDICTS } from '../src/core/self.js';
import { PATH_VERDICTS } from '../src/core/path.js';
import { CACHE_SPLITS } from '../src/core/slice.js';
import { CAPABILITIES } from '../src/probe/probe.js';
import {
  CAPPED_FIELDS,
  CAPTURE_ERROR_REASONS,
  ENGINE_NAMES,
  KNOWN_ROUTES,
  OVERFLOW_REASONS,
} from '../src/metrics/labels.js';

// What must hold whatever a client sends: the admin surface is private, no secret leaks to any
// output, TLS is verified unless told otherwise, the mirror header cannot reach the baseline,
// and client input cannot mint metric series.

const READY = /"proxyUrl":"(http:\/\/[^"]+)","adminUrl":"(http:\/\/[^"]+)"/;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function serve(t: { after(fn: () => void): void }, yaml: string) {
  const file = join(tempDir(t, 'logprobe-sec-'), 'logprobe.yaml');
  writeFileSync(file, yaml);
  const proc = await startCli(['serve', '--config', file], READY);
  t.after(() => {
    if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
  });
  const [, proxyUrl, adminUrl] = proc.match as unknown as [string, string, string];
  return { ...proc, proxyUrl, adminUrl };
}

function tryConnect(host: string, port: number): Promise<'refused' | 'accepted'> {
  return new Promise((resolve) => {
    const sock = net.connect({ host, port, timeout: 2000 });
    sock.once('connect', () => {
      sock.destroy();
      resolve('accepted');
    });
    sock.once('timeout', () => {
      sock.destroy();
      resolve('refused');
    });
    sock.once('error', () => resolve('refused'));
  });
}

// ---------------------------------------------------------------- B1: the admin surface

test('the admin port binds 127.0.0.1 by default, and /metrics, /healthz, /readyz on the public port go to the candidate', async (t) => {
  assert.equal(buildConfig({}).admin.host, '127.0.0.1', 'config default');
  const cand = await startUpstream((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(req.method === 'HEAD' ? undefined : `candidate answered ${req.method} ${req.url}`);
  });
  t.after(() => cand.close());
  // No admin.host: the default applies. Port 0 only to avoid clashes.
  const p = await serve(
    t,
    `listen: { host: 127.0.0.1, port: 0 }\nadmin: { port: 0 }\ncandidate: { url: ${cand.url} }\nmirror: { sampleRate: 0 }\ncapture: { enabled: false }\nprobe: { atStart: off }\n`,
  );
  const admin = new URL(p.adminUrl);
  assert.equal(admin.hostname, '127.0.0.1', `bound address: ${p.adminUrl}`);
  const adminPort = Number(admin.port);
  // Seen from another address of this machine, the admin port is closed.
  const external = Object.values(networkInterfaces())
    .flat()
    .filter((a) => a && !a.internal && a.family === 'IPv4')
    .map((a) => a!.address);
  for (const addr of external)
    assert.equal(await tryConnect(addr, adminPort), 'refused', `admin port reachable on ${addr}`);
  if (external.length === 0) t.diagnostic('no non-loopback IPv4 address: the external reachability check did not run');

  const metrics = await (await request(`${p.adminUrl}/metrics`)).body.text();
  assert.match(metrics, /^# HELP logprobe_proxy_requests_total/m, 'control: the admin port does serve metrics');

  for (const [method, path] of [
    ['GET', '/metrics'],
    ['GET', '/healthz'],
    ['GET', '/readyz'],
    ['POST', '/metrics'],
    ['GET', '/metrics?format=prometheus'],
    ['HEAD', '/metrics'],
  ] as const) {
    const res = await request(`${p.proxyUrl}${path}`, { method });
    const body = await res.body.text();
    assert.equal(res.statusCode, 200, `${method} ${path}`);
    if (method !== 'HEAD')
      assert.equal(body, `candidate answered ${method} ${path}`, `${method} ${path} is forwarded to the candidate`);
    assert.doesNotMatch(body, /logprobe_|# HELP|# TYPE|"status":"(ok|ready)"/);
    assert.equal(res.headers['content-type'], 'text/plain');
  }
  assert.equal(cand.seen.length, 6, 'every one reached the candidate');
});

// ---------------------------------------------------------------- B2: planted secrets

const CLIENT_AUTH = 'Bearer sk-client-SECRET1-q8Zr7tWm';
const COOKIE = 'session=SECRET2-c00kieVal9; theme=dark';
const X_API_KEY = 'SECRET4-xApiKey-7731';
const API_KEY = 'SECRET5-azureKey-5512';
const PROXY_AUTH = 'Basic SECRET6-proxyAuth-b64';
const BODY_KEY = 'SECRET7-bodyField-0042';
const QUERY_KEY = 'SECRET8-queryKey-9090';
const BASELINE_KEY = 'sk-base-SECRET3-Kq2Lp9';
const NEEDLES = ['SECRET1', 'SECRET2', 'SECRET3', 'SECRET4', 'SECRET5', 'SECRET6', 'SECRET7', 'SECRET8'];
const SECRET_HEADERS = {
  authorization: CLIENT_AUTH,
  cookie: COOKIE,
  'x-api-key': X_API_KEY,
  'api-key': API_KEY,
  'proxy-authorization': PROXY_AUTH,
};

function leaks(text: string): string[] {
  return NEEDLES.filter((n) => text.includes(n));
}

/** Forwards a request to a sim engine and relays its answer (a real engine behind a scriptable front). */
async function relay(
  sim: { url: string },
  req: { method?: string; url?: string },
  res: import('node:http').ServerResponse,
  body: Buffer,
): Promise<void> {
  const r = await request(`${sim.url}${req.url}`, {
    method: (req.method ?? 'GET') as 'POST',
    body: body.length > 0 ? body : undefined,
    headers: { 'content-type': 'application/json' },
  });
  const text = await r.body.text();
  res.writeHead(r.statusCode, {
    'content-type': String(r.headers['content-type'] ?? 'application/json'),
    server: 'sim-relay/1',
  });
  res.end(text);
}

test('planted secrets (client headers, body field, baseline key) appear in no log, capture, metric or error body, on success and error paths; the baseline gets only its own key', async (t) => {
  const dir = tempDir(t);
  const sim = await startSim();
  t.after(() => sim.close());
  let candidateMode: 'ok' | 'echo401' = 'ok';
  let baselineMode: 'ok' | 'echo500' | 'reset' = 'ok';
  const isMirrorCopy = (body: Buffer) => body.length > 0 && body.includes('"seed":4242');
  const candidate = await startUpstream(async (req, res, body) => {
    if (req.headers['x-test-candidate'] === 'reset') return req.socket.destroy();
    if (candidateMode === 'echo401' && isMirrorCopy(body)) {
      // A server that quotes the credentials it refused: the capture must scrub them by value.
      res.writeHead(401, { 'content-type': 'application/json' });
      return res.end(
        JSON.stringify({
          error: {
            message: `bad credentials: ${req.headers.authorization} / ${req.headers.cookie} / ${req.headers['x-api-key']} / ${req.headers['api-key']}`,
          },
        }),
      );
    }
    return relay(sim, req, res, body);
  });
  t.after(() => candidate.close());
  let baselineOpen = true;
  const baseline: TestUpstream = await startUpstream(async (req, res, body) => {
    if (baselineMode === 'reset') return req.socket.destroy();
    if (baselineMode === 'echo500') {
      res.writeHead(500, { 'content-type': 'application/json' });
      return res.end(
        JSON.stringify({
          error: { message: `key ${req.headers.authorization} rejected`, body: body.toString('utf8') },
        }),
      );
    }
    return relay(sim, req, res, body);
  });
  t.after(() => (baselineOpen ? baseline.close() : undefined));

  const p = await serve(
    t,
    `listen: { host: 127.0.0.1, port: 0 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${candidate.url} }\n` +
      `baseline: { url: ${baseline.url}, apiKey: ${BASELINE_KEY} }\nmirror: { sampleRate: 1, seed: 4242 }\nlimits: { bodyMB: 0.01 }\n` +
      `capture: { enabled: true, dir: ${dir}, gzip: true, maxFileMB: 0.004 }\nlog: { level: debug }\n`,
  );

  const received: string[] = [];
  let mirrored = 0;
  async function send(
    i: number,
    options: {
      extraHeaders?: Record<string, string>;
      body?: string;
      method?: string;
      path?: string;
      mirror?: boolean;
    } = {},
  ): Promise<number> {
    const chat = i % 2 === 0;
    const body =
      options.body ??
      JSON.stringify(
        chat
          ? {
              model: 'sim',
              messages: [{ role: 'user', content: `question ${i}: why is the sky blue?` }],
              max_tokens: 8,
            }
          : { model: 'sim', prompt: `Prompt ${i}: the capital of France is`, max_tokens: 8 },
      );
    // Every third request also carries a key in its query string (some clients do that).
    const query = i % 3 === 0 ? `?api_key=${QUERY_KEY}` : '';
    const res = await request(
      `${p.proxyUrl}${options.path ?? (chat ? '/v1/chat/completions' : '/v1/completions')}${query}`,
      {
        method: (options.method ?? 'POST') as 'POST',
        body,
        headers: {
          'content-type': 'application/json',
          'x-request-id': `sec-${i}`,
          ...SECRET_HEADERS,
          ...options.extraHeaders,
        },
      },
    );
    received.push(JSON.stringify(res.headers), await res.body.text());
    if (res.statusCode === 200 && options.mirror !== false) mirrored++;
    return res.statusCode;
  }
  /** Waits until the mirror has finished every pair sent so far. */
  async function mirrorDone(): Promise<void> {
    for (let tries = 0; tries < 500; tries++) {
      const text = await (await request(`${p.adminUrl}/metrics`)).body.text();
      const done = ['ok', 'candidate_error', 'baseline_error', 'unparseable', 'incomparable'].reduce(
        (n, o) => n + (metricValue(text, 'logprobe_mirror_total', { outcome: o }) ?? 0),
        0,
      );
      if (done >= mirrored) return;
      await sleep(20);
    }
    assert.fail(`the mirror did not finish ${mirrored} pairs`);
  }

  // Success, then every error path the mirror and the client can meet.
  for (let i = 0; i < 4; i++) assert.equal(await send(i), 200);
  assert.equal(
    await send(4, {
      path: '/v1/completions',
      body: JSON.stringify({ model: 'sim', prompt: 'p', max_tokens: 4, api_key: BODY_KEY }),
    }),
    200,
  );
  await mirrorDone();
  baselineMode = 'echo500';
  for (let i = 5; i < 8; i++) assert.equal(await send(i), 200);
  await mirrorDone();
  baselineMode = 'ok';
  candidateMode = 'echo401';
  for (let i = 8; i < 11; i++) assert.equal(await send(i), 200);
  await mirrorDone();
  candidateMode = 'ok';
  baselineMode = 'reset';
  for (let i = 11; i < 13; i++) assert.equal(await send(i), 200);
  await mirrorDone();
  await baseline.close();
  baselineOpen = false;
  for (let i = 13; i < 15; i++) assert.equal(await send(i), 200);
  await mirrorDone();
  // Client-facing errors: 502 (candidate reset), 413 (body over limits.bodyMB), 404 (a method not forwarded).
  assert.equal(await send(15, { extraHeaders: { 'x-test-candidate': 'reset' } }), 502);
  assert.equal(await send(16, { body: JSON.stringify({ prompt: 'x'.repeat(20_000), api_key: BODY_KEY }) }), 413);
  assert.equal(await send(17, { method: 'PROPFIND', path: '/v1/completions' }), 404);
  assert.equal(await send(18, { method: 'GET', path: '/v1/models', mirror: false }), 200);
  assert.equal(mirrored, 15);

  const metricsText = await (await request(`${p.adminUrl}/metrics`)).body.text();
  for (const outcome of ['ok', 'baseline_error', 'candidate_error'])
    assert.ok((metricValue(metricsText, 'logprobe_mirror_total', { outcome }) ?? 0) > 0, `the ${outcome} path ran`);
  assert.equal(metricValue(metricsText, 'logprobe_mirror_total', { outcome: 'baseline_error' }), 7);
  assert.equal(metricValue(metricsText, 'logprobe_mirror_total', { outcome: 'candidate_error' }), 3);
  p.child.kill('SIGTERM');
  assert.equal(await p.exited, 0, p.output());

  const files = readdirSync(dir);
  assert.ok(
    files.some((f) => f.endsWith('.jsonl.gz')),
    `rotated files are gzipped: ${files.join(', ')}`,
  );
  const capture = allText(dir);
  assert.equal(capture.split('\n').filter((l) => l.startsWith('{')).length, 15, 'every mirrored pair captured');
  assert.match(
    capture,
    /bad credentials: \[redacted\]/,
    "the candidate's quote of the client credentials was scrubbed",
  );
  assert.match(capture, /key Bearer \[redacted\] rejected/, "the baseline's quote of its key was scrubbed");
  const logs = p.output();
  assert.match(logs, /"level":"debug"/, 'debug lines were written');
  assert.match(logs, /mirror pair not compared/);

  assert.deepEqual(leaks(logs), [], 'stdout/stderr logs');
  assert.deepEqual(leaks(capture), [], 'capture files (gunzipped)');
  assert.deepEqual(leaks(metricsText), [], '/metrics');
  assert.deepEqual(leaks(received.join('\n')), [], 'what the clients received (bodies and headers)');

  // The baseline: its own key, never a client credential (forwardAuth is off).
  assert.ok(baseline.seen.length >= 10);
  for (const s of baseline.seen) {
    assert.equal(s.headers.authorization, `Bearer ${BASELINE_KEY}`);
    for (const h of ['cookie', 'x-api-key', 'api-key', 'proxy-authorization']) assert.equal(s.headers[h], undefined, h);
    assert.deepEqual(
      NEEDLES.filter((n) => (n !== 'SECRET3' && JSON.stringify(s.headers).includes(n)) || s.url.includes(n)),
      [],
      "no client credential in the baseline's headers",
    );
  }
  // The candidate is the client's own deployment: it gets the client's credentials, never the
  // baseline key, and never proxy-authorization (meant for the proxy, hop-by-hop).
  for (const s of candidate.seen) {
    assert.ok(!JSON.stringify(s.headers).includes('SECRET3'), 'the baseline key never goes to the candidate');
    assert.equal(s.headers['proxy-authorization'], undefined);
  }
});

test('a password in an upstream URL (http://user:pass@host) is refused by the config, never logged', () => {
  for (const key of ['candidate', 'baseline'] as const) {
    assert.throws(
      () => buildConfig({ [key]: { url: 'http://user:SECRET9-pass@127.0.0.1:1' } }),
      (err: Error) =>
        err.message.includes(`${key}.url`) &&
        err.message.includes('credentials in the URL') &&
        !err.message.includes('SECRET9'),
    );
  }
});

// ---------------------------------------------------------------- B3: TLS verification

const TLS = {
  key: readFileSync(new URL('./fixtures/tls/key.pem', import.meta.url)),
  cert: readFileSync(new URL('./fixtures/tls/cert.pem', import.meta.url)),
};

/** An https engine stand-in with the self-signed fixture certificate (SAN 127.0.0.1, localhost). */
async function startHttps(
  t: { after(fn: () => void): void },
  who: string,
): Promise<{ url: string; requests: () => number; tlsErrors: () => number }> {
  let requests = 0;
  let tlsErrors = 0;
  const server = https.createServer(TLS, (req, res) => {
    requests++;
    req.resume();
    req.on('end', () => {
      const body = JSON.stringify({
        ...chatBody([
          [' The', -0.1],
          [' sky', -0.2],
          [' is', -0.3],
          [' blue', -0.4],
        ]),
        who,
      });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
  });
  server.on('tlsClientError', () => tlsErrors++);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests: () => requests,
    tlsErrors: () => tlsErrors,
  };
}

const chatRequest = JSON.stringify({
  model: 'm',
  messages: [{ role: 'user', content: 'Why is the sky blue?' }],
  max_tokens: 4,
});

for (const tlsInsecure of [false, true]) {
  test(`TLS: a self-signed https candidate and baseline are ${tlsInsecure ? 'accepted with tlsInsecure: true' : 'refused by default'}`, async (t) => {
    const httpsCandidate = await startHttps(t, 'https-candidate');
    const httpsBaseline = await startHttps(t, 'https-baseline');
    const plainCandidate = await startUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify(
          chatBody([
            [' The', -0.1],
            [' sky', -0.2],
            [' is', -0.3],
            [' blue', -0.4],
          ]),
        ),
      );
    });
    t.after(() => plainCandidate.close());

    // The client path: an https candidate.
    const a = await startLogprobe({
      candidate: { url: httpsCandidate.url },
      baseline: { url: httpsBaseline.url },
      tlsInsecure,
      mirror: { sampleRate: 0 },
    });
    t.after(() => a.close());
    const res = await request(`${a.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      body: chatRequest,
      headers: { 'content-type': 'application/json' },
    });
    const body = (await res.body.json()) as { who?: string; error?: { type: string; message: string } };
    const ready = await request(`${a.adminUrl}/readyz`);
    await ready.body.dump();
    if (tlsInsecure) {
      assert.equal(res.statusCode, 200);
      assert.equal(body.who, 'https-candidate');
      assert.equal(ready.statusCode, 200);
    } else {
      assert.equal(res.statusCode, 502, JSON.stringify(body));
      assert.equal(body.error?.type, 'upstream_error');
      assert.match(
        body.error!.message,
        /self[- ]signed certificate/i,
        'refused for the certificate, not for anything else',
      );
      assert.equal(httpsCandidate.requests(), 0, 'no request reached the untrusted candidate');
      assert.ok(httpsCandidate.tlsErrors() > 0, 'the TLS handshake was aborted by the proxy');
      assert.equal(ready.statusCode, 503, '/readyz: an untrusted candidate is not reachable');
    }

    // The mirror: a plain candidate, an https baseline.
    const b = await startLogprobe({
      candidate: { url: plainCandidate.url },
      baseline: { url: httpsBaseline.url },
      tlsInsecure,
      mirror: { sampleRate: 1 },
      // Copies only: the path check's engine detection would add requests to the count.
      path: { rate: 0 },
    });
    t.after(() => b.close());
    for (let i = 0; i < 3; i++) {
      const r = await request(`${b.proxyUrl}/v1/chat/completions`, {
        method: 'POST',
        body: chatRequest,
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(r.statusCode, 200);
      await r.body.dump();
    }
    await b.runtime.mirror!.idle();
    const text = await (await request(`${b.adminUrl}/metrics`)).body.text();
    const outcome = (o: string) => metricValue(text, 'logprobe_mirror_total', { outcome: o }) ?? 0;
    if (tlsInsecure) {
      assert.equal(outcome('ok'), 3);
      assert.equal(outcome('baseline_error'), 0);
      assert.equal(httpsBaseline.requests(), 3);
    } else {
      assert.equal(outcome('baseline_error'), 3);
      assert.equal(outcome('ok'), 0);
      assert.equal(httpsBaseline.requests(), 0, 'no mirrored copy reached the untrusted baseline');
    }
  });
}

// ---------------------------------------------------------------- B4: x-logprobe-mirror

test('x-logprobe-mirror, whatever its value or spelling, never sends the client to the baseline and never reaches the candidate', async (t) => {
  const answer = (who: string) => async (_req: unknown, res: import('node:http').ServerResponse) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        ...chatBody([
          [' A', -0.1],
          [' B', -0.2],
          [' C', -0.3],
        ]),
        who,
      }),
    );
  };
  const cand = await startUpstream(answer('candidate'));
  const base = await startUpstream(answer('baseline'));
  t.after(() => Promise.all([cand.close(), base.close()]));
  const lp = await startLogprobe({
    candidate: { url: cand.url },
    baseline: { url: base.url },
    mirror: { sampleRate: 0 },
    // Copies only (one per candidate copy): the path check's own requests are counted elsewhere.
    path: { rate: 0 },
  });
  t.after(() => lp.close());

  const values: Array<string | string[]> = [
    '1',
    'true',
    'baseline',
    'BASELINE',
    '0',
    'yes',
    'on',
    '',
    ' 1 ',
    'http://evil/',
    '../baseline',
    '1, 1',
    ['1', '0'],
    ['baseline', '1'],
    'x'.repeat(4000),
  ];
  const targets: Array<[string, string]> = [
    ['POST', '/v1/chat/completions'],
    ['POST', '/v1/completions'],
    ['POST', '/v1/completions?x=1'],
    ['GET', '/v1/models'],
    ['POST', '/admin'],
  ];
  let clientRequests = 0;
  for (const value of values) {
    for (const [method, path] of targets) {
      for (const name of ['x-logprobe-mirror', 'X-LogProbe-Mirror']) {
        const res = await request(`${lp.proxyUrl}${path}`, {
          method: method as 'POST',
          body: method === 'POST' ? chatRequest : undefined,
          headers: { 'content-type': 'application/json', [name]: value },
        });
        const body = (await res.body.json()) as { who: string };
        clientRequests++;
        assert.equal(res.statusCode, 200);
        assert.equal(body.who, 'candidate', `${method} ${path} ${name}: ${JSON.stringify(value)}`);
      }
    }
  }
  // Spellings only a raw socket can send: no space, a tab, a trailing space in the value.
  for (const line of ['x-logprobe-mirror:1', 'X-LOGPROBE-MIRROR:\tbaseline', 'x-logprobe-mirror: 1 ']) {
    const reply = await new Promise<string>((resolve, reject) => {
      const sock = net.connect(Number(new URL(lp.proxyUrl).port), '127.0.0.1');
      let out = '';
      sock.on('data', (d) => (out += d.toString()));
      sock.on('end', () => resolve(out));
      sock.on('error', reject);
      sock.write(
        `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${line}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(chatRequest)}\r\nconnection: close\r\n\r\n${chatRequest}`,
      );
    });
    clientRequests++;
    assert.match(reply, /^HTTP\/1\.1 200/);
    assert.match(reply, /"who":"candidate"/, line);
  }
  await lp.runtime.mirror!.idle();

  for (const s of cand.seen) {
    assert.ok(
      !s.rawHeaders.some((h) => h.toLowerCase() === 'x-logprobe-mirror'),
      `the header reached the candidate: ${s.method} ${s.url}`,
    );
  }
  const mirroredCopies = cand.seen.length - clientRequests;
  assert.equal(base.seen.length, mirroredCopies, 'the baseline only ever got mirrored copies (one per candidate copy)');
  assert.ok(base.seen.length > 0, 'forcing did mirror some');
  for (const s of base.seen) {
    assert.equal(s.method, 'POST');
    assert.ok(
      ['/v1/completions', '/v1/chat/completions'].includes(s.url),
      `only configured mirror routes reach the baseline: ${s.url}`,
    );
    const sent = JSON.parse(s.body.toString('utf8')) as { temperature: number; logprobs: boolean };
    assert.equal(sent.temperature, 0, 'a rewritten mirror copy, not the client request');
    assert.ok(!s.rawHeaders.some((h) => h.toLowerCase() === 'x-logprobe-mirror'));
  }
});

// ---------------------------------------------------------------- B5: bounded label values

/** Every logprobe_* series in an exposition: `name{labels}` → the labels. */
function series(text: string): Map<string, Record<string, string>> {
  const out = new Map<string, Record<string, string>>();
  for (const line of text.split('\n')) {
    if (!line.startsWith('logprobe_')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? \S+$/.exec(line);
    assert.ok(m, `unparseable metric line: ${line}`);
    const labels: Record<string, string> = {};
    for (const part of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[part[1]!] = part[2]!;
    out.set(`${m[1]}{${m[2] ?? ''}}`, labels);
  }
  return out;
}

const ALLOWED: Record<string, ReadonlySet<string>> = {
  route: new Set([...KNOWN_ROUTES, 'other']),
  status_class: new Set(['1xx', '2xx', '3xx', '4xx', '5xx', 'aborted']),
  outcome: new Set<string>([...MIRROR_OUTCOMES, ...SCORING_OUTCOMES, ...CANARY_OUTCOMES]),
  profile: new Set<string>(ENGINE_NAMES),
  verdict: new Set<string>([...VERDICTS, ...SELF_VERDICTS, ...PATH_VERDICTS]),
  kind: new Set(['pair', 'self', 'path', 'canary']),
  cache: new Set<string>(CACHE_SPLITS),
  backend: new Set(['candidate', 'baseline']),
  class: new Set(['ambiguous', 'gray', 'systematic']),
  alert: new Set(ALERT_NAMES),
  reason: new Set<string>([...CAPTURE_ERROR_REASONS, ...OVERFLOW_REASONS, ...REFUSAL_REASONS, ...MIRROR_SKIP_REASONS]),
  probe: new Set<string>(PROBE_SHAPES),
  capability: new Set<string>(CAPABILITIES),
  field: new Set<string>(CAPPED_FIELDS),
  le: new Set([...LATENCY_BUCKETS, ...NATS_BUCKETS, ...POSITION_BUCKETS, '+Inf'].map(String)),
};

test('nothing a client sends creates label values past the configured bound: random paths, methods, queries, headers and bodies; model names fill slices.maxModels once, then are other', async (t) => {
  // The candidate answers by method only, so two batches of different random requests with the
  // same methods and route kinds should produce exactly the same series.
  const STATUS: Record<string, number> = {
    GET: 200,
    POST: 200,
    PUT: 201,
    DELETE: 404,
    PATCH: 500,
    OPTIONS: 204,
    HEAD: 301,
  };
  const cand = await startUpstream((req, res) => {
    const status = STATUS[req.method!] ?? 400;
    const body =
      status === 200
        ? JSON.stringify(
            chatBody([
              [' A', -0.1],
              [' B', -0.2],
              [' C', -0.3],
            ]),
          )
        : '{}';
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': status === 204 || status === 301 ? 0 : Buffer.byteLength(body),
    });
    res.end(status === 204 || status === 301 ? undefined : body);
  });
  const base = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify(
        chatBody([
          [' A', -0.1],
          [' B', -0.25],
          [' D', -0.3],
        ]),
      ),
    );
  });
  t.after(() => Promise.all([cand.close(), base.close()]));
  const lp = await startLogprobe({
    candidate: { url: cand.url },
    baseline: { url: base.url },
    mirror: { sampleRate: 1 },
    // The one label a client's body reaches: the first two model names seen; every later one is other.
    slices: { maxModels: 2 },
  });
  t.after(() => lp.close());
  const port = Number(new URL(lp.proxyUrl).port);

  let seed = 7;
  const rand = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
  const junk = (n: number) =>
    Array.from({ length: n }, () => 'abcdefghijklmnopqrstuvwxyz0123456789-_.~%'[Math.floor(rand() * 42)]).join('');
  const kinds = ['/v1/completions', '/v1/chat/completions', '/v1/models', '/health', 'random', 'lookalike'] as const;
  const methods = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD', 'PROPFIND', 'BREW'];

  async function batch(): Promise<void> {
    for (const kind of kinds) {
      for (const method of methods) {
        let path: string = kind;
        if (kind === 'random') path = `/${junk(8)}/${junk(12)}`;
        if (kind === 'lookalike') path = `/v1/completions/${junk(6)}`;
        const url = `${path}?${junk(5)}=${junk(10)}`;
        // With a body: a JSON one and a garbage one each time (the mirror treats them differently).
        const bodies =
          method === 'POST' || method === 'PUT'
            ? [JSON.stringify({ model: junk(5), prompt: junk(20), max_tokens: 3, [junk(4)]: junk(6) }), junk(40)]
            : [undefined];
        for (const body of bodies) {
          const res = await request(`${lp.proxyUrl}${url}`, {
            method: method as 'POST',
            body,
            headers: {
              'x-request-id': junk(30),
              'x-logprobe-mirror': rand() < 0.5 ? '1' : junk(6),
              [`x-${junk(6)}`]: junk(10),
              'user-agent': junk(12),
            },
          }).catch(() => null);
          await res?.body.dump();
        }
      }
    }
    // Targets only a raw socket sends: absolute-form, asterisk, a path with spaces encoded and a NUL.
    for (const target of [`http://${junk(8)}.example/${junk(5)}`, '*', `/${junk(4)}%00${junk(4)}`, `//${junk(6)}`]) {
      await new Promise<void>((resolve) => {
        const sock = net.connect(port, '127.0.0.1');
        sock.on('data', () => undefined);
        sock.on('close', () => resolve());
        sock.on('error', () => resolve());
        sock.write(`OPTIONS ${target} HTTP/1.1\r\nHost: ${junk(8)}\r\nconnection: close\r\n\r\n`);
      });
    }
    await lp.runtime.mirror!.idle();
  }

  await batch();
  const first = series(await (await request(`${lp.adminUrl}/metrics`)).body.text());
  await batch();
  const second = series(await (await request(`${lp.adminUrl}/metrics`)).body.text());

  const models = new Set<string>();
  for (const [key, labels] of second) {
    for (const [name, value] of Object.entries(labels)) {
      if (name === 'model') {
        models.add(value);
        continue;
      }
      const allowed = ALLOWED[name];
      assert.ok(allowed, `unexpected label name ${name} in ${key}`);
      assert.ok(allowed.has(value), `client input reached a label: ${key}`);
    }
  }
  assert.ok(
    models.has('other') && models.size <= 2 + 1,
    `model values within slices.maxModels + other: ${[...models]}`,
  );
  const added = [...second.keys()].filter((k) => !first.has(k));
  assert.deepEqual(added, [], 'a second batch of different random inputs added no series');
  // An upper bound from the fixed sets alone (routes × everything), far below one series per request.
  const catalogNames = new Set<string>(METRIC_CATALOG.map((m) => m.name));
  for (const key of second.keys())
    assert.ok(catalogNames.has(key.replace(/(_bucket|_sum|_count)?\{.*$/, '')), `not in the catalog: ${key}`);
  // The route-labelled series grow with the mirrored routes (R, 4 by default), and each model value
  // brings its own comparison series, 55 R + 12 (docs/operations.md "Label cardinality"): at most
  // slices.maxModels + other of them here.
  const R = 4;
  assert.ok(
    second.size < 330 * R + models.size * (58 * R + 14),
    `${second.size} series for ${models.size} model values after ${2 * kinds.length * methods.length} distinct requests`,
  );
});

// ---------------------------------------------------------------- the baseline's headers: an allow-list

test('the baseline copy carries an allow-list of headers: content-type, accept, its own key and baseline.forwardHeaders, never a planted credential', async (t) => {
  const planted: Record<string, string> = {
    authorization: 'Bearer sk-planted-AUTH-1',
    cookie: 'sid=planted-COOKIE-2',
    'x-api-key': 'planted-XAPIKEY-3',
    'api-key': 'planted-APIKEY-4',
    'x-goog-api-key': 'planted-GOOG-5',
    'openai-organization': 'org-planted-ORG-6',
    'openai-project': 'proj-planted-PROJ-7',
    'x-custom-token': 'planted-CUSTOM-8',
    'x-tenant': 'blue',
    'user-agent': 'planted-agent/1.0',
  };
  const sim = await startSim();
  t.after(() => sim.close());
  const candidate = await startUpstream((req, res, body) => relay(sim, req, res, body));
  const baseline = await startUpstream((req, res, body) => relay(sim, req, res, body));
  t.after(() => Promise.all([candidate.close(), baseline.close()]));
  const chat = JSON.stringify({ model: 'sim', messages: [{ role: 'user', content: 'allow-list' }], max_tokens: 4 });
  const send = async (lp: { proxyUrl: string; runtime: { mirror?: { idle(): Promise<void> } | undefined } }) => {
    const res = await request(`${lp.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      body: chat,
      headers: { ...planted, 'content-type': 'application/json' },
    });
    assert.equal(res.statusCode, 200);
    await res.body.dump();
    await lp.runtime.mirror!.idle();
  };

  const strict = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url, apiKey: 'sk-baseline-own' },
    mirror: { sampleRate: 1 },
  });
  await send(strict);
  await strict.close();
  const copy = baseline.seen.at(-1)!;
  const names = Object.keys(copy.headers)
    .filter((h) => !['host', 'content-length', 'connection'].includes(h))
    .sort();
  assert.deepEqual(names, ['accept', 'authorization', 'content-type'], 'nothing but the allow-list');
  assert.equal(copy.headers.authorization, 'Bearer sk-baseline-own');
  assert.ok(!/planted|blue/.test(JSON.stringify(copy.headers)), 'no planted value reached the baseline');
  // The candidate is the client's own deployment: its copy keeps the client's headers.
  const cand = candidate.seen.filter((s) => s.body.includes('"logprobs":true')).at(-1)!;
  assert.equal(cand.headers['x-tenant'], 'blue');
  assert.equal(cand.headers.authorization, planted.authorization);

  // Named headers pass, and only those; forwardAuth lets the client's API credentials through.
  const named = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url, forwardHeaders: ['X-Tenant', 'openai-organization'], forwardAuth: true },
    mirror: { sampleRate: 1 },
  });
  await send(named);
  await named.close();
  const copy2 = baseline.seen.at(-1)!;
  assert.equal(copy2.headers['x-tenant'], 'blue');
  assert.equal(copy2.headers['openai-organization'], planted['openai-organization']);
  assert.equal(copy2.headers.authorization, planted.authorization);
  assert.equal(copy2.headers['x-api-key'], planted['x-api-key']);
  for (const h of ['cookie', 'x-goog-api-key', 'openai-project', 'x-custom-token', 'user-agent'])
    assert.equal(copy2.headers[h], undefined, `${h} was not named`);
});

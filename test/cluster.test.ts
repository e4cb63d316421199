import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, request } from 'undici';
import { startCli } from './helpers/cli.js';
import { startUpstream } from './helpers/upstream.js';
import { tempDir } from './helpers/capture.js';
import { getWithHost } from './helpers/host.js';
import { metricValue } from './helpers/sim.js';
import { startEngineServer, createSimModel } from '@logprobe/engine';
import { candidateSwitch } from './helpers/switch.js';

// `logprobe serve` with listen.workers: 2 (the built CLI from dist/, real processes and sockets):
// a primary (the one mirror, the admin port) and two proxy worker processes sharing the public
// port through node:cluster.

const READY = /"proxyUrl":"(http:\/\/[^"]+)","adminUrl":"(http:\/\/[^"]+)"/;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function serve(t: { after(fn: () => void): void }, yaml: string) {
  const file = join(tempDir(t, 'logprobe-cluster-'), 'logprobe.yaml');
  writeFileSync(file, yaml);
  const proc = await startCli(['serve', '--config', file], READY);
  t.after(() => {
    if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
  });
  const [, proxyUrl, adminUrl] = proc.match as unknown as [string, string, string];
  const lines = () =>
    proc
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  const started = lines().find((l) => l.msg === 'logprobe listening') as { pids: number[] };
  return { ...proc, proxyUrl, adminUrl, port: Number(new URL(proxyUrl).port), lines, workerPids: started.pids };
}

async function metrics(adminUrl: string): Promise<string> {
  return (await request(`${adminUrl}/metrics`)).body.text();
}

/** Polls /metrics until `ok(text)` holds (or fails after `timeoutMs`). */
async function metricsUntil(adminUrl: string, ok: (text: string) => boolean, timeoutMs = 20_000): Promise<string> {
  const end = performance.now() + timeoutMs;
  let text = '';
  while (performance.now() < end) {
    text = await metrics(adminUrl);
    if (ok(text)) return text;
    await sleep(100);
  }
  assert.fail(
    `/metrics did not get there in ${timeoutMs} ms:\n${text
      .split('\n')
      .filter((l) => l.startsWith('logprobe_mirror_total') || l.startsWith('logprobe_proxy_requests_total'))
      .join('\n')}`,
  );
}

/** The pid that wrote each request line, by request id. */
function requestPids(lines: Array<Record<string, unknown>>): Map<string, number> {
  return new Map(lines.filter((l) => l.msg === 'request').map((l) => [l.reqId as string, l.pid as number]));
}

function tryConnect(port: number): Promise<'refused' | 'accepted'> {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    sock.once('connect', () => {
      sock.destroy();
      resolve('accepted');
    });
    sock.once('error', () => resolve('refused'));
  });
}

/** One completion on a connection of its own (node:cluster hands connections round-robin to the workers). */
async function completion(proxyUrl: string, id: string, maxTokens = 8): Promise<number> {
  const client = new Client(proxyUrl);
  try {
    const res = await client.request({
      path: '/v1/completions',
      method: 'POST',
      body: JSON.stringify({ model: 'sim', prompt: `Prompt ${id}: the capital of France is`, max_tokens: maxTokens }),
      headers: { 'content-type': 'application/json', 'x-request-id': id },
    });
    await res.body.text();
    return res.statusCode;
  } finally {
    await client.close();
  }
}

const sims = async (t: { after(fn: () => Promise<unknown>): void }, tokenDelayMs = 0) => {
  const candidate = await startEngineServer({ model: createSimModel({ seed: 7 }), concurrency: 0, tokenDelayMs });
  const baseline = await startEngineServer({ model: createSimModel({ seed: 7 }), concurrency: 0, tokenDelayMs });
  t.after(() => Promise.all([candidate.close(), baseline.close()]));
  return { candidate, baseline };
};

test('listen.workers 2: both processes serve clients, the mirrored pairs of both reach the one mirror and its one capture, /metrics sums both', async (t) => {
  const N = 24;
  const dir = tempDir(t);
  const { candidate, baseline } = await sims(t);
  const p = await serve(
    t,
    `listen: { host: 127.0.0.1, port: 0, workers: 2 }\nadmin: { host: 127.0.0.1, port: 0, allowedHosts: [lp-admin.test] }\ncandidate: { url: ${candidate.url} }\nbaseline: { url: ${baseline.url} }\n` +
      `mirror: { sampleRate: 1 }\ncapture: { enabled: true, dir: ${dir} }\nshutdown: { drainSeconds: 5 }\n`,
  );
  assert.equal(p.workerPids.length, 2);
  // The primary's admin port enforces admin.allowedHosts as a single process does (test/admin-hosts.test.ts).
  for (const path of ['/metrics', '/ui/data']) {
    assert.equal((await getWithHost(p.adminUrl, path, 'attacker.example')).status, 421, path);
    assert.equal((await getWithHost(p.adminUrl, path, '10.1.2.3:9464')).status, 200, path);
    assert.equal((await getWithHost(p.adminUrl, path, 'lp-admin.test:80')).status, 200, path);
  }
  assert.ok(!p.workerPids.includes(p.child.pid!), 'the workers are processes of their own');

  for (let i = 0; i < N; i++) assert.equal(await completion(p.proxyUrl, `r${i}`), 200);
  const text = await metricsUntil(
    p.adminUrl,
    (m) => (metricValue(m, 'logprobe_mirror_total', { outcome: 'ok' }) ?? 0) >= N,
  );
  assert.equal(
    metricValue(text, 'logprobe_mirror_total', { outcome: 'ok' }),
    N,
    'every request sent was mirrored once',
  );
  assert.equal(metricValue(text, 'logprobe_mirror_total', { outcome: 'dropped' }), 0);
  assert.equal(
    metricValue(text, 'logprobe_proxy_requests_total', { route: '/v1/completions', status_class: '2xx' }),
    N,
    'the requests of both workers, summed',
  );
  assert.equal(metricValue(text, 'logprobe_proxy_request_duration_seconds_count', { route: '/v1/completions' }), N);
  assert.equal(metricValue(text, 'logprobe_mirror_worker_up'), 1);
  assert.equal(
    metricValue(text, 'logprobe_admin_misdirected_total'),
    2,
    "the primary's count, once (the workers' zeros add nothing)",
  );
  assert.equal(
    metricValue(text, 'logprobe_verdicts_total', { verdict: 'identical' }),
    N,
    'one mirror compared them all',
  );
  assert.equal(text.match(/^# TYPE logprobe_proxy_requests_total /gm)?.length, 1, 'one family, not one per process');
  assert.match(text, /^process_start_time_seconds /m);

  const pids = requestPids(p.lines());
  assert.equal(pids.size, N);
  const perPid = new Map<number, number>();
  for (const pid of pids.values()) perPid.set(pid, (perPid.get(pid) ?? 0) + 1);
  assert.deepEqual(
    [...perPid.keys()].sort(),
    [...p.workerPids].sort(),
    `both workers served connections: ${JSON.stringify([...perPid])}`,
  );
  for (const [pid, n] of perPid) assert.ok(n >= N / 4, `worker ${pid} served ${n} of ${N} (round-robin)`);

  p.child.kill('SIGTERM');
  assert.equal(await p.exited, 0, p.output());
  // One capture writer, the primary's mirror worker thread: its pid names the files.
  const files = readdirSync(dir);
  assert.ok(files.length >= 1 && files.every((f) => f.includes(`-${p.child.pid}-`)), files.join(', '));
  const records = files.flatMap((f) => readFileSync(join(dir, f), 'utf8').split('\n').filter(Boolean));
  assert.equal(records.length, N);
});

test('listen.workers 2: a killed proxy worker is started again, a stream on the other one is not cut, /metrics keeps the counters it had', async (t) => {
  const EVENTS = Array.from({ length: 10 }, (_, i) => `data: {"choices":[{"text":"part ${i}"}]}\n\n`);
  const up = await startUpstream(async (req, res) => {
    if (req.url!.includes('stream')) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const ev of EVENTS) {
        res.write(ev);
        await sleep(100);
      }
      res.end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"ok":true}');
  });
  t.after(() => up.close());
  const p = await serve(
    t,
    `listen: { host: 127.0.0.1, port: 0, workers: 2 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${up.url} }\nmirror: { sampleRate: 0 }\ncapture: { enabled: false }\nshutdown: { drainSeconds: 2 }\n`,
  );
  // Four keep-alive connections; the request log says which worker each one is on.
  const clients = Array.from({ length: 4 }, () => new Client(p.proxyUrl));
  t.after(() => Promise.all(clients.map((c) => c.destroy())));
  for (const [i, c] of clients.entries()) {
    const res = await c.request({ path: '/v1/models', method: 'GET', headers: { 'x-request-id': `c${i}` } });
    assert.equal(await res.body.text(), '{"ok":true}');
  }
  const before = await metricsUntil(
    p.adminUrl,
    (m) => metricValue(m, 'logprobe_proxy_requests_total', { route: '/v1/models', status_class: '2xx' }) === 4,
  );
  assert.ok(before);
  const on = requestPids(p.lines());
  const victim = on.get('c0')!;
  const survivorIndex = [...clients.keys()].find((i) => on.get(`c${i}`) !== victim);
  assert.ok(survivorIndex !== undefined, `the connections are on both workers: ${JSON.stringify([...on])}`);
  const survivor = clients[survivorIndex]!;

  // A stream on the other worker, then the first worker killed while it runs.
  const stream = survivor
    .request({
      path: '/v1/completions?stream',
      method: 'POST',
      body: '{"stream":true}',
      headers: { 'content-type': 'application/json' },
    })
    .then(async (r) => ({ status: r.statusCode, body: await r.body.text() }));
  while (up.seen.filter((s) => s.url.includes('stream')).length < 1) await sleep(10);
  await sleep(150);
  process.kill(victim, 'SIGKILL');
  const r = await stream;
  assert.equal(r.status, 200);
  assert.equal(r.body, EVENTS.join(''), 'the stream on the other worker arrived whole');

  // Restarted (a new pid in slot 1 or 2), logged; new connections are all answered meanwhile.
  for (let i = 0; i < 6; i++) assert.equal(await completionTo(p.proxyUrl, `n${i}`), 200);
  const deadline = performance.now() + 15_000;
  while (!p.lines().some((l) => l.msg === 'proxy worker started again') && performance.now() < deadline)
    await sleep(50);
  const exited = p.lines().find((l) => l.msg?.toString().startsWith('proxy worker exited'));
  assert.ok(exited, p.output());
  assert.equal(exited.pid, victim);
  assert.equal(exited.signal, 'SIGKILL');
  const again = p.lines().find((l) => l.msg === 'proxy worker started again');
  assert.ok(
    again && typeof again.pid === 'number' && again.pid !== victim && !p.workerPids.includes(again.pid),
    p.output(),
  );
  assert.equal((await request(`${p.adminUrl}/readyz`)).statusCode, 200);

  // The new worker serves too.
  // (Each worker's request log lines reach the test through the primary's stdout, a little late
  // on a loaded machine: the pids are read once more after the requests.)
  const servedBy = (n: number) =>
    new Set(
      Array.from({ length: n }, (_, i) => requestPids(p.lines()).get(`m${i}`)).filter(
        (x): x is number => x !== undefined,
      ),
    );
  let sent = 0;
  for (; sent < 30 && !servedBy(sent).has(again.pid as number); sent++) {
    assert.equal(await completionTo(p.proxyUrl, `m${sent}`), 200);
    await sleep(20);
  }
  const settle = performance.now() + 3000;
  while (!servedBy(sent).has(again.pid as number) && performance.now() < settle) await sleep(50);
  assert.ok(
    servedBy(sent).has(again.pid as number),
    `the restarted worker serves connections (${[...servedBy(sent)]} of ${sent} requests)`,
  );

  // The counters never went back: the dead worker's requests (as last scraped) are still there.
  const after = await metrics(p.adminUrl);
  const other = metricValue(after, 'logprobe_proxy_requests_total', { route: '/v1/models', status_class: '2xx' })!;
  const completions = metricValue(after, 'logprobe_proxy_requests_total', {
    route: '/v1/completions',
    status_class: '2xx',
  })!;
  assert.equal(other, 4, 'the four requests before the kill, one worker of them gone');
  assert.ok(completions >= 1 + 6, `the stream and the requests after the kill (${completions})`);

  p.child.kill('SIGTERM');
  assert.equal(await p.exited, 0, p.output());
});

/** A request on a connection of its own, to the chat route the test upstream answers with JSON. */
async function completionTo(proxyUrl: string, id: string): Promise<number> {
  const client = new Client(proxyUrl);
  try {
    const res = await client.request({
      path: '/v1/completions',
      method: 'POST',
      body: '{}',
      headers: { 'content-type': 'application/json', 'x-request-id': id },
    });
    await res.body.text();
    return res.statusCode;
  } finally {
    await client.close();
  }
}

test('listen.workers 2: SIGTERM drains both workers (their requests finish, /readyz 503, new connections refused), then the mirror and the capture, exit 0', async (t) => {
  const N = 8;
  const dir = tempDir(t);
  // 4 ms a token, 250 tokens: a client request takes ~1 s; its mirrored copy (64 tokens) ~0.3 s.
  const { candidate, baseline } = await sims(t, 4);
  const p = await serve(
    t,
    `listen: { host: 127.0.0.1, port: 0, workers: 2 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${candidate.url} }\nbaseline: { url: ${baseline.url} }\n` +
      `mirror: { sampleRate: 1, concurrency: 2, queueSize: 100 }\ncapture: { enabled: true, dir: ${dir} }\nshutdown: { drainSeconds: 10 }\n`,
  );
  const inflight = Array.from({ length: N }, (_, i) =>
    completion(p.proxyUrl, `d${i}`, 250).then((status) => ({ status, at: performance.now() })),
  );
  await sleep(400);
  const signalled = performance.now();
  p.child.kill('SIGTERM');
  let refusedAt: number | null = null;
  let readyz: number | null = null;
  while (performance.now() - signalled < 2000) {
    // Until the process has taken the signal it is still ready: poll until it says otherwise.
    if (readyz !== 503)
      readyz = await request(`${p.adminUrl}/readyz`).then(
        async (r) => (await r.body.text(), r.statusCode),
        () => null,
      );
    if ((await tryConnect(p.port)) === 'refused') {
      refusedAt = performance.now();
      break;
    }
    await sleep(10);
  }
  // The port may close before a poll of /readyz saw the drain: the admin port stays up while the workers drain.
  while (readyz !== 503 && performance.now() - signalled < 2000) {
    readyz = await request(`${p.adminUrl}/readyz`).then(
      async (r) => (await r.body.text(), r.statusCode),
      () => null,
    );
    await sleep(10);
  }
  assert.equal(readyz, 503, '/readyz says so while the workers drain');
  assert.ok(refusedAt !== null, 'a new connection is refused within 2 s of SIGTERM');
  const results = await Promise.all(inflight);
  for (const [i, r] of results.entries()) assert.equal(r.status, 200, `request ${i}`);
  assert.ok(
    results.some((r) => r.at > refusedAt!),
    'requests were still running while new connections were refused',
  );
  assert.equal(await p.exited, 0, p.output());
  const pids = new Set(requestPids(p.lines()).values());
  assert.equal(pids.size, 2, 'both workers had requests in flight');
  const lines = p.lines().map((l) => l.msg);
  assert.equal(lines.filter((m) => m === 'proxy worker stopped').length, 2);
  assert.ok(lines.lastIndexOf('proxy worker stopped') < lines.indexOf('logprobe stopped'));
  // Mirrored after the workers had stopped: every pair is in the capture.
  const records = readdirSync(dir).flatMap((f) => readFileSync(join(dir, f), 'utf8').split('\n').filter(Boolean));
  assert.equal(records.length, N, p.output());
  assert.doesNotMatch(p.output(), /drain time over|did not stop in time|dropped/);
});

test('listen.workers 2 with canaries: the proxy workers tell the primary their client requests in flight, and a busy client path pauses the canaries (saturated)', async (t) => {
  const [cand, base] = await Promise.all(
    [1, 2].map(() => startEngineServer({ model: createSimModel({ seed: 5, id: 'm' }), api: 'vllm' })),
  );
  t.after(() => Promise.all([cand!.close(), base!.close()]));
  const sw = await candidateSwitch(t, cand!.url);
  const p = await serve(
    t,
    `listen: { host: 127.0.0.1, port: 0, workers: 2 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${sw.url} }\nbaseline: { url: ${base!.url} }\n` +
      `mirror: { sampleRate: 0 }\ncanary: { enabled: true, intervalSeconds: 0.5, jitterSeconds: 0, maxCandidateInFlight: 1 }\n`,
  );
  const ok = async () => metricValue(await metrics(p.adminUrl), 'logprobe_canary_probes_total', { outcome: 'ok' }) ?? 0;
  const deadline = performance.now() + 20_000;
  while ((await ok()) < 12) {
    assert.ok(performance.now() < deadline, 'a first canary round');
    await sleep(100);
  }
  // Four client requests held at the candidate, spread over the two workers: above the limit of 1.
  const clients = [1, 2, 3, 4].map(() =>
    request(`${p.proxyUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: 'HOLD this', max_tokens: 4 }),
    }),
  );
  while (sw.held() < 4) {
    assert.ok(performance.now() < deadline, 'the client requests reach the candidate');
    await sleep(20);
  }
  await sleep(800); // each worker's load (4 times a second), then the primary's, reach the mirror; a round in flight ends
  const before = await ok();
  await sleep(1500);
  const text = await metrics(p.adminUrl);
  assert.equal(metricValue(text, 'logprobe_canary_probes_total', { outcome: 'ok' }), before, 'no probe while busy');
  assert.ok(metricValue(text, 'logprobe_canary_probes_total', { outcome: 'saturated' })! >= 12, 'counted as saturated');
  sw.release();
  for (const c of await Promise.all(clients)) {
    assert.equal(c.statusCode, 200);
    await c.body.dump();
  }
  while ((await ok()) <= before) {
    assert.ok(performance.now() < deadline + 10_000, 'probes again once the clients are answered');
    await sleep(100);
  }
});

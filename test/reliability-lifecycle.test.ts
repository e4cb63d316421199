import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { readdirSync, readFileSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, request } from 'undici';
import { runCli, startCli } from './helpers/cli.js';
import { startUpstream } from './helpers/upstream.js';
import { tempDir } from './helpers/capture.js';
import { metricValue } from './helpers/sim.js';
import { startEngineServer } from '@logprobe/engine';
import { createSimModel } from '@logprobe/engine';

// Lifecycle of the real `logprobe serve` process (dist/, built by `npm run build`): SIGTERM under
// load, SIGTERM with mirrored pairs still queued, SIGKILL in the middle of capture writing.

const READY = /"proxyUrl":"(http:\/\/[^"]+)","adminUrl":"(http:\/\/[^"]+)"/;

function writeConfig(t: { after(fn: () => void): void }, yaml: string): string {
  const file = join(tempDir(t, 'logprobe-life-'), 'logprobe.yaml');
  writeFileSync(file, yaml);
  return file;
}

async function serve(t: { after(fn: () => void): void }, yaml: string) {
  // No start-up probe: these tests count and time the upstreams' requests (the probe's own
  // shutdown is tested in test/serve-backends.test.ts).
  const proc = await startCli(['serve', '--config', writeConfig(t, `${yaml}probe: { atStart: off }\n`)], READY);
  t.after(() => {
    if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
  });
  const [, proxyUrl, adminUrl] = proc.match as unknown as [string, string, string];
  return { ...proc, proxyUrl, adminUrl, port: Number(new URL(proxyUrl).port) };
}

/** Resolves 'refused' when a new TCP connection to the port is refused, 'accepted' otherwise. */
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A body long enough to need many TCP segments, so that a cut response cannot pass for complete. */
const BIG = JSON.stringify({ object: 'text_completion', choices: [{ text: 'x'.repeat(200_000) }] });
const SSE_EVENTS =
  Array.from({ length: 6 }, (_, i) => `data: {"choices":[{"text":"part ${i}"}]}\n\n`).join('') + 'data: [DONE]\n\n';

test('SIGTERM with 10 slow requests in flight: all 10 finish complete with 200, new connections are refused at once, exit 0 within drainSeconds', async (t) => {
  // The upstream answers after ~1.5 s: half of the requests get a 200 KB JSON body, half an SSE
  // stream spread over that time (its events arrive while the proxy is already draining).
  const up = await startUpstream(async (req, res) => {
    if (req.url!.includes('stream')) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const ev of SSE_EVENTS.split(/(?<=\n\n)/)) {
        res.write(ev);
        await sleep(200);
      }
      res.end();
      return;
    }
    await sleep(1500);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BIG) });
    res.end(BIG);
  });
  t.after(() => up.close());
  const p = await serve(
    t,
    `listen: { host: 127.0.0.1, port: 0 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${up.url} }\nmirror: { sampleRate: 0 }\ncapture: { enabled: false }\nshutdown: { drainSeconds: 5 }\n`,
  );
  // One connection per request, as 10 separate clients would do.
  const clients = Array.from({ length: 10 }, () => new Client(p.proxyUrl));
  t.after(() => Promise.all(clients.map((c) => c.destroy())));
  const inflight = clients.map(async (c, i) => {
    const res = await c.request({
      path: i % 2 === 0 ? '/v1/completions' : '/v1/completions?stream',
      method: 'POST',
      body: `{"i":${i}}`,
      headers: { 'content-type': 'application/json' },
    });
    return { status: res.statusCode, body: await res.body.text(), at: performance.now() };
  });
  while (up.seen.length < 10) await sleep(10);

  const signalled = performance.now();
  p.child.kill('SIGTERM');
  let refusedAt: number | null = null;
  while (performance.now() - signalled < 1000) {
    if ((await tryConnect(p.port)) === 'refused') {
      refusedAt = performance.now();
      break;
    }
    await sleep(10);
  }
  assert.ok(refusedAt !== null, 'a new connection is refused within 1 s of SIGTERM');

  const results = await Promise.all(inflight);
  const code = await p.exited;
  const exitedAfterMs = performance.now() - signalled;
  for (const [i, r] of results.entries()) {
    assert.equal(r.status, 200, `request ${i}`);
    assert.equal(r.body, i % 2 === 0 ? BIG : SSE_EVENTS, `request ${i}: the whole body`);
    assert.ok(r.at > refusedAt, 'the in-flight requests were still running while new connections were refused');
  }
  assert.equal(code, 0, p.output());
  assert.ok(exitedAfterMs < 5000, `exited ${Math.round(exitedAfterMs)} ms after SIGTERM (drainSeconds 5)`);
  assert.equal(await tryConnect(p.port), 'refused');
  assert.match(p.output(), /logprobe stopped/);
  assert.doesNotMatch(p.output(), /drain time over/);
});

test(
  'SIGTERM with a request longer than drainSeconds: the drain timer cuts it and the process exits 0 at about drainSeconds',
  {},
  async (t) => {
    const up = await startUpstream((_req, res) => {
      const timer = setTimeout(() => res.end('{"late":true}'), 20_000);
      res.on('close', () => clearTimeout(timer));
    });
    t.after(() => up.close());
    const p = await serve(
      t,
      `listen: { host: 127.0.0.1, port: 0 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${up.url} }\nmirror: { sampleRate: 0 }\ncapture: { enabled: false }\nshutdown: { drainSeconds: 1 }\n`,
    );
    const client = new Client(p.proxyUrl);
    t.after(() => client.destroy());
    const inflight = client
      .request({ path: '/v1/completions', method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } })
      .then(
        async (r) => ({ status: r.statusCode, body: await r.body.text() }),
        (err: Error) => ({ error: err }),
      );
    while (up.seen.length < 1) await sleep(10);
    const signalled = performance.now();
    p.child.kill('SIGTERM');
    const code = await Promise.race([p.exited, sleep(6000).then(() => 'still running' as const)]);
    const after = performance.now() - signalled;
    assert.equal(code, 0, `exit code after ${Math.round(after)} ms\n${p.output()}`);
    assert.ok(after < 3000, `exited ${Math.round(after)} ms after SIGTERM (drainSeconds 1)`);
    assert.match(p.output(), /drain time over/);
    const r = await inflight;
    assert.ok('error' in r, 'the cut request fails on the client side (no fake success)');
  },
);

/** A sim engine whose every generated token takes `tokenDelayMs` (in this process). */
function slowSim(seed: number, tokenDelayMs: number) {
  return startEngineServer({ model: createSimModel({ seed }), concurrency: 0, tokenDelayMs });
}

async function sendCompletion(proxyUrl: string, i: number, maxTokens = 12): Promise<number> {
  const res = await request(`${proxyUrl}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({ model: 'sim', prompt: `Prompt ${i}: the capital of France is`, max_tokens: maxTokens }),
    headers: { 'content-type': 'application/json' },
  });
  await res.body.text();
  return res.statusCode;
}

function linesOf(file: string): string[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '');
}

test('SIGTERM right after the last response: the mirror drains its queue and every one of the N pairs is in the capture, within drainSeconds', async (t) => {
  const N = 24;
  const dir = tempDir(t);
  // 3 ms a token: a mirrored pair (two generations at once, mirror.concurrency 2) is as slow as
  // a client request, and 6 clients at once outrun 2 mirror slots, so pairs are still queued at
  // the signal.
  const baseline = await slowSim(11, 3);
  const candidate = await slowSim(11, 3);
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const p = await serve(
    t,
    `listen: { host: 127.0.0.1, port: 0 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${candidate.url} }\nbaseline: { url: ${baseline.url} }\n` +
      `mirror: { sampleRate: 1, concurrency: 2, queueSize: 1000 }\ncapture: { enabled: true, dir: ${dir} }\nshutdown: { drainSeconds: 10 }\n`,
  );
  let next = 0;
  await Promise.all(
    Array.from({ length: 6 }, async () => {
      while (next < N) assert.equal(await sendCompletion(p.proxyUrl, next++), 200);
    }),
  );
  const metrics = await (await request(`${p.adminUrl}/metrics`)).body.text();
  const signalled = performance.now();
  p.child.kill('SIGTERM');
  const code = await p.exited;
  const after = performance.now() - signalled;
  const finishedBefore = metricValue(metrics, 'logprobe_mirror_total', { outcome: 'ok' }) ?? 0;
  assert.ok(finishedBefore < N, `pairs were still queued or running at SIGTERM (${finishedBefore} of ${N} finished)`);
  assert.equal(code, 0, p.output());
  assert.ok(after < 10_000, `exited ${Math.round(after)} ms after SIGTERM (drainSeconds 10)`);
  const files = readdirSync(dir).map((f) => join(dir, f));
  const lines = files.flatMap(linesOf);
  assert.equal(lines.length, N, `${N} records, none lost (${finishedBefore} were done at the signal)`);
  const records = lines.map((l) => JSON.parse(l) as { outcome: string; request: { prompt: string } });
  assert.ok(records.every((r) => r.outcome === 'ok'));
  assert.equal(new Set(records.map((r) => r.request.prompt)).size, N, 'one record per request, no duplicate');
  assert.doesNotMatch(p.output(), /dropped/);
});

test('SIGKILL while capturing: a new process writes a new file beside the old one, and analyze reports the torn last line as a skip, exit 0', async (t) => {
  const dir = tempDir(t);
  const baseline = await slowSim(11, 0);
  const candidate = await slowSim(11, 0);
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const yaml =
    `listen: { host: 127.0.0.1, port: 0 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${candidate.url} }\nbaseline: { url: ${baseline.url} }\n` +
    `mirror: { sampleRate: 1, queueSize: 1000 }\ncapture: { enabled: true, dir: ${dir} }\n`;
  const first = await serve(t, yaml);

  // Traffic runs until the kill; the kill comes once a first flush has reached the disk.
  let stop = false;
  let sent = 0;
  const traffic = Promise.all(
    Array.from({ length: 4 }, async () => {
      while (!stop) {
        try {
          await sendCompletion(first.proxyUrl, sent++, 24);
        } catch {
          return; // the proxy was killed under this request
        }
      }
    }),
  );
  const fileSize = () => readdirSync(dir).reduce((n, f) => n + statSync(join(dir, f)).size, 0);
  const deadline = Date.now() + 15_000;
  while (fileSize() === 0 && Date.now() < deadline) await sleep(20);
  await sleep(150); // into the next buffering second: records are waiting in memory at the kill
  first.child.kill('SIGKILL');
  stop = true;
  await traffic;
  assert.equal(await first.exited, null, 'killed by the signal');

  const oldFiles = readdirSync(dir);
  assert.equal(oldFiles.length, 1, `one capture file from the killed process: ${oldFiles.join(', ')}`);
  const oldFile = join(dir, oldFiles[0]!);
  let oldBytes = readFileSync(oldFile);
  const completeBefore = linesOf(oldFile).length;
  assert.ok(completeBefore > 0);
  // Writes are whole buffered batches (one write() of complete lines each), so SIGKILL leaves a
  // torn line only if it lands inside a write(2); that is rare, so the torn tail a crash or a
  // power cut can leave is made here: the file is cut in the middle of its last record.
  let tornByTest = false;
  if (oldBytes[oldBytes.length - 1] === 0x0a) {
    const lastStart = oldBytes.lastIndexOf(0x0a, oldBytes.length - 2) + 1;
    const cut = lastStart + Math.floor((oldBytes.length - 1 - lastStart) / 2);
    truncateSync(oldFile, cut);
    oldBytes = readFileSync(oldFile);
    tornByTest = true;
  }
  const completeLines = oldBytes.toString('utf8').split('\n').length - 1;
  t.diagnostic(
    `killed after ${sent} requests; old file: ${completeLines} complete records + a torn one (${tornByTest ? 'cut by the test' : 'torn by the kill'})`,
  );

  const second = await serve(t, yaml);
  for (let i = 0; i < 5; i++) assert.equal(await sendCompletion(second.proxyUrl, 1000 + i), 200);
  second.child.kill('SIGTERM');
  assert.equal(await second.exited, 0, second.output());

  const files = readdirSync(dir).sort();
  assert.equal(files.length, 2, `a new file beside the old one: ${files.join(', ')}`);
  assert.ok(readFileSync(oldFile).equals(oldBytes), 'the old file is neither appended to nor clobbered');
  const newFile = join(
    dir,
    files.find((f) => join(dir, f) !== oldFile)!,
  );
  assert.equal(linesOf(newFile).length, 5, 'the new process captured its 5 pairs in its own file');
  assert.equal(statSync(newFile).mode & 0o777, 0o600);

  // analyze on the directory and on the old file alone: the torn line is a reported skip, not a crash.
  for (const input of [dir, oldFile]) {
    const r = await runCli(['analyze', input, '--json']);
    assert.equal(r.code, 0, `analyze ${input}: ${r.stderr}`);
    const tornLine = completeLines + 1;
    assert.ok(r.stderr.includes(`${oldFile}:${tornLine}: truncated record (incomplete JSON)`), r.stderr);
    assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
    const pairs = r.stdout
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { file: string });
    assert.equal(pairs.length, completeLines + (input === dir ? 5 : 0), 'every complete record analysed');
  }
  const text = await runCli(['analyze', oldFile]);
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stderr, /truncated record/);
});

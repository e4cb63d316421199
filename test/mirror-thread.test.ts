import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, sendChatOrCompletion, startSim } from './helpers/sim.js';
import { startUpstream } from './helpers/upstream.js';

// The mirror runs in a worker thread (src/worker/handle.ts, worker.ts): these tests cover what the
// hand-over adds — the proxy's own body copy, merged metrics, forwarded logs, the worker's
// priority, and a worker that dies (what /metrics shows then: mirror-worker-down.test.ts).

const PROMPTS = { chat: 'thread test: why is the sky blue?', completion: 'thread test: the capital of France is' };

async function scrape(adminUrl: string): Promise<string> {
  return (await request(`${adminUrl}/metrics`)).body.text();
}

test('a body that arrives in many TCP writes reaches the mirror byte for byte, with the client headers the mirror needs', async (t) => {
  const baseline = await startSim();
  const candidate = await startUpstream((req, res, body) => {
    if (req.method !== 'POST' || !req.url!.endsWith('completions')) return res.writeHead(404).end();
    const b = JSON.parse(body.toString()) as Record<string, unknown>;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        choices: [
          {
            index: 0,
            text: 'x',
            finish_reason: 'length',
            logprobs: b.logprobs
              ? { tokens: ['x'], token_logprobs: [-0.5], top_logprobs: [{ x: -0.5, y: -1.5 }] }
              : null,
          },
        ],
      }),
    );
  });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1 },
  });
  t.after(() => lp.close());
  // A body split over several TCP writes (the proxy keeps every part), with a custom header.
  const prompt = `split body ${'é'.repeat(3000)}`;
  const body = Buffer.from(JSON.stringify({ model: 'sim', prompt, max_tokens: 4 }));
  const res = await request(`${lp.proxyUrl}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'content-length': String(body.length), 'x-tenant': 'blue' },
    body: Readable.from(
      (async function* () {
        for (let i = 0; i < body.length; i += 1000) {
          yield body.subarray(i, i + 1000);
          await new Promise((r) => setTimeout(r, 5));
        }
      })(),
    ),
  });
  assert.equal(res.statusCode, 200);
  await res.body.text();
  await lp.runtime.mirror!.idle();
  const mirrored = candidate.seen.filter(
    (r) => r.url.endsWith('completions') && JSON.parse(r.body.toString()).logprobs,
  );
  assert.equal(mirrored.length, 1, 'one mirrored copy at the candidate');
  const copy = JSON.parse(mirrored[0]!.body.toString()) as Record<string, unknown>;
  assert.equal(copy.prompt, prompt, 'the copy carries the exact prompt');
  assert.equal(mirrored[0]!.headers['x-tenant'], 'blue', 'client headers travel with the copy');
});

test('/metrics merges the worker registry into one valid exposition, and the worker logs through the main logger', async (t) => {
  const candidate = await startSim();
  const baseline = await startSim();
  const baselineUrl = baseline.url;
  await baseline.close(); // down: every pair is a baseline_error, logged at debug by the worker
  t.after(() => candidate.close());
  const lp = await startLogprobe(
    { candidate: { url: candidate.url }, baseline: { url: baselineUrl }, mirror: { sampleRate: 1 } },
    { level: 'debug' },
  );
  t.after(() => lp.close());
  for (let i = 0; i < 4; i++) assert.equal(await sendChatOrCompletion(lp.proxyUrl, i, PROMPTS), 200);
  await lp.runtime.mirror!.idle();
  const text = await scrape(lp.adminUrl);
  assert.equal(metricValue(text, 'logprobe_mirror_total', { outcome: 'baseline_error' }), 4);
  assert.equal(
    metricValue(text, 'logprobe_proxy_requests_total', { route: '/v1/completions', status_class: '2xx' }),
    2,
  );
  assert.ok(metricValue(text, 'process_start_time_seconds')! > 0, 'process metrics kept');
  // Every family once, with its HELP and TYPE.
  const types = text.split('\n').filter((l) => l.startsWith('# TYPE '));
  assert.equal(new Set(types).size, types.length, 'no family repeated');
  const mirrorLines = lp.logs.lines.filter((l) => l.module === 'mirror' && l.msg === 'mirror pair not compared');
  assert.equal(mirrorLines.length, 4, 'worker log lines reach the main destination');
  assert.equal(mirrorLines[0]!.outcome, 'baseline_error');
});

test(
  "the mirror thread runs 10 nice levels below the proxy, whatever the proxy's own level (Linux)",
  { skip: process.platform !== 'linux' },
  async (t) => {
    const lp = await startLogprobe({
      candidate: { url: 'http://127.0.0.1:9' },
      baseline: { url: 'http://127.0.0.1:9' },
    });
    t.after(() => lp.close());
    const niceOf = (tid: string) => {
      const st = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      return Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[16]);
    };
    // Relative to the process's own level (npm test may itself run under `nice -n 10`).
    const own = niceOf(String(process.pid));
    const want = Math.min(19, own + 10);
    let nice: number[] = [];
    for (let i = 0; i < 50; i++) {
      nice = readdirSync('/proc/self/task').map(niceOf);
      if (nice.includes(want)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(niceOf(String(process.pid)), own, 'the main thread keeps its priority');
    assert.ok(nice.includes(want), `one thread at nice ${want}, 10 below the process's ${own} (saw ${nice.join(',')})`);
  },
);

test('a mirror worker that dies stops mirroring (dropped, counted, logged) and clients never notice', async (t) => {
  const candidate = await startSim();
  const baseline = await startSim();
  t.after(() => Promise.all([candidate.close(), baseline.close()]));
  // The worker's entry with faults on demand: a body saying LOGPROBE-TEST-CRASH throws in it.
  const lp = await startLogprobe(
    { candidate: { url: candidate.url }, baseline: { url: baseline.url }, mirror: { sampleRate: 1 } },
    { mirrorWorkerUrl: new URL('./helpers/mirror-worker-faults.mjs', import.meta.url) },
  );
  t.after(() => lp.close());
  assert.equal(await sendChatOrCompletion(lp.proxyUrl, 0, PROMPTS), 200);
  await lp.runtime.mirror!.idle();
  assert.equal(
    await sendChatOrCompletion(lp.proxyUrl, 1, { chat: 'LOGPROBE-TEST-CRASH', completion: 'LOGPROBE-TEST-CRASH' }),
    200,
  );
  await lp.runtime.mirror!.idle(); // resolves when the worker is gone
  assert.equal(lp.runtime.mirror!.workerRunning, false);
  for (let i = 2; i <= 5; i++) assert.equal(await sendChatOrCompletion(lp.proxyUrl, i, PROMPTS), 200);
  await lp.runtime.mirror!.idle();
  const text = await scrape(lp.adminUrl);
  assert.equal(metricValue(text, 'logprobe_mirror_total', { outcome: 'dropped' }), 4);
  assert.equal((await request(`${lp.adminUrl}/healthz`)).statusCode, 200);
  assert.ok(
    lp.logs.lines.some((l) => l.level === 'error' && String(l.msg).includes('mirror worker stopped')),
    'the stop is logged',
  );
});

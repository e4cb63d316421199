/**
 * What the live page (GET /ui) costs, on demand: `node --import tsx bench/live-cost.ts`.
 *
 * 1. The worker's share: building a pair's strip (both bodies parsed again, buildStrip, the
 *    bounds) next to what the mirror does for that pair anyway (parse both bodies, compare), on a
 *    real 64-token chat pair with top-5 logprobs from the simulated engines; and one poll's
 *    serialisation (the first: every pair held; later: only what is new).
 * 2. The proxy's thread: client throughput and latency through logprobe (autocannon, closed
 *    loop) without a page, then with pollers far more eager than a page (4 × every 250 ms, 24
 *    times one page's rate), then without again.
 *
 * Figures go to stdout; docs/operations.md ("The live page") quotes them.
 */
import { spawn } from 'node:child_process';
import { Worker } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { buildConfig } from '../src/config/load.js';
import { compare, DEFAULT_THRESHOLDS, parseResponse } from '../src/core/index.js';
import { LiveFeed, LIVE_PAIRS } from '../src/live/feed.js';
import { initialDetectorState } from '../src/core/detector.js';
import type { MirroredPair } from '../src/pair/types.js';
import { startLogprobe } from '../test/helpers/logprobe.js';
import { startSim } from '../test/helpers/sim.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CHAT = {
  model: 'sim',
  messages: [{ role: 'user', content: 'Tell me about the history of the printing press.' }],
  max_tokens: 64,
  temperature: 0,
  logprobs: true,
  top_logprobs: 5,
  seed: 1234,
};

async function generate(url: string): Promise<unknown> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    body: JSON.stringify(CHAT),
    headers: { 'content-type': 'application/json' },
  });
  return res.body.json();
}

function timeIt(n: number, f: () => void): number {
  for (let i = 0; i < 50; i++) f();
  const t0 = performance.now();
  for (let i = 0; i < n; i++) f();
  return (performance.now() - t0) / n;
}

async function workerShare(): Promise<void> {
  const base = await startSim();
  const cand = await startSim({ noise: 0.001 });
  const [cb, bb] = await Promise.all([generate(cand.url), generate(base.url)]);
  await Promise.all([base.close(), cand.close()]);
  const analysis = compare(parseResponse(cb), parseResponse(bb), DEFAULT_THRESHOLDS);
  const pair: MirroredPair = {
    id: 'req-1',
    ts: new Date().toISOString(),
    route: '/v1/chat/completions',
    path: '/v1/chat/completions',
    request: CHAT,
    clientHeaders: {},
    candidate: { status: 200, latencyMs: 10, body: cb, serverHeaders: {}, error: null },
    baseline: { status: 200, latencyMs: 10, body: bb, serverHeaders: {}, error: null },
    outcome: 'ok',
    analysis,
    noiseFloor: 0.1,
  };
  const mirrorMs = timeIt(2000, () => compare(parseResponse(cb), parseResponse(bb), DEFAULT_THRESHOLDS));
  const state = initialDetectorState();
  const feed = new LiveFeed(buildConfig({}), () => state);
  feed.snapshot(0, 0); // a page is open: strips are built as pairs come
  const stripMs = timeIt(2000, () => feed.onPair(pair));
  let first = '';
  const firstMs = timeIt(200, () => (first = feed.snapshot(0, 0)));
  let next = '';
  const nextMs = timeIt(2000, () => (next = feed.snapshot(2049, Date.now())));
  feed.close();
  const positions = analysis.positions.length;
  console.log(
    `worker, per pair (${positions} compared positions, top-5): parse + compare ${mirrorMs.toFixed(3)} ms (the mirror's own); the live strip ${stripMs.toFixed(3)} ms (${((100 * stripMs) / mirrorMs).toFixed(0)}% of that)`,
  );
  console.log(
    `worker, per poll: the first (${LIVE_PAIRS} pairs) ${firstMs.toFixed(2)} ms, ${(first.length / 1024).toFixed(0)} KB; later ones (one new pair) ${nextMs.toFixed(3)} ms, ${(next.length / 1024).toFixed(1)} KB`,
  );
}

function autocannon(url: string, seconds: number): Promise<{ rps: number; p50: number; p99: number; errors: number }> {
  const body = JSON.stringify({ model: 'sim', prompt: 'The capital of France is', max_tokens: 16 });
  const args = [
    'node_modules/autocannon/autocannon.js',
    '-j',
    '-c',
    '20',
    '-d',
    String(seconds),
    '-m',
    'POST',
    '-b',
    body,
    '-H',
    'content-type: application/json',
    url,
  ];
  return new Promise((resolve, reject) => {
    const p = spawn('node', args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.on('exit', () => {
      try {
        const j = JSON.parse(out) as {
          duration: number;
          '2xx': number;
          errors: number;
          latency: { p50: number; p99: number };
        };
        resolve({ rps: j['2xx'] / j.duration, p50: j.latency.p50, p99: j.latency.p99, errors: j.errors });
      } catch (err) {
        reject(err as Error);
      }
    });
  });
}

/** The proxy's thread's busy time for one full poll of the live page. */
async function pollCost(lp: Awaited<ReturnType<typeof startLogprobe>>): Promise<void> {
  // The proxy's thread's busy time per poll, with no traffic: pollers in a worker thread of their
  // own (so their HTTP client work does not count), event-loop utilisation of this thread.
  const idle0 = performance.eventLoopUtilization();
  await new Promise((r) => setTimeout(r, 4000));
  const idle = performance.eventLoopUtilization(idle0);
  const code = `const { workerData, parentPort } = require('node:worker_threads');
    let since = 0, t = 0, polls = 0, bytes = 0; const end = Date.now() + 4000;
    (async () => { while (Date.now() < end) { const r = await fetch(workerData + '/ui/data?since=0&t=0'); const x = await r.text(); bytes += x.length; polls++; }
      parentPort.postMessage({ polls, bytes }); })();`;
  const e0 = performance.eventLoopUtilization();
  const { polls, bytes } = await new Promise<{ polls: number; bytes: number }>((resolve) =>
    new Worker(code, { eval: true, workerData: lp.adminUrl }).once('message', resolve),
  );
  const busy = performance.eventLoopUtilization(e0);
  const perPoll = (busy.active - (idle.active * busy.idle) / Math.max(1, idle.idle)) / polls;
  console.log(
    `proxy's thread, per full poll (all ${LIVE_PAIRS} pairs, ${(bytes / polls / 1024).toFixed(0)} KB, back to back): ${perPoll.toFixed(2)} ms busy (${polls} polls in 4 s)`,
  );
}

async function clientPath(): Promise<void> {
  const baseline = await startSim();
  const candidate = await startSim({ noise: 0.001 });
  const lp = await startLogprobe(
    { candidate: { url: candidate.url }, baseline: { url: baseline.url }, mirror: { sampleRate: 0.1 } },
    { level: 'warn' },
  );
  const url = `${lp.proxyUrl}/v1/completions`;
  await autocannon(url, 3); // warm-up
  // 50 pairs of 64 tokens for the page to hold (a poll first: a page is open, strips are built).
  await (await request(`${lp.adminUrl}/ui/data`)).body.dump();
  for (let i = 0; i < 50; i++) {
    const res = await request(`${lp.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({
        ...CHAT,
        messages: [{ role: 'user', content: `Question ${i}: tell me about the printing press.` }],
      }),
      headers: { 'content-type': 'application/json', 'x-logprobe-mirror': '1' },
    });
    await res.body.dump();
  }
  await lp.runtime.mirror!.idle();

  await pollCost(lp);

  const runs: Array<[string, Awaited<ReturnType<typeof autocannon>>]> = [];
  for (const withPage of [false, true, false, true, false, true]) {
    let stop = false;
    let polls = 0;
    const pollers = withPage
      ? Array.from({ length: 4 }, async () => {
          let since = 0;
          let t = 0;
          while (!stop) {
            const res = await request(`${lp.adminUrl}/ui/data?since=${since}&t=${t}`);
            const j = (await res.body.json()) as { data: { seq: number; series: Array<{ t: number }> } | null };
            if (j.data) {
              since = j.data.seq;
              t = j.data.series.at(-1)?.t ?? t;
            }
            polls++;
            await new Promise((r) => setTimeout(r, 250));
          }
        })
      : [];
    const r = await autocannon(url, 8);
    stop = true;
    await Promise.all(pollers);
    runs.push([withPage ? `with 4 pollers every 250 ms (${polls} polls)` : 'no page', r]);
  }
  for (const [what, r] of runs)
    console.log(
      `client path, ${what}: ${r.rps.toFixed(0)} req/s, p50 ${r.p50} ms, p99 ${r.p99} ms, errors ${r.errors}`,
    );
  await lp.close();
  await Promise.all([baseline.close(), candidate.close()]);
}

await workerShare();
await clientPath();

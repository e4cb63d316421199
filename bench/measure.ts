import { autocannon, probe } from './load.js';
import { memoryMB } from './lib/proc.js';
import { mirrorCounters } from './lib/metrics.js';
import { median, percentile } from './lib/stats.js';
import { chatBody } from './upstreams.js';
import type { Running } from './proxies/types.js';

export interface Plan {
  rounds: number;
  /** Rounds for the SSE and latency figures (the quick run does fewer). */
  probeRounds: number;
  seconds: number;
  connections: number;
  /** Moderate request rate for the latency figure, per second. */
  rate: number;
  /** Rate of paced SSE requests for TTFB and inter-chunk delay, per second. */
  sseRate: number;
  probeSeconds: number;
  /** Throughput with SSE too (off in the engine scenario). */
  sse: boolean;
  latency: boolean;
  /** Warm SSE up too before the first round (the quick run skips it to stay under 2 minutes). */
  warmSse: boolean;
  /** Back-to-back latency probes of mirroring off and sampleRate 1.0, for the mirror's p99 figure. */
  abPairs: number;
}

/** The mirror's cost on the client p99: paired probes, off and 1.0 back to back, order alternating. */
export interface MirrorAB {
  /** p99 µs of each pair, [off, on]. */
  pairs: Array<[number, number]>;
  /** Median over the pairs of on ÷ off. */
  medianRatio: number;
  /** p99 µs over all the requests of all pairs, [off, on] (the figure: 100× more tail samples than one probe). */
  pooled: [number, number];
}

export interface TargetResult {
  key: string;
  label: string;
  tputJson: number[];
  tputSse: number[];
  errors: number;
  requests: number;
  latP50: number[];
  latP99: number[];
  ttfbP50: number[];
  ttfbP99: number[];
  gapP50: number[];
  gapP99: number[];
  rssMB?: number;
  peakMB?: number;
  mirror?: { pairsPerSec: number[]; dropped: number; queueDepthMax: number };
}

function empty(t: Running): TargetResult {
  return {
    key: t.key,
    label: t.label,
    tputJson: [],
    tputSse: [],
    errors: 0,
    requests: 0,
    latP50: [],
    latP99: [],
    ttfbP50: [],
    ttfbP99: [],
    gapP50: [],
    gapP99: [],
  };
}

/** Round r visits the targets starting at a different one each time (A B C, B C A, …). */
function rotated<T>(xs: readonly T[], r: number): T[] {
  const k = r % xs.length;
  return [...xs.slice(k), ...xs.slice(0, k)];
}

const URL_PATH = '/v1/chat/completions';

/**
 * Every figure for every running target, side by side: each round visits all targets in turn
 * (rotating the order), so slow drift of a shared, noisy machine hits all of them alike.
 */
/**
 * The client p99 at a moderate rate with mirroring off and at sampleRate 1.0, measured in pairs
 * back to back (the order alternating), so that the machine's drift, which moves every target's
 * p99 by tens of percent between rounds here, cancels within a pair.
 */
export async function mirrorAB(off: Running, on: Running, plan: Plan, log: (s: string) => void): Promise<MirrorAB> {
  const pairs: Array<[number, number]> = [];
  const pool: Record<string, number[]> = { [off.key]: [], [on.key]: [] };
  for (let i = 0; i < plan.abPairs; i++) {
    const p99: Record<string, number> = {};
    for (const t of i % 2 === 0 ? [off, on] : [on, off]) {
      const p = await probe({
        url: t.url + URL_PATH,
        rate: plan.rate,
        seconds: plan.probeSeconds,
        connections: 16,
        body: chatBody(false),
        headers: t.headers,
        samples: true,
      });
      p99[t.key] = p.latency[1];
      for (const x of p.samples ?? []) pool[t.key]!.push(x);
    }
    pairs.push([p99[off.key] as number, p99[on.key] as number]);
    log(
      `  pair ${i + 1} mirror a/b  p99 off ${p99[off.key]} µs, 1.0 ${p99[on.key]} µs (${((p99[on.key] as number) / (p99[off.key] as number)).toFixed(2)}×)`,
    );
  }
  return {
    pairs,
    medianRatio: median(pairs.map(([a, b]) => b / a)),
    pooled: [percentile(pool[off.key]!, 99), percentile(pool[on.key]!, 99)],
  };
}

/** One throughput round of JSON requests on a target, and what its mirror compared meanwhile. */
async function jsonRound(t: Running, tr: TargetResult, plan: Plan, r: number, log: (s: string) => void): Promise<void> {
  const before = t.adminUrl ? await mirrorCounters(t.adminUrl).catch(() => null) : null;
  const started = performance.now();
  const a = await autocannon({
    url: t.url + URL_PATH,
    connections: plan.connections,
    seconds: plan.seconds,
    body: chatBody(false),
    headers: t.headers,
  });
  const secs = (performance.now() - started) / 1000;
  tr.tputJson.push(a.rps);
  tr.errors += a.errors + a.non2xx;
  tr.requests += a.total;
  if (before && t.adminUrl) {
    const after = await mirrorCounters(t.adminUrl).catch(() => null);
    if (after && after.ok + after.dropped + after.other > before.ok + before.dropped + before.other) {
      tr.mirror ??= { pairsPerSec: [], dropped: 0, queueDepthMax: 0 };
      tr.mirror.pairsPerSec.push((after.ok - before.ok) / secs);
      tr.mirror.dropped += after.dropped - before.dropped;
      tr.mirror.queueDepthMax = Math.max(tr.mirror.queueDepthMax, after.queueDepth);
    }
  }
  log(
    `  round ${r + 1} json  ${t.key.padEnd(18)} ${a.rps.toFixed(0).padStart(7)} req/s${a.errors + a.non2xx ? `  errors ${a.errors + a.non2xx}` : ''}`,
  );
}

/** One throughput round of SSE requests on a target. */
async function sseRound(t: Running, tr: TargetResult, plan: Plan, r: number, log: (s: string) => void): Promise<void> {
  const a = await autocannon({
    url: t.url + URL_PATH,
    connections: plan.connections,
    seconds: plan.seconds,
    body: chatBody(true),
    headers: t.headers,
  });
  tr.tputSse.push(a.rps);
  tr.errors += a.errors + a.non2xx;
  tr.requests += a.total;
  log(
    `  round ${r + 1} sse   ${t.key.padEnd(18)} ${a.rps.toFixed(0).padStart(7)} req/s${a.errors + a.non2xx ? `  errors ${a.errors + a.non2xx}` : ''}`,
  );
}

/** One latency probe of a target at a moderate rate: JSON, then SSE (TTFB and inter-chunk gaps). */
async function probeRound(
  t: Running,
  tr: TargetResult,
  plan: Plan,
  r: number,
  log: (s: string) => void,
): Promise<void> {
  const p = await probe({
    url: t.url + URL_PATH,
    rate: plan.rate,
    seconds: plan.probeSeconds,
    connections: 16,
    body: chatBody(false),
    headers: t.headers,
  });
  tr.latP50.push(p.latency[0]);
  tr.latP99.push(p.latency[1]);
  tr.errors += p.errors + p.non2xx;
  tr.requests += p.sent;
  const s = await probe({
    url: t.url + URL_PATH,
    rate: plan.sseRate,
    seconds: plan.probeSeconds,
    connections: 16,
    body: chatBody(true, true),
    headers: t.headers,
  });
  tr.ttfbP50.push(s.ttfb[0]);
  tr.ttfbP99.push(s.ttfb[1]);
  tr.gapP50.push(s.gap[0]);
  tr.gapP99.push(s.gap[1]);
  tr.errors += s.errors + s.non2xx;
  tr.requests += s.sent;
  log(
    `  round ${r + 1} probe ${t.key.padEnd(18)} p50 ${p.latency[0]} µs p99 ${p.latency[1]} µs | sse ttfb p50 ${s.ttfb[0]} µs gap p50 ${s.gap[0]} µs p99 ${s.gap[1]} µs${p.errors + s.errors + p.non2xx + s.non2xx ? `  errors ${p.errors + s.errors + p.non2xx + s.non2xx}` : ''}`,
  );
}

export async function measure(
  targets: Running[],
  plan: Plan,
  log: (s: string) => void,
): Promise<Map<string, TargetResult>> {
  const res = new Map<string, TargetResult>(targets.map((t) => [t.key, empty(t)]));
  const get = (t: Running) => res.get(t.key) as TargetResult;

  // Warm-up: JIT, connection pools, nginx's upstream keep-alive.
  for (const t of targets) {
    await autocannon({
      url: t.url + URL_PATH,
      connections: plan.connections,
      seconds: 1,
      body: chatBody(false),
      headers: t.headers,
    });
    if (plan.sse && plan.warmSse)
      await autocannon({ url: t.url + URL_PATH, connections: 8, seconds: 1, body: chatBody(true), headers: t.headers });
  }

  for (let r = 0; r < plan.rounds; r++) {
    for (const t of rotated(targets, r)) {
      await jsonRound(t, get(t), plan, r, log);
    }
    if (plan.sse && r < plan.probeRounds) {
      for (const t of rotated(targets, r)) {
        await sseRound(t, get(t), plan, r, log);
      }
    }
    if (plan.latency && r < plan.probeRounds) {
      for (const t of rotated(targets, r)) {
        await probeRound(t, get(t), plan, r, log);
      }
    }
  }
  for (const t of targets) {
    const m = await memoryMB(await t.pids());
    if (m) {
      get(t).rssMB = m.rss;
      get(t).peakMB = m.peak;
    }
  }
  return res;
}

/**
 * The latency probe, a load generator of its own process: sends requests at a fixed rate over a
 * fixed set of keep-alive connections and measures, in microseconds, each request's latency from
 * its scheduled send time (so queueing counts: no coordinated omission), its time to first body
 * byte, and the gaps between body chunks (SSE). Prints one JSON line with percentiles.
 *
 *   node --import tsx bench/probe.ts '{"url":…,"rate":500,"seconds":3,"connections":16,"body":"…","headers":{…}}'
 */
import http from 'node:http';
import { percentile } from './lib/stats.js';

export interface ProbeSpec {
  url: string;
  rate: number;
  seconds: number;
  connections: number;
  body: string;
  headers?: Record<string, string>;
  /** Return every request's latency too (µs), for pooling several probes. */
  samples?: boolean;
}

export interface ProbeResult {
  sent: number;
  ok: number;
  errors: number;
  non2xx: number;
  /** [p50, p99] in µs. */
  latency: [number, number];
  ttfb: [number, number];
  gap: [number, number];
  gaps: number;
  samples?: number[];
}

function run(spec: ProbeSpec): Promise<ProbeResult> {
  const u = new URL(spec.url);
  const agent = new http.Agent({ keepAlive: true, maxSockets: spec.connections });
  const body = Buffer.from(spec.body);
  const headers = {
    'content-type': 'application/json',
    'content-length': String(body.length),
    ...(spec.headers ?? {}),
  };
  const lat: number[] = [];
  const ttfb: number[] = [];
  const gap: number[] = [];
  let sent = 0;
  let ok = 0;
  let errors = 0;
  let non2xx = 0;
  let pending = 0;
  const total = Math.round(spec.rate * spec.seconds);
  const t0 = performance.now();
  return new Promise((resolve) => {
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      agent.destroy();
      const us = (xs: number[], p: number) => Math.round(percentile(xs, p) * 1000);
      resolve({
        sent,
        ok,
        errors,
        non2xx,
        latency: [us(lat, 50), us(lat, 99)],
        ttfb: [us(ttfb, 50), us(ttfb, 99)],
        gap: [us(gap, 50), us(gap, 99)],
        gaps: gap.length,
        ...(spec.samples ? { samples: lat.map((x) => Math.round(x * 1000)) } : {}),
      });
    };
    const one = (scheduled: number) => {
      sent++;
      pending++;
      let first = -1;
      let last = -1;
      const done = (failed: boolean) => {
        pending--;
        if (failed) errors++;
        if (sent >= total && pending === 0) finish();
      };
      const req = http.request(
        { host: u.hostname, port: u.port, path: u.pathname + u.search, method: 'POST', headers, agent },
        (res) => {
          if ((res.statusCode ?? 0) >= 300) non2xx++;
          res.on('data', () => {
            const now = performance.now();
            if (first < 0) {
              first = now;
              ttfb.push(now - scheduled);
            } else gap.push(now - last);
            last = now;
          });
          res.on('end', () => {
            lat.push(performance.now() - scheduled);
            if ((res.statusCode ?? 0) < 300) ok++;
            done(false);
          });
          res.on('error', () => done(true));
        },
      );
      req.on('error', () => done(true));
      req.end(body);
    };
    const tick = () => {
      const now = performance.now();
      const due = Math.min(total, Math.floor(((now - t0) / 1000) * spec.rate) + 1);
      while (sent < due) one(t0 + (sent / spec.rate) * 1000);
      if (sent < total) setTimeout(tick, 1);
    };
    tick();
    // Bounded: whatever has not answered 10 s after the last send counts as an error.
    setTimeout(
      () => {
        errors += pending;
        pending = 0;
        finish();
      },
      spec.seconds * 1000 + 10_000,
    ).unref();
  });
}

if (process.argv[1]?.endsWith('probe.ts') && process.argv[2]) {
  const spec = JSON.parse(process.argv[2]) as ProbeSpec;
  void run(spec).then((r) => {
    process.stdout.write(`${JSON.stringify(r)}\n`);
    process.exit(0);
  });
}

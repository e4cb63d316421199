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
  return new ProbeRun(spec).start();
}

/** One probe: requests sent on schedule, each one's latency, TTFB and chunk gaps taken. */
class ProbeRun {
  private readonly u: URL;
  private readonly agent: http.Agent;
  private readonly body: Buffer;
  private readonly headers: Record<string, string>;
  private readonly lat: number[] = [];
  private readonly ttfb: number[] = [];
  private readonly gap: number[] = [];
  private sent = 0;
  private ok = 0;
  private errors = 0;
  private non2xx = 0;
  private pending = 0;
  private readonly total: number;
  private t0 = 0;
  private finished = false;
  private resolve: (r: ProbeResult) => void = () => undefined;

  constructor(private readonly spec: ProbeSpec) {
    this.u = new URL(spec.url);
    this.agent = new http.Agent({ keepAlive: true, maxSockets: spec.connections });
    this.body = Buffer.from(spec.body);
    this.headers = {
      'content-type': 'application/json',
      'content-length': String(this.body.length),
      ...(spec.headers ?? {}),
    };
    this.total = Math.round(spec.rate * spec.seconds);
  }

  start(): Promise<ProbeResult> {
    this.t0 = performance.now();
    return new Promise((resolve) => {
      this.resolve = resolve;
      this.tick();
      // Bounded: whatever has not answered 10 s after the last send counts as an error.
      setTimeout(
        () => {
          this.errors += this.pending;
          this.pending = 0;
          this.finish();
        },
        this.spec.seconds * 1000 + 10_000,
      ).unref();
    });
  }

  private tick(): void {
    const { spec, t0, total } = this;
    const now = performance.now();
    const due = Math.min(total, Math.floor(((now - t0) / 1000) * spec.rate) + 1);
    while (this.sent < due) this.one(t0 + (this.sent / spec.rate) * 1000);
    if (this.sent < total) setTimeout(() => this.tick(), 1);
  }

  private one(scheduled: number): void {
    const { u, headers, agent } = this;
    this.sent++;
    this.pending++;
    let first = -1;
    let last = -1;
    const done = (failed: boolean) => {
      this.pending--;
      if (failed) this.errors++;
      if (this.sent >= this.total && this.pending === 0) this.finish();
    };
    const req = http.request(
      { host: u.hostname, port: u.port, path: u.pathname + u.search, method: 'POST', headers, agent },
      (res) => {
        if ((res.statusCode ?? 0) >= 300) this.non2xx++;
        res.on('data', () => {
          const now = performance.now();
          if (first < 0) {
            first = now;
            this.ttfb.push(now - scheduled);
          } else this.gap.push(now - last);
          last = now;
        });
        res.on('end', () => {
          this.lat.push(performance.now() - scheduled);
          if ((res.statusCode ?? 0) < 300) this.ok++;
          done(false);
        });
        res.on('error', () => done(true));
      },
    );
    req.on('error', () => done(true));
    req.end(this.body);
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    this.agent.destroy();
    const { lat, ttfb, gap } = this;
    const us = (xs: number[], p: number) => Math.round(percentile(xs, p) * 1000);
    this.resolve({
      sent: this.sent,
      ok: this.ok,
      errors: this.errors,
      non2xx: this.non2xx,
      latency: [us(lat, 50), us(lat, 99)],
      ttfb: [us(ttfb, 50), us(ttfb, 99)],
      gap: [us(gap, 50), us(gap, 99)],
      gaps: gap.length,
      ...(this.spec.samples ? { samples: lat.map((x) => Math.round(x * 1000)) } : {}),
    });
  }
}

if (process.argv[1]?.endsWith('probe.ts') && process.argv[2]) {
  const spec = JSON.parse(process.argv[2]) as ProbeSpec;
  void run(spec).then((r) => {
    process.stdout.write(`${JSON.stringify(r)}\n`);
    process.exit(0);
  });
}

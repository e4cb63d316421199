import { fileURLToPath } from 'node:url';
import { runToEnd } from './lib/proc.js';
import type { ProbeResult, ProbeSpec } from './probe.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const AUTOCANNON = 'node_modules/autocannon/autocannon.js';
const PROBE = 'bench/probe.ts';

export interface Throughput {
  rps: number;
  total: number;
  errors: number;
  non2xx: number;
}

/** Closed-loop throughput: autocannon, in its own process, `connections` busy connections for `seconds`. */
export async function autocannon(opts: {
  url: string;
  connections: number;
  seconds: number;
  body: string;
  headers?: Record<string, string>;
}): Promise<Throughput> {
  const args = [
    AUTOCANNON,
    '-j',
    '-c',
    String(opts.connections),
    '-d',
    String(opts.seconds),
    '-m',
    'POST',
    '-b',
    opts.body,
    '-H',
    'content-type: application/json',
  ];
  for (const [k, v] of Object.entries(opts.headers ?? {})) args.push('-H', `${k}: ${v}`);
  args.push(opts.url);
  const r = await runToEnd('node', args, { cwd: ROOT, timeoutMs: (opts.seconds + 30) * 1000 });
  try {
    const j = JSON.parse(r.stdout) as {
      duration: number;
      requests: { total: number };
      errors: number;
      timeouts: number;
      non2xx: number;
      '2xx': number;
    };
    // Only successful answers count: a proxy that fails fast must not look fast.
    return { rps: j['2xx'] / j.duration, total: j.requests.total, errors: j.errors + j.timeouts, non2xx: j.non2xx };
  } catch {
    throw new Error(`autocannon failed (${r.code}): ${r.stderr.slice(-300)}`);
  }
}

/** Open-loop latency at a fixed rate: bench/probe.ts in its own process. */
export async function probe(spec: ProbeSpec): Promise<ProbeResult> {
  const r = await runToEnd('node', ['--import', 'tsx', PROBE, JSON.stringify(spec)], {
    cwd: ROOT,
    timeoutMs: (spec.seconds + 30) * 1000,
  });
  try {
    return JSON.parse(r.stdout.trim().split('\n').pop() ?? '') as ProbeResult;
  } catch {
    throw new Error(`probe failed (${r.code}): ${r.stderr.slice(-300)}`);
  }
}

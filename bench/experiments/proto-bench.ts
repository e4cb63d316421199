/**
 * EXPERIMENT (not used by src/ or npm run bench): side by side JSON/SSE throughput of nginx,
 * logprobe (mirroring off, from dist/) and the raw forwarder prototype in front of the
 * fixed-response upstream. `--no-logprobe` leaves logprobe out.
 *   node --import tsx bench/experiments/proto-bench.ts [rounds] [seconds]
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { killAll, start } from '../lib/proc.js';
import { freePort } from '../lib/net.js';
import { measure } from '../measure.js';
import { startNginx } from '../proxies/nginx.js';
import { startLogprobe } from '../proxies/logprobe.js';
import { isRunning, type Running } from '../proxies/types.js';
import { captureResponses, startFixed, startSim } from '../upstreams.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const OUT = join(ROOT, 'bench', 'out', 'proto');
const rounds = Number(process.argv[2] ?? 3);
const seconds = Number(process.argv[3] ?? 3);
const skipLogprobe = process.argv.includes('--no-logprobe');

async function main(): Promise<void> {
  mkdirSync(OUT, { recursive: true });
  const sim = await startSim('sim', 1);
  const canned = await captureResponses(sim.url, OUT);
  await sim.proc.stop();
  const up = await startFixed('upstream', canned);
  const targets: Running[] = [];
  const n = await startNginx({ upstream: up.url, outDir: OUT, workers: 1 });
  if (isRunning(n)) targets.push(n);
  if (!skipLogprobe) targets.push(await startLogprobe({ key: 'logprobe-off', label: 'logprobe', candidate: up.url, baseline: up.url, sampleRate: 0, logLevel: 'warn', outDir: OUT }));
  const port = await freePort();
  const { proc } = await start({ name: 'raw', cmd: 'node', args: ['--import', 'tsx', 'bench/experiments/raw-proto.ts', '--upstream', up.url, '--port', String(port)], cwd: ROOT, port });
  targets.push({ key: 'raw-proto', label: 'raw proto', url: `http://127.0.0.1:${port}`, headers: {}, pids: async () => [proc.pid], stop: () => proc.stop() });
  const res = await measure(targets, { rounds, probeRounds: rounds, seconds, connections: 32, rate: 0, sseRate: 0, probeSeconds: 0, sse: true, latency: false, warmSse: true }, (s) => process.stdout.write(s + '\n'));
  const med = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] ?? 0; };
  const ng = res.get('nginx');
  for (const r of res.values()) {
    process.stdout.write(`${r.key.padEnd(14)} json ${med(r.tputJson).toFixed(0)} (${ng ? (med(r.tputJson) / med(ng.tputJson)).toFixed(2) : '-'}x)  sse ${med(r.tputSse).toFixed(0)} (${ng ? (med(r.tputSse) / med(ng.tputSse)).toFixed(2) : '-'}x) errors ${r.errors}/${r.requests}\n`);
  }
}
main().then(() => { killAll(); process.exit(0); }, (e: unknown) => { console.error(e); killAll(); process.exit(1); });

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { childPids, start } from '../lib/proc.js';
import { freePort } from '../lib/net.js';
import { withNofile } from '../lib/procstat.js';
import type { Running } from './types.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface LogprobeTarget {
  key: string;
  label: string;
  candidate: string;
  baseline: string;
  sampleRate: number;
  logLevel: 'warn' | 'info';
  outDir: string;
  /** Write a CPU profile (node --cpu-prof) into outDir/prof. */
  profile?: boolean;
  /** The checkout whose bin/logprobe.js (and dist/) runs; default this one. */
  root?: string;
  /** Start it with this file-descriptor limit (`ulimit -n`). */
  nofile?: number;
  /** `listen.workers` (default: the key absent, one process). */
  workers?: number;
  /** Captures on, into this directory (default: capture off). */
  capture?: { dir: string; maxFileMB: number };
  /** NODE_OPTIONS of the logprobe process (default: this process's, usually none). */
  nodeOptions?: string;
  /** `mode` (default inline): `shadow` answers each copy 202 at once and only mirrors it (docs/operations.md). */
  mode?: 'inline' | 'shadow';
}

/** `logprobe serve` in its own process (and its proxy workers, with `workers`) with a generated config (capture off unless `capture`). */
export async function startLogprobe(t: LogprobeTarget): Promise<Running> {
  const port = await freePort();
  const adminPort = await freePort();
  const file = join(t.outDir, `${t.key}.yaml`);
  writeFileSync(
    file,
    [
      `listen: { host: 127.0.0.1, port: ${port}${t.workers !== undefined ? `, workers: ${t.workers}` : ''} }`,
      `admin: { host: 127.0.0.1, port: ${adminPort} }`,
      `candidate: { url: "${t.candidate}" }`,
      `baseline: { url: "${t.baseline}" }`,
      `log: { level: ${t.logLevel} }`,
      ...(t.mode ? [`mode: ${t.mode}`] : []),
      `mirror: { sampleRate: ${t.sampleRate} }`,
      t.capture
        ? `capture: { enabled: true, dir: ${JSON.stringify(t.capture.dir)}, maxFileMB: ${t.capture.maxFileMB} }`
        : 'capture: { enabled: false }',
      '',
    ].join('\n'),
  );
  // Node flags to try on logprobe alone (bench/run.ts: LOGPROBE_BENCH_NODE_ARGS).
  const extra = (process.env.LOGPROBE_BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const nodeArgs = [...extra, ...(t.profile ? ['--cpu-prof', `--cpu-prof-dir=${join(t.outDir, 'prof', t.key)}`] : [])];
  const args = [...nodeArgs, 'bin/logprobe.js', 'serve', '--config', file];
  const { proc } = await start({
    name: t.key,
    ...(t.nofile ? withNofile('node', args, t.nofile) : { cmd: 'node', args }),
    cwd: t.root ?? ROOT,
    port,
    ...(t.nodeOptions !== undefined ? { env: { ...process.env, NODE_OPTIONS: t.nodeOptions } } : {}),
    // The request log goes to a file, as it would in production (not into the bench's pipe).
    logFile: join(t.outDir, `${t.key}.log`),
  });
  return {
    key: t.key,
    label: t.label,
    url: `http://127.0.0.1:${port}`,
    headers: {},
    adminUrl: `http://127.0.0.1:${adminPort}`,
    // With listen.workers > 1: the primary and its proxy worker processes.
    pids: async () => [proc.pid, ...(await childPids(proc.pid))],
    stop: () => proc.stop(),
  };
}

import { fileURLToPath } from 'node:url';
import { runToEnd } from './lib/proc.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface CoreFigure {
  k: number;
  tokens: number;
  /** Million aligned tokens per second. */
  mtps: number;
  line: string;
}

/** Runs `npm run bench:compare` (bench/compare.ts, the comparison core's own bench) and reads its rows. */
export async function coreBench(ms: number): Promise<{ header: string; rows: CoreFigure[]; error?: string }> {
  const r = await runToEnd('node', ['--import', 'tsx', 'bench/compare.ts'], {
    cwd: ROOT,
    env: { ...process.env, BENCH_MS: String(ms) },
    timeoutMs: 120_000,
  });
  const lines = r.stdout.split('\n').filter((l) => l.trim() !== '');
  const rows: CoreFigure[] = [];
  for (const line of lines) {
    const m = /top-(\d+)\s+(\d+) tok\s+([\d.]+) M aligned tok\/s/.exec(line);
    if (m) rows.push({ k: Number(m[1]), tokens: Number(m[2]), mtps: Number(m[3]), line: line.trim() });
  }
  if (rows.length === 0)
    return { header: '', rows, error: `bench:compare printed no figures (exit ${r.code}): ${r.stderr.slice(-300)}` };
  return { header: lines[0] ?? '', rows };
}

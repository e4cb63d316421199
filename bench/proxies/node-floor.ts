import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { start } from '../lib/proc.js';
import { withNofile } from '../lib/procstat.js';
import type { Running } from './types.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** bench/node-floor.ts in its own process: node:http + an undici Pool and nothing else (the transport's floor). */
export async function startNodeFloor(o: { upstream: string; outDir: string; nofile?: number }): Promise<Running> {
  const args = ['--import', 'tsx', 'bench/node-floor.ts', '--upstream', o.upstream];
  const { proc, match } = await start({
    name: 'node-floor',
    ...(o.nofile ? withNofile('node', args, o.nofile) : { cmd: 'node', args }),
    cwd: ROOT,
    ready: /listening on (http:\/\/\S+)/,
    logFile: join(o.outDir, 'node-floor.log'),
  });
  return {
    key: 'node-floor',
    label: 'node:http + undici alone (the floor)',
    url: match[1] as string,
    headers: {},
    pids: async () => [proc.pid],
    stop: () => proc.stop(),
  };
}

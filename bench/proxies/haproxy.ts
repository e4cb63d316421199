import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { start } from '../lib/proc.js';
import { freePort } from '../lib/net.js';
import type { Running, Unavailable } from './types.js';

/** `haproxy -v`'s first line, or null when haproxy is not installed. */
export function haproxyVersion(): string | null {
  const r = spawnSync('haproxy', ['-v'], { encoding: 'utf8' });
  if (r.error) return null;
  return (
    (r.stdout.split('\n')[0] ?? '')
      .replace(/^HAProxy version\s*/, '')
      .trim()
      .split(' ')[0] ?? ''
  );
}

/** haproxy in HTTP mode, one thread, keep-alive both sides with connection reuse to the upstream. */
export async function startHaproxy(o: { upstream: string; outDir: string }): Promise<Running | Unavailable> {
  const key = 'haproxy';
  const label = 'haproxy (1 thread)';
  if (haproxyVersion() === null) return { key, label, reason: 'not installed: apt-get install haproxy' };
  const port = await freePort();
  const up = new URL(o.upstream);
  const cfg = join(o.outDir, 'haproxy.cfg');
  writeFileSync(
    cfg,
    `global
  maxconn 4096
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  timeout http-keep-alive 65s
  option http-keep-alive
  # Streamed responses (SSE) leave as they arrive, like nginx's proxy_buffering off.
  option http-no-delay
frontend fe
  bind 127.0.0.1:${port}
  default_backend candidate
backend candidate
  http-reuse always
  server s1 ${up.host}
`,
  );
  const { proc } = await start({ name: key, cmd: 'haproxy', args: ['-f', cfg, '-db'], port });
  return {
    key,
    label,
    url: `http://127.0.0.1:${port}`,
    headers: {},
    pids: async () => [proc.pid],
    stop: () => proc.stop(),
  };
}

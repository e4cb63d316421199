import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { childPids, start } from '../lib/proc.js';
import { freePort } from '../lib/net.js';
import { withNofile } from '../lib/procstat.js';
import type { Running, Unavailable } from './types.js';

/** `nginx -v` (it prints to stderr), or null when nginx is not installed. */
export function nginxVersion(): string | null {
  const r = spawnSync('nginx', ['-v'], { encoding: 'utf8' });
  if (r.error) return null;
  return (r.stderr || r.stdout).trim().replace(/^nginx version:\s*/, '');
}

/** Options of {@link startNginx}. */
interface NginxOptions {
  upstream: string;
  outDir: string;
  workers: number | 'auto';
  key?: string;
  label?: string;
  workerConnections?: number;
  nofile?: number;
  /**
   * A logprobe in shadow mode to `mirror` every request to (docs/operations.md, "Shadow mode":
   * the same `mirror` block, with its short timeouts on the mirror location).
   */
  mirrorTo?: string;
}

/** The nginx.conf: one server on `port` proxying to the upstream, and the shadow-mode mirror when asked. */
function nginxConf(o: NginxOptions, up: URL, dir: string, port: number): string {
  return `worker_processes ${o.workers};
${o.nofile ? `worker_rlimit_nofile ${o.nofile};\n` : ''}daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections ${o.workerConnections ?? 4096}; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream candidate { server ${up.host}; keepalive 256; }
${o.mirrorTo ? `  upstream logprobe { server ${new URL(o.mirrorTo).host}; keepalive 256; }\n` : ''}  server {
    listen 127.0.0.1:${port};
    keepalive_requests 1000000;
    location / {
${o.mirrorTo ? '      mirror /_logprobe_mirror;\n      mirror_request_body on;\n' : ''}      proxy_pass http://candidate;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 120s;
    }
${
  o.mirrorTo
    ? `    location = /_logprobe_mirror {
      internal;
      proxy_pass http://logprobe$request_uri;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_connect_timeout 1s;
      proxy_read_timeout 5s;
    }
`
    : ''
}  }
}
`;
}

/**
 * nginx as a plain reverse proxy: one worker (like one logprobe process), keep-alive to the
 * upstream, no response or request buffering, no access log. `workerConnections` (default
 * 4096) and `nofile` (worker_rlimit_nofile, and the master's own limit through `ulimit -n`) are
 * raised for the streaming lane's 5,000 client + 5,000 upstream connections.
 */
export async function startNginx(o: NginxOptions): Promise<Running | Unavailable> {
  const key = o.key ?? 'nginx';
  const label = o.label ?? `nginx (${o.workers} worker${o.workers === 1 ? '' : 's'})`;
  if (nginxVersion() === null) return { key, label, reason: 'not installed: apt-get install nginx' };
  const port = await freePort();
  const dir = join(o.outDir, key);
  mkdirSync(dir, { recursive: true });
  const up = new URL(o.upstream);
  const conf = join(dir, 'nginx.conf');
  writeFileSync(conf, nginxConf(o, up, dir, port));
  const args = ['-c', conf, '-p', dir, '-e', `${dir}/error.log`];
  const { proc } = await start({
    name: key,
    ...(o.nofile ? withNofile('nginx', args, o.nofile) : { cmd: 'nginx', args }),
    port,
  });
  return {
    key,
    label,
    url: `http://127.0.0.1:${port}`,
    headers: {},
    pids: async () => [proc.pid, ...(await childPids(proc.pid))],
    stop: () => proc.stop(),
  };
}

import os from 'node:os';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { nginxVersion } from '../proxies/nginx.js';
import { haproxyVersion } from '../proxies/haproxy.js';
import { portkeyVersion } from '../proxies/portkey.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Machine {
  date: string;
  nproc: number;
  cpu: string;
  memoryGB: number;
  kernel: string;
  load: string;
  versions: Record<string, string>;
}

function pkgVersion(path: string): string {
  try {
    return (JSON.parse(readFileSync(path, 'utf8')) as { version: string }).version;
  } catch {
    return 'not installed';
  }
}

/** What the figures were measured on: machine, versions, date. */
export function machine(): Machine {
  let cpu = os.cpus()[0]?.model ?? 'unknown';
  try {
    cpu = /model name\s*:\s*(.+)/.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1]?.trim() ?? cpu;
  } catch {
    /* not Linux */
  }
  return {
    date: new Date().toISOString(),
    nproc: os.availableParallelism(),
    cpu,
    memoryGB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    kernel: `${os.type()} ${os.release()}`,
    load: os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' '),
    versions: {
      node: process.version,
      logprobe: pkgVersion(`${ROOT}/package.json`),
      autocannon: pkgVersion(`${ROOT}/node_modules/autocannon/package.json`),
      undici: pkgVersion(`${ROOT}/node_modules/undici/package.json`),
      nginx: nginxVersion() ?? 'not installed',
      haproxy: haproxyVersion() ?? 'not installed',
      '@portkey-ai/gateway': portkeyVersion() ?? 'not installed',
    },
  };
}

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runToEnd, start } from '../lib/proc.js';
import { freePort } from '../lib/net.js';
import type { Running, Unavailable } from './types.js';

const DEPS = fileURLToPath(new URL('../.deps', import.meta.url));
const PKG = join(DEPS, 'node_modules', '@portkey-ai', 'gateway');
const ENTRY = join(PKG, 'build', 'start-server.js');

/** The installed @portkey-ai/gateway version, or null. */
export function portkeyVersion(): string | null {
  try {
    return (JSON.parse(readFileSync(join(PKG, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return null;
  }
}

/** Installs @portkey-ai/gateway into bench/.deps (git-ignored) unless it is there; null or the reason it failed. */
export async function ensurePortkey(): Promise<string | null> {
  if (existsSync(ENTRY)) return null;
  const r = await runToEnd(
    'npm',
    ['install', '--no-save', '--no-audit', '--no-fund', '--prefix', DEPS, '@portkey-ai/gateway'],
    { timeoutMs: 240_000 },
  );
  if (r.code !== 0 || !existsSync(ENTRY))
    return `npm install @portkey-ai/gateway failed: ${(r.stderr || r.stdout).trim().split('\n').slice(-2).join(' ')}`;
  return null;
}

/**
 * The Portkey AI gateway (node build) pointed at the upstream as a custom OpenAI host: every
 * request carries `x-portkey-provider: openai` and `x-portkey-custom-host: UPSTREAM/v1`.
 * It has no listen-address option and binds every interface; the bench only talks to 127.0.0.1.
 */
export async function startPortkey(o: { upstream: string; skip?: string }): Promise<Running | Unavailable> {
  const key = 'portkey';
  const label = '@portkey-ai/gateway';
  if (o.skip) return { key, label, reason: o.skip };
  const failed = await ensurePortkey();
  if (failed) return { key, label, reason: `not available: ${failed}` };
  const port = await freePort();
  try {
    const { proc } = await start({
      name: key,
      cmd: 'node',
      args: [ENTRY, `--port=${port}`, '--headless'],
      cwd: PKG,
      env: { ...process.env, NODE_ENV: 'production' },
      port,
      timeoutMs: 30_000,
    });
    return {
      key,
      label: `${label} ${portkeyVersion() ?? ''}`.trim(),
      url: `http://127.0.0.1:${port}`,
      headers: {
        'x-portkey-provider': 'openai',
        'x-portkey-custom-host': `${o.upstream}/v1`,
        authorization: 'Bearer sk-bench',
      },
      pids: async () => [proc.pid],
      stop: () => proc.stop(),
    };
  } catch (err) {
    return { key, label, reason: `not available: ${(err as Error).message.split('\n')[0]}` };
  }
}

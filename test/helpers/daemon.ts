// A server binary from Debian (prometheus, prometheus-alertmanager) for integration tests: started
// on a free loopback port in a temporary directory with its files, ready when `/-/ready` answers
// 200, stopped and removed by the caller's `close()`.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';

/** A loopback port that was free a moment ago (these servers cannot listen on port 0 and report it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr !== null ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export interface RunningDaemon {
  /** `http://127.0.0.1:PORT`. */
  url: string;
  child: ChildProcess;
  /** Its stdout and stderr so far (logs), for failure messages. */
  output(): string;
  /** SIGTERM, SIGKILL after 5 s, then removes the temporary directory. Idempotent. */
  close(): Promise<void>;
}

export interface DaemonSetup {
  /** The binary, on PATH. */
  name: string;
  /** Files written into the temporary directory before the start, by name. */
  files: Record<string, string>;
  /** The command line, given the directory and the port. */
  args(dir: string, port: number): string[];
  timeoutMs?: number;
}

class PortTakenError extends Error {}

/** Starts the daemon; retries with another port when the chosen one was taken in between. */
export async function startDaemon(setup: DaemonSetup): Promise<RunningDaemon> {
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return await startOnce(setup, setup.timeoutMs ?? 30_000);
    } catch (err) {
      lastError = err;
      if (!(err instanceof PortTakenError)) throw err;
    }
  }
  throw lastError;
}

async function startOnce(setup: DaemonSetup, timeoutMs: number): Promise<RunningDaemon> {
  const dir = mkdtempSync(join(tmpdir(), `logprobe-${setup.name}-`));
  for (const [name, text] of Object.entries(setup.files)) writeFileSync(join(dir, name), text);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = spawn(setup.name, setup.args(dir, port), { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (out += c.toString()));
  let exitCode: number | null | undefined;
  const exited = new Promise<void>((resolve) => {
    child.once('close', (code) => {
      exitCode = code;
      resolve();
    });
    child.once('error', (err) => {
      out += `\n${String(err)}`;
      exitCode = -1;
      resolve();
    });
  });
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      if (exitCode === undefined) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dir, { recursive: true, force: true });
    })());

  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (exitCode !== undefined) {
      await close();
      if (/address already in use/i.test(out)) throw new PortTakenError(`port ${port} taken:\n${out}`);
      throw new Error(`${setup.name} exited with ${exitCode} before it was ready:\n${out}`);
    }
    try {
      const res = await request(`${url}/-/ready`, { headersTimeout: 2000, bodyTimeout: 2000 });
      await res.body.text();
      if (res.statusCode === 200) return { url, child, output: () => out, close };
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  await close();
  throw new Error(`${setup.name} not ready in ${timeoutMs} ms:\n${out}`);
}

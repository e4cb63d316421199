import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { waitForPort } from './net.js';

/** A process the bench started; every one is killed at the end, also on error or Ctrl-C. */
export interface Proc {
  name: string;
  child: ChildProcess;
  pid: number;
  /** SIGTERM to its process group, SIGKILL after 3 s. */
  stop(): Promise<void>;
}

const live = new Set<Proc>();

function killNow(p: Proc): void {
  try {
    // Each child leads its own process group (detached), so its own children go too.
    process.kill(-p.pid, 'SIGKILL');
  } catch {
    try {
      p.child.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
}

/** Kills every process still running (synchronous: safe in 'exit' handlers). */
export function killAll(): void {
  for (const p of live) killNow(p);
  live.clear();
}

let hooked = false;
function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', killAll);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      process.stderr.write(`\nbench: ${sig}, stopping every process it started\n`);
      killAll();
      process.exit(130);
    });
  }
}

export interface StartOptions {
  name: string;
  cmd: string;
  args: string[];
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** A line of stdout/stderr that says it is ready; the match is returned. */
  ready?: RegExp;
  /** Or: ready once this loopback port accepts connections. */
  port?: number;
  timeoutMs?: number;
  /** Where its output goes (besides the ready check); default: discarded. */
  logFile?: string;
}

/** Resolves with the `ready` match (or the port) once the process says it is ready; rejects when it exits first, fails or stays silent past the timeout. */
function waitReady(opts: StartOptions, child: ChildProcess, log: WriteStream | null): Promise<RegExpMatchArray> {
  return new Promise<RegExpMatchArray>((resolve, reject) => {
    let seen = '';
    let done = false;
    const finish = (err: Error | null, m?: RegExpMatchArray) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (err) reject(err);
      else resolve(m as RegExpMatchArray);
    };
    const onData = (chunk: Buffer) => {
      log?.write(chunk);
      if (done) return;
      seen = (seen + chunk.toString('utf8')).slice(-8192);
      const m = opts.ready ? seen.match(opts.ready) : null;
      if (m) finish(null, m);
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) =>
      finish(new Error(`${opts.name} exited (${code}) before it was ready: ${seen.slice(-400)}`)),
    );
    child.once('error', (err) => finish(err));
    const timer = setTimeout(
      () => finish(new Error(`${opts.name} not ready after ${opts.timeoutMs ?? 20000} ms: ${seen.slice(-400)}`)),
      opts.timeoutMs ?? 20000,
    );
    if (opts.port !== undefined) {
      waitForPort(opts.port, opts.timeoutMs ?? 20000).then(
        () => finish(null, [String(opts.port)] as RegExpMatchArray),
        (err: Error) => finish(err),
      );
    }
  });
}

/** Starts a process in its own group and waits until it prints `ready`. */
export async function start(opts: StartOptions): Promise<{ proc: Proc; match: RegExpMatchArray }> {
  hookExit();
  const child = spawn(opts.cmd, opts.args, {
    cwd: opts.cwd,
    env: opts.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error(`${opts.name}: could not start ${opts.cmd}`);
  const log = opts.logFile ? createWriteStream(opts.logFile) : null;
  let exited = false;
  const proc: Proc = {
    name: opts.name,
    child,
    pid,
    stop: () =>
      new Promise<void>((resolve) => {
        live.delete(proc);
        if (exited) return resolve();
        const t = setTimeout(() => killNow(proc), 3000);
        child.once('exit', () => {
          clearTimeout(t);
          resolve();
        });
        try {
          process.kill(-pid, 'SIGTERM');
        } catch {
          clearTimeout(t);
          resolve();
        }
      }),
  };
  live.add(proc);
  child.once('exit', () => {
    exited = true;
    live.delete(proc);
    log?.end();
  });
  const match = await waitReady(opts, child, log).catch(async (err: unknown) => {
    await proc.stop();
    throw err;
  });
  return { proc, match };
}

/** Runs a command to completion and returns its output (bounded by a timeout). */
export function runToEnd(
  cmd: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs: number },
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  hookExit();
  return new Promise((resolve) => {
    const child = spawn(cmd, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const proc: Proc = { name: cmd, child, pid: child.pid ?? -1, stop: async () => undefined };
    if (child.pid !== undefined) live.add(proc);
    child.stdout?.on('data', (c: Buffer) => out.push(c));
    child.stderr?.on('data', (c: Buffer) => err.push(c));
    const timer = setTimeout(() => killNow(proc), opts.timeoutMs);
    const done = (code: number | null) => {
      clearTimeout(timer);
      live.delete(proc);
      resolve({ code, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
    };
    child.once('error', () => done(null));
    child.once('close', (code) => done(code));
  });
}

/** Resident memory of a process and its peak, in MB (Linux /proc). */
export async function memoryMB(pids: number[]): Promise<{ rss: number; peak: number } | null> {
  const { readFile } = await import('node:fs/promises');
  let rss = 0;
  let peak = 0;
  for (const pid of pids) {
    try {
      const s = await readFile(`/proc/${pid}/status`, 'utf8');
      rss += Number(/VmRSS:\s+(\d+)/.exec(s)?.[1] ?? 0) / 1024;
      peak += Number(/VmHWM:\s+(\d+)/.exec(s)?.[1] ?? 0) / 1024;
    } catch {
      return null;
    }
  }
  return { rss, peak };
}

/** The pids of a process's children (nginx/haproxy workers), from /proc. */
export async function childPids(pid: number): Promise<number[]> {
  const { readFile } = await import('node:fs/promises');
  try {
    const s = await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8');
    return s.trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/**
 * What the streaming lane reads of the processes it measures (Linux /proc): CPU time
 * (utime + stime of every thread), resident memory sampled during a run, and the
 * file-descriptor limit every process it starts is given.
 */
import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';

/** The hard limit on this machine is 20,000; 5,000 client + 5,000 upstream sockets need ~10,000. */
export const NOFILE = 20_000;

/**
 * CPU sets for the streaming lane's `--pin` (taskset lists such as `1` or `2-3`): the targets on
 * one set, the harness (upstreams, load generators, the bench itself) on the other, so that the
 * scheduler cannot move a target's work onto the cores where its load is made. `null`: no pinning.
 */
export const pinning: { target: string | null; harness: string | null } = { target: null, harness: null };

/** The CPUs this process may run on (its `Cpus_allowed_list`: a cpuset or an earlier taskset may have narrowed them). */
export function allowedCpus(): number[] {
  const list = /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '';
  return list.split(',').flatMap((part) => {
    const [a = 0, b = a] = part.split('-').map(Number);
    return Array.from({ length: b - a + 1 }, (_, i) => a + i);
  });
}

/** A taskset list of CPU ids, runs of consecutive ids written `a-b`. */
function cpuList(ids: readonly number[]): string {
  const parts: string[] = [];
  for (let i = 0; i < ids.length;) {
    let j = i;
    while (j + 1 < ids.length && ids[j + 1] === ids[j]! + 1) j++;
    parts.push(i === j ? String(ids[i]) : `${ids[i]}-${ids[j]}`);
    i = j + 1;
  }
  return parts.join(',');
}

/** The two CPU sets `--pin` uses of the CPUs this process may use: the upper half for the targets, the rest for the harness. */
export function splitCpus(cpus: readonly number[]): { target: string; harness: string } {
  if (cpus.length < 2) throw new Error(`--pin needs at least 2 CPUs, this process may use ${cpus.length}`);
  const h = Math.floor(cpus.length / 2);
  return { target: cpuList(cpus.slice(h)), harness: cpuList(cpus.slice(0, h)) };
}

/**
 * `cmd args…` run through bash with the file-descriptor limit raised first, and under `taskset`
 * on the role's CPU set when {@link pinning} has one (the affinity is inherited by every thread
 * and child, nginx's workers too). `exec` keeps the pid, so the pid the bench sees is the process
 * itself (nginx's master, node).
 */
export function withNofile(
  cmd: string,
  args: string[],
  nofile = NOFILE,
  role: 'target' | 'harness' = 'target',
): { cmd: string; args: string[] } {
  const cpus = pinning[role];
  const pre = cpus !== null ? ['taskset', '-c', cpus] : [];
  return { cmd: 'bash', args: ['-c', `ulimit -n ${nofile} && exec "$@"`, 'bash', ...pre, cmd, ...args] };
}

let clkTck = 0;
/** USER_HZ: the unit of /proc/PID/stat's and /proc/stat's CPU times. */
export function ticksPerSecond(): number {
  if (clkTck === 0) {
    const r = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
    clkTck = Number(r.stdout?.trim()) || 100;
  }
  return clkTck;
}

/** utime + stime of a process (all its threads), in ms; NaN when it is gone. */
export function cpuMs(pid: number): number {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) start at field 3 (state).
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / ticksPerSecond();
  } catch {
    return NaN;
  }
}

/** Sum of cpuMs over some processes. */
export function cpuMsOf(pids: readonly number[]): number {
  return pids.reduce((a, p) => a + cpuMs(p), 0);
}

/** VmRSS of a process in KB; NaN when it is gone. */
export function rssKB(pid: number): number {
  try {
    return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
  } catch {
    return NaN;
  }
}

export function rssKBOf(pids: readonly number[]): number {
  return pids.reduce((a, p) => a + rssKB(p), 0);
}

/** Samples the summed VmRSS of `pids` every `everyMs` until stopped; returns the peak seen (KB). */
export function rssSampler(pids: readonly number[], everyMs = 100): { stop(): { peakKB: number; samples: number } } {
  let peak = rssKBOf(pids);
  let samples = 1;
  const t = setInterval(() => {
    const v = rssKBOf(pids);
    samples++;
    if (v > peak) peak = v;
  }, everyMs);
  return {
    stop() {
      clearInterval(t);
      const v = rssKBOf(pids);
      if (v > peak) peak = v;
      return { peakKB: peak, samples: samples + 1 };
    },
  };
}

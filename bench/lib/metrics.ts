/** Reads the few logprobe metrics the bench needs from the admin port's /metrics. */
export interface MirrorCounters {
  ok: number;
  dropped: number;
  other: number;
  queueDepth: number;
}

export async function mirrorCounters(adminUrl: string): Promise<MirrorCounters> {
  const res = await fetch(`${adminUrl}/metrics`, { signal: AbortSignal.timeout(5000) });
  const text = await res.text();
  const c: MirrorCounters = { ok: 0, dropped: 0, other: 0, queueDepth: 0 };
  for (const line of text.split('\n')) {
    const m = /^logprobe_mirror_total\{[^}]*outcome="([a-z_]+)"[^}]*\} (\S+)$/.exec(line);
    if (m) {
      const n = Number(m[2]);
      if (m[1] === 'ok') c.ok += n;
      else if (m[1] === 'dropped') c.dropped += n;
      else c.other += n;
      continue;
    }
    const q = /^logprobe_mirror_queue_depth (\S+)$/.exec(line);
    if (q) c.queueDepth = Number(q[1]);
  }
  return c;
}

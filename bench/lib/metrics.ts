/** Reads the few logprobe metrics the bench and the soak need from the admin port's /metrics. */
export interface MirrorCounters {
  ok: number;
  dropped: number;
  other: number;
  queueDepth: number;
}

/** The admin port's /metrics page, as text. */
export async function scrape(adminUrl: string): Promise<string> {
  const res = await fetch(`${adminUrl}/metrics`, { signal: AbortSignal.timeout(5000) });
  return res.text();
}

/** `logprobe_mirror_total` by outcome (ok, dropped, the rest) and the queue depth. */
export function parseMirrorCounters(text: string): MirrorCounters {
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

export async function mirrorCounters(adminUrl: string): Promise<MirrorCounters> {
  return parseMirrorCounters(await scrape(adminUrl));
}

/**
 * prom-client's event-loop delay (main thread) since the previous scrape, in ms: its histogram
 * is reset at every collect. Sampled every 10 ms, so an idle loop reads about 10 ms.
 */
export function eventLoopLagMs(text: string): { p50: number; p99: number; max: number } {
  const g = (name: string) => Number(new RegExp(`^nodejs_eventloop_lag_${name}_seconds(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? NaN) * 1000;
  return { p50: g('p50'), p99: g('p99'), max: g('max') };
}

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
  const g = (name: string) =>
    Number(new RegExp(`^nodejs_eventloop_lag_${name}_seconds(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? NaN) *
    1000;
  return { p50: g('p50'), p99: g('p99'), max: g('max') };
}

/** One sample of a metric family: its labels and value. */
export interface Series {
  labels: Record<string, string>;
  value: number;
}

/** Every sample of `name` (a counter or gauge) on a /metrics page; [] when the family is absent. */
export function series(text: string, name: string): Series[] {
  const out: Series[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1] as string] = l[2] as string;
    out.push({ labels, value: Number(m[3]) });
  }
  return out;
}

/** Sums of `name`'s samples by one label's value (those matching `where`). */
export function sumBy(
  text: string,
  name: string,
  label: string,
  where: Record<string, string> = {},
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of series(text, name)) {
    if (Object.entries(where).some(([k, v]) => s.labels[k] !== v)) continue;
    const k = s.labels[label] ?? '';
    out[k] = (out[k] ?? 0) + s.value;
  }
  return out;
}

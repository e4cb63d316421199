import type { Config } from './schema.js';

/** A share as people say it: 5%, 0.5%, 100%. */
function percent(share: number): string {
  const p = share * 100;
  return `${Number.isInteger(p) ? p : Number(p.toPrecision(2))}%`;
}

/**
 * What the mirror will do, in the one line `serve` logs at start (after "logprobe listening"): how
 * much it mirrors and of which routes, how to force a copy on a first try, against what, and
 * where the pairs go — with or without the prompts.
 */
export function mirrorStartLine(config: Config): string {
  const m = config.mirror;
  const routes = m.routes.join(', ');
  const how =
    config.mode === 'shadow'
      ? `shadow mode: comparing ${percent(m.sampleRate)} of the copies the mesh sends on ${routes}`
      : m.sampleRate === 0
        ? `mirroring nothing by default on ${routes} (mirror.sampleRate 0): a request with header x-logprobe-mirror: 1 is mirrored`
        : `mirroring ${percent(m.sampleRate)} of ${routes}${m.sampleBy === 'hash' ? ' (by body hash)' : ''}` +
          (m.sampleRate < 1 ? ' — for a first try send header x-logprobe-mirror: 1, or set LOGPROBE_SAMPLE_RATE=1' : '');
  const against = config.baseline.url ? `against the baseline ${config.baseline.url}` : "baseline-free (the candidate's own repeats)";
  const capture = !config.capture.enabled
    ? 'captures off'
    : `captures to ${config.capture.dir}${config.capture.includePrompts ? ', prompts included (capture.includePrompts: false drops them)' : ', prompts hashed'}`;
  return `${how}; ${against}; ${capture}`;
}

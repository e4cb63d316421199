import type { Comparison } from '../core/index.js';
import type { CacheSplit } from '../core/slice.js';
import type { Metrics } from '../metrics/registry.js';

/** Exports one comparison: per-token histograms, the flip, the divergence and the verdict (by model slice and cache split). */
export function recordComparison(
  metrics: Metrics,
  where: { route: string; model: string; cache: CacheSplit },
  c: Comparison,
): void {
  const { route, model, cache } = where;
  metrics.counter('logprobe_verdicts_total').inc({ route, verdict: c.verdict, kind: 'pair', model, cache });
  if (c.verdict === 'incomparable') return;
  const diffH = metrics.histogram('logprobe_token_crosspath_diff_nats');
  const shiftH = metrics.histogram('logprobe_token_shift_nats');
  const gapH = metrics.histogram('logprobe_token_gap_nats');
  const klH = metrics.histogram('logprobe_token_kl_nats');
  const labels = { route };
  for (const p of c.positions) {
    if (p.diff !== null) diffH.observe(labels, Math.abs(p.diff));
    if (p.shift !== null) shiftH.observe({ route, model }, p.shift);
    if (p.gap !== null) gapH.observe(labels, p.gap);
    if (p.kl !== null) klH.observe(labels, Math.max(0, p.kl));
  }
  // Teacher-forced positions past the divergence (those before it are counted above already).
  if (c.scored?.outcome === 'ok' && c.firstDivergence !== null) {
    const shifts = c.scored.shifts ?? [];
    for (let i = c.firstDivergence + 1; i < shifts.length; i++) {
      const s = shifts[i];
      if (s !== null && s !== undefined) shiftH.observe({ route, model }, s);
    }
  }
  if (c.prompt) {
    const promptH = metrics.histogram('logprobe_prompt_shift_nats');
    for (const s of c.prompt.shifts) if (s !== null) promptH.observe(labels, s);
  }
  if (c.firstDivergence !== null)
    metrics.histogram('logprobe_first_divergence_tokens').observe(labels, c.firstDivergence);
  if (c.flip && c.flip.gap !== null)
    metrics.histogram('logprobe_flip_gap_nats').observe({ route, class: c.flip.class }, c.flip.gap);
}

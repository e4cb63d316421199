/**
 * vLLM's `--logprobs-mode` (`vllm/config/model.py` `LogprobsMode`; computed in
 * `vllm/v1/sample/sampler.py` `Sampler.forward` and `ops/topk_topp_sampler.py`
 * `TopKTopPSampler.forward_native`): what the sample logprobs report.
 *
 * - `raw_logprobs` (default): log_softmax of the model's logits, before any processing.
 * - `raw_logits`: the logits themselves, unnormalised.
 * - `processed_logits`: the logits after temperature, then top-k and top-p (tokens masked out are
 *   -inf, clamped to -9999.0 on the wire); a greedy request (temperature 0) skips the sampler's
 *   processing, so it gets the raw logits.
 * - `processed_logprobs`: log_softmax of those (greedy: the raw logprobs).
 *
 * The models here give logprobs, not logits; the double's logits are the logprobs plus an offset
 * that stands for the softmax's normaliser (`logitOffset`), so they do not sum to one.
 */
import type { NextTokenDistribution } from '../model.js';
import type { ChoiceParams } from '../sampling.js';
import type { LogprobsMode, RouteContext } from '../route.js';

/** The double's log-normaliser of a position: the logits are logprobs + this (nats). */
export function logitOffset(dist: NextTokenDistribution): number {
  const top = dist.ids[0] ?? 0;
  return 12 + (top % 7);
}

/** The distribution's values over the whole vocabulary. */
function fullVector(dist: NextTokenDistribution, vocabSize: number): Float64Array {
  const v = new Float64Array(vocabSize);
  for (let i = 0; i < vocabSize; i++) v[i] = dist.logprobOf(i);
  return v;
}

/** `apply_top_k_top_p` on logits/T: the tokens it keeps, by id. */
function kept(scaled: Float64Array, params: ChoiceParams): Set<number> | null {
  if (params.topK <= 0 && params.topP >= 1) return null;
  const order = Array.from(scaled.keys()).sort((a, b) => (scaled[b] as number) - (scaled[a] as number) || a - b);
  let keep = params.topK > 0 ? order.slice(0, params.topK) : order;
  if (params.topP < 1) {
    let max = -Infinity;
    for (const id of keep) max = Math.max(max, scaled[id] as number);
    const w = keep.map((id) => Math.exp((scaled[id] as number) - max));
    const total = w.reduce((a, b) => a + b, 0);
    // Masked: the least likely tokens whose cumulative mass stays ≤ 1 - p; at least one kept.
    let cum = 0;
    let cut = 0;
    for (let i = w.length - 1; i > 0; i--) {
      cum += (w[i] as number) / total;
      if (cum <= 1 - params.topP) cut++;
      else break;
    }
    keep = keep.slice(0, keep.length - cut);
  }
  return new Set(keep);
}

function logSumExp(v: Float64Array, keep: Set<number> | null): number {
  let max = -Infinity;
  for (let i = 0; i < v.length; i++) if (!keep || keep.has(i)) max = Math.max(max, v[i] as number);
  let s = 0;
  for (let i = 0; i < v.length; i++) if (!keep || keep.has(i)) s += Math.exp((v[i] as number) - max);
  return max + Math.log(s);
}

/** A distribution reporting `values` (by id), listing the same ids in the same order. */
function reporting(dist: NextTokenDistribution, values: (id: number) => number): NextTokenDistribution {
  const ids = Array.from(dist.ids);
  return { ids, logprobs: ids.map(values), logprobOf: values };
}

/** What the step reports under `mode` for a request sampled with `params`. */
export function reportedDistribution(
  dist: NextTokenDistribution,
  vocabSize: number,
  mode: LogprobsMode,
  params: ChoiceParams,
): NextTokenDistribution {
  if (mode === 'raw_logprobs') return dist;
  const z = logitOffset(dist);
  const greedy = params.temperature < 1e-5;
  if (mode === 'raw_logits' || (greedy && mode === 'processed_logits'))
    return reporting(dist, (id) => dist.logprobOf(id) + z);
  if (greedy) return dist; // processed_logprobs of a greedy request: log_softmax(logits) = the raw logprobs
  const raw = fullVector(dist, vocabSize);
  const scaled = raw.map((lp) => (lp + z) / params.temperature);
  const keep = kept(scaled, params);
  const masked = (id: number): number => (keep && !keep.has(id) ? -Infinity : (scaled[id] ?? -Infinity));
  if (mode === 'processed_logits') return reporting(dist, masked);
  const norm = logSumExp(scaled, keep);
  return reporting(dist, (id) => masked(id) - norm);
}

/** The `report` option of `generate` on the vLLM API (none under the default mode), to spread into its options. */
export function vllmReport(
  ctx: RouteContext,
  params: ChoiceParams,
): { report?: (dist: NextTokenDistribution) => NextTokenDistribution } {
  if (ctx.api.api !== 'vllm' || ctx.server.logprobsMode === 'raw_logprobs') return {};
  const mode = ctx.server.logprobsMode;
  const vocab = ctx.model.vocabSize;
  return { report: (d) => reportedDistribution(d, vocab, mode, params) };
}

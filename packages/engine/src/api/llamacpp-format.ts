/**
 * llama-server's wire pieces at build b4748 (the recorded fixtures in
 * test/fixtures/llama-server-b4748/): a token's probability item `{id, token, bytes, logprob,
 * top_logprobs}` (or `prob`/`top_probs` with `post_sampling_probs`), `timings`, and the
 * `generation_settings` echo of a request.
 */
import type { TokenStep } from '../generate.js';
import type { EngineModel, NextTokenDistribution } from '../model.js';

/** The build whose API this reproduces (`/props` `build_info`, `system_fingerprint`). */
export const LLAMACPP_BUILD = 'b4748-c392e5094';

/** std::numeric_limits<float>::lowest(): "nlohmann::json converts -inf to null, so we need to prevent that". */
const FLOAT_LOWEST = '-3.4028234663852886e+38';

/** A logprob as llama-server prints it: the float32 value, -inf as the lowest float. */
export function llamaLp(x: number): string {
  if (x === -Infinity || Number.isNaN(x)) return FLOAT_LOWEST;
  return String(Math.fround(x));
}

/** A float parameter as llama-server echoes it (float32 widened to double: 0.95 → 0.949999988079071). */
export const f32 = (x: number): number => Math.fround(x);

const strict = new TextDecoder('utf-8', { fatal: true });
const lenient = new TextDecoder('utf-8');

/** A token's text and bytes as JSON: the text cut to valid UTF-8 (`validate_utf8`), special tokens by name. */
export class LlamaTokens {
  private readonly cache = new Map<number, string>();
  constructor(private readonly model: EngineModel) {}

  /** `"id":N,"token":…,"bytes":[…]` for one token. */
  fields(id: number): string {
    let s = this.cache.get(id);
    if (s === undefined) {
      const special = id === this.model.bosToken || id === this.model.eosToken;
      const bytes = special ? Buffer.from(this.model.tokenText(id)) : this.model.tokenBytes(id);
      s = `"id":${id},"token":${JSON.stringify(special ? this.model.tokenText(id) : validPrefix(bytes))},"bytes":[${Array.from(bytes).join(',')}]`;
      this.cache.set(id, s);
    }
    return s;
  }
}

function validPrefix(bytes: Uint8Array): string {
  // An incomplete multi-byte character at the end is cut, as llama-server's validate_utf8.
  for (let cut = 0; cut <= Math.min(3, bytes.length); cut++) {
    try {
      return strict.decode(bytes.subarray(0, bytes.length - cut));
    } catch {
      // try a shorter prefix
    }
  }
  return lenient.decode(bytes);
}

/** The `n` most likely tokens, beyond the ones a distribution lists when `n` asks for more. */
export function llamaTop(
  d: NextTokenDistribution,
  n: number,
  vocabSize: number,
): Array<{ id: number; logprob: number }> {
  const k = Math.min(n, vocabSize);
  if (k <= d.ids.length)
    return Array.from({ length: k }, (_, i) => ({ id: d.ids[i] as number, logprob: d.logprobs[i] as number }));
  const all = Array.from({ length: vocabSize }, (_, id) => ({ id, logprob: d.logprobOf(id) }));
  all.sort((a, b) => b.logprob - a.logprob || a.id - b.id);
  return all.slice(0, k);
}

/** The sampling chain's settings that shape `post_sampling_probs`. */
export interface ChainSettings {
  readonly temperature: number;
  readonly topK: number;
  readonly topP: number;
  readonly minP: number;
}

/**
 * Probabilities after the sampler chain (b4748: top_k, top_p, min_p, then temperature): the
 * surviving candidates, most likely first; at temperature ≤ 0 the greedy pick has 1, the rest 0
 * (fixture v1_completions_post_sampling_probs.json).
 */
export function postSamplingProbs(
  d: NextTokenDistribution,
  chosen: number,
  s: ChainSettings,
  n: number,
  vocabSize: number,
): Array<{ id: number; p: number }> {
  let cand = llamaTop(d, s.topK > 0 ? s.topK : vocabSize, vocabSize).filter((e) => e.logprob > -Infinity);
  if (s.topP < 1) {
    const total = cand.reduce((a, e) => a + Math.exp(e.logprob), 0);
    let cum = 0;
    let keep = cand.length;
    for (let i = 0; i < cand.length; i++) {
      cum += Math.exp((cand[i] as { logprob: number }).logprob) / total;
      if (cum >= s.topP) {
        keep = i + 1;
        break;
      }
    }
    cand = cand.slice(0, Math.max(1, keep));
  }
  const max = cand[0]?.logprob ?? 0;
  if (s.minP > 0) cand = cand.filter((e, i) => i === 0 || e.logprob >= max + Math.log(s.minP));
  let probs: Array<{ id: number; p: number }>;
  if (s.temperature <= 0) {
    probs = cand.map((e) => ({ id: e.id, p: e.id === chosen ? 1 : 0 }));
  } else {
    const w = cand.map((e) => Math.exp((e.logprob - max) / s.temperature));
    const sum = w.reduce((a, b) => a + b, 0);
    probs = cand.map((e, i) => ({ id: e.id, p: (w[i] as number) / sum }));
  }
  return probs.slice(0, n);
}

/** One token's probability item. */
export function llamaItem(
  t: LlamaTokens,
  step: Pick<TokenStep, 'id' | 'logprob'> & { dist?: NextTokenDistribution },
  n: number,
  vocabSize: number,
  post: ChainSettings | null,
): string {
  const d = step.dist;
  if (!d) return `{${t.fields(step.id)},"logprob":${llamaLp(step.logprob)},"top_logprobs":[]}`;
  if (post) {
    const probs = postSamplingProbs(d, step.id, post, n, vocabSize);
    const own = probs.find((e) => e.id === step.id)?.p ?? 0;
    return `{${t.fields(step.id)},"prob":${f32(own)},"top_probs":[${probs.map((e) => `{${t.fields(e.id)},"prob":${f32(e.p)}}`).join(',')}]}`;
  }
  const top = llamaTop(d, n, vocabSize);
  return `{${t.fields(step.id)},"logprob":${llamaLp(step.logprob)},"top_logprobs":[${top.map((e) => `{${t.fields(e.id)},"logprob":${llamaLp(e.logprob)}}`).join(',')}]}`;
}

/** Prompt and generation timings of one request. */
export interface Timings {
  readonly promptN: number;
  readonly promptMs: number;
  readonly predictedN: number;
  readonly predictedMs: number;
}

/** `timings`, in llama-server's fields. */
export function timingsJson(t: Timings): string {
  const per = (ms: number, n: number): string => `${n > 0 ? ms / n : 0}`;
  const rate = (ms: number, n: number): string => `${ms > 0 ? (1000 * n) / ms : 0}`;
  return (
    `{"prompt_n":${t.promptN},"prompt_ms":${t.promptMs},"prompt_per_token_ms":${per(t.promptMs, t.promptN)},"prompt_per_second":${rate(t.promptMs, t.promptN)},` +
    `"predicted_n":${t.predictedN},"predicted_ms":${t.predictedMs},"predicted_per_token_ms":${per(t.predictedMs, t.predictedN)},"predicted_per_second":${rate(t.predictedMs, t.predictedN)}}`
  );
}

/** What `generation_settings` echoes of a request. */
export interface SettingsEcho extends ChainSettings {
  readonly nPredict: number;
  readonly seed: number;
  readonly stop: readonly string[];
  readonly stream: boolean;
  readonly nProbs: number;
  readonly postSampling: boolean;
}

/** `generation_settings` (the b4748 field list; the sampler settings the engine does not model keep llama-server's defaults). */
export function generationSettings(s: SettingsEcho): Record<string, unknown> {
  return {
    n_predict: s.nPredict,
    seed: s.seed,
    temperature: f32(s.temperature),
    dynatemp_range: 0.0,
    dynatemp_exponent: 1.0,
    top_k: s.topK,
    top_p: f32(s.topP),
    min_p: f32(s.minP),
    xtc_probability: 0.0,
    xtc_threshold: f32(0.1),
    typical_p: 1.0,
    repeat_last_n: 64,
    repeat_penalty: 1.0,
    presence_penalty: 0.0,
    frequency_penalty: 0.0,
    dry_multiplier: 0.0,
    dry_base: 1.75,
    dry_allowed_length: 2,
    dry_penalty_last_n: 2048,
    dry_sequence_breakers: ['\n', ':', '"', '*'],
    mirostat: 0,
    mirostat_tau: 5.0,
    mirostat_eta: f32(0.1),
    stop: s.stop,
    max_tokens: s.nPredict,
    n_keep: 0,
    n_discard: 0,
    ignore_eos: false,
    stream: s.stream,
    logit_bias: [],
    n_probs: s.nProbs,
    min_keep: 0,
    grammar: '',
    grammar_trigger_words: [],
    grammar_trigger_tokens: [],
    preserved_tokens: [],
    chat_format: 'Content-only',
    samplers: ['penalties', 'dry', 'top_k', 'typ_p', 'top_p', 'min_p', 'xtc', 'temperature'],
    'speculative.n_max': 16,
    'speculative.n_min': 0,
    'speculative.p_min': f32(0.75),
    timings_per_token: false,
    post_sampling_probs: s.postSampling,
    lora: [],
  };
}

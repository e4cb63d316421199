import { combine, GAUSS, GUMBEL, mix32, tableIndex, unit } from './hash.js';
import { EOS_ID, VOCAB, type TokenClass } from './vocab.js';

/** The numeric knobs of the simulated model (see `SimOptions` for their meaning). */
export interface SimKnobs {
  readonly seed: number;
  readonly noise: number;
  readonly stateShift: number;
  readonly localShift: number;
  readonly localShiftRate: number;
  readonly decodeShift: number;
  readonly cacheHitShift: number;
  readonly batchNoise: number;
  /** Magnitude (nats) of the perturbation of reported decode logprobs (`specDecodeShift`). */
  readonly specDecodeShift: number;
  /** Magnitude (nats) of the previous request's residue in prompt logprobs (`staleBuffer`). */
  readonly staleBuffer: number;
  /** Decode steps after the first report every logprob as 0.0 (`zeroDecodeLogprobs`). */
  readonly zeroDecodeLogprobs: boolean;
}

/** A LoRA adapter's head: a seeded logit delta on top of the base model's logits. */
export interface SimAdapterHead {
  /** Selects the delta: same key and context → the same delta. */
  readonly key: number;
  /** σ (nats) of the delta. */
  readonly scale: number;
}

// Salts keep the independent random streams (scale, shifts, noise, length) apart.
const SALT_SEED = 0x51a7e001;
const SALT_SCALE = 0x51a7e002;
const SALT_STATE = 0x51a7e003;
const SALT_LOCAL_PICK = 0x51a7e004;
const SALT_LOCAL_VEC = 0x51a7e005;
const SALT_NOISE = 0x51a7e006;
const SALT_EOS = 0x51a7e007;
const SALT_DECODE = 0x51a7e008;
const SALT_CACHE_HIT = 0x51a7e009;
const SALT_BATCH = 0x51a7e00a;
const SALT_ADAPTER = 0x51a7e00b;
const SALT_SPEC = 0x51a7e00c;
const SALT_STALE = 0x51a7e00d;

/**
 * Per-step scale of the Gumbel logits, log-uniform in [SCALE_MIN, SCALE_MAX]: the top-1/top-2
 * gap is scale × Exp(1), so gaps run from ~1e-3 (near-ties) to ~6 nats (confident), median ~1.
 */
const SCALE_MIN = 0.5;
const SCALE_MAX = 4;
const LOG_SCALE_MIN = Math.log(SCALE_MIN);
const LOG_SCALE_SPAN = Math.log(SCALE_MAX) - LOG_SCALE_MIN;

/** Static log-prior by token class: words first, raw control/high bytes practically never. */
const CLASS_PRIOR: Record<TokenClass, number> = {
  eos: -4,
  word: 0,
  piece: -1,
  letter: -2.5,
  other: -2.5,
  hidden: -60,
};

const PRIOR: Float64Array = Float64Array.from(VOCAB.classes, (c) => CLASS_PRIOR[c]);

/** Share of prompts whose continuations tend to end; the rest run until `max_tokens`. */
const EOS_PROMPT_SHARE = 0.6;

/**
 * The deterministic core of the simulated model: logits are a pure function of the seed, a
 * rolling hash of the whole context (prompt and generated tokens), the position, and — for the
 * knobs that model bugs and noise — the prompt and a per-request seed.
 */
export class SimCore {
  readonly knobs: SimKnobs;
  /** The adapter's head, or null for the base model. */
  readonly adapter: SimAdapterHead | null;
  private readonly seedHash: number;

  constructor(knobs: SimKnobs, adapter: SimAdapterHead | null = null) {
    this.knobs = knobs;
    this.adapter = adapter;
    this.seedHash = mix32((knobs.seed ^ SALT_SEED) >>> 0);
  }

  /** The hash of the empty context. */
  initialHash(): number {
    return this.seedHash;
  }

  /** The context hash after appending `id`. */
  extend(hash: number, id: number): number {
    return combine(hash, id);
  }

  /**
   * The generated position from which end-of-sequence becomes likely for this prompt (20–60
   * tokens), or Infinity for prompts that run until `max_tokens`.
   */
  eosStart(promptHash: number): number {
    const h = mix32(promptHash ^ SALT_EOS);
    if (unit(h) >= EOS_PROMPT_SHARE) return Infinity;
    return 20 + Math.floor(unit(h ^ 0x2545f491) * 41);
  }

  /**
   * The persistent perturbation of a corrupted prefill state: uniform in ±stateShift per token,
   * derived from the prompt, the same at every decode step of the request. Null when off.
   */
  stateVector(promptHash: number): Float64Array | null {
    const x = this.knobs.stateShift;
    if (x === 0) return null;
    const h = mix32(promptHash ^ SALT_STATE);
    const v = new Float64Array(VOCAB.size);
    for (let t = 0; t < v.length; t++) v[t] = x * (2 * unit(h ^ Math.imul(t + 1, 0x9e3779b1)) - 1);
    return v;
  }

  /**
   * The persistent perturbation of a corrupted decode state (`decodeShift`) or of a wrong cache
   * restore (`cacheHitShift`): uniform in ±x per token, fixed for the model (a bug in the engine,
   * not in one prompt). Null when the knob is off.
   */
  faultVector(kind: 'decode' | 'cache-hit'): Float64Array | null {
    const x = kind === 'decode' ? this.knobs.decodeShift : this.knobs.cacheHitShift;
    if (x === 0) return null;
    const h = mix32(this.seedHash ^ (kind === 'decode' ? SALT_DECODE : SALT_CACHE_HIT));
    const v = new Float64Array(VOCAB.size);
    for (let t = 0; t < v.length; t++) v[t] = x * (2 * unit(h ^ Math.imul(t + 1, 0x9e3779b1)) - 1);
    return v;
  }

  /**
   * What a speculative-decoding bug does to the logprobs a decode step reports (not to the token
   * it keeps): uniform in ±specDecodeShift per token, different at every step. Null when off.
   */
  specVector(ctxHash: number, absPos: number): Float64Array | null {
    const x = this.knobs.specDecodeShift;
    if (x === 0) return null;
    const h = combine(mix32(ctxHash ^ SALT_SPEC), absPos);
    const v = new Float64Array(VOCAB.size);
    for (let t = 0; t < v.length; t++) v[t] = x * (2 * unit(h ^ Math.imul(t + 1, 0x9e3779b1)) - 1);
    return v;
  }

  /**
   * What an uninitialized prompt-logprobs buffer still holds at a prompt position: a residue of
   * the previous request (`prevHash`, the hash of its prompt), uniform in ±staleBuffer per token
   * and different per position. Null when off.
   */
  staleVector(prevHash: number, absPos: number): Float64Array | null {
    const x = this.knobs.staleBuffer;
    if (x === 0) return null;
    const h = combine(mix32(prevHash ^ SALT_STALE), absPos);
    const v = new Float64Array(VOCAB.size);
    for (let t = 0; t < v.length; t++) v[t] = x * (2 * unit(h ^ Math.imul(t + 1, 0x9e3779b1)) - 1);
    return v;
  }

  /**
   * The logits of the next token.
   * @param ctxHash rolling hash of the context so far
   * @param genPos tokens generated so far (negative for prompt positions)
   * @param absPos position of the next token in the whole sequence
   * @param requestSeed varies per request: the source of run-to-run noise
   * @param state the prompt's state perturbation, or null
   * @param eosStart from `eosStart`
   * @param coResident sequences in flight with this one: at 2 or more, `batchNoise` is added
   * @param head false: leave out the adapter's head (a prompt-logprobs path that drops it)
   */
  logits(
    ctxHash: number,
    genPos: number,
    absPos: number,
    requestSeed: number,
    state: Float64Array | null,
    eosStart: number,
    coResident = 1,
    head = true,
  ): Float64Array {
    const n = VOCAB.size;
    const out = new Float64Array(n);
    const h = ctxHash;
    const scale = Math.exp(LOG_SCALE_MIN + LOG_SCALE_SPAN * unit(h ^ SALT_SCALE));
    for (let t = 0; t < n; t++) out[t] = (PRIOR[t] as number) + scale * (GUMBEL[tableIndex(h, t)] as number);
    if (genPos >= eosStart) out[EOS_ID] = (out[EOS_ID] as number) + 3 + 0.8 * (genPos - eosStart);
    if (state) for (let t = 0; t < n; t++) out[t] = (out[t] as number) + (state[t] as number);
    const adapter = this.adapter;
    if (adapter !== null && head) {
      // An lm_head LoRA: a delta that depends on the context (the hidden state) and the adapter.
      const ah = combine(h ^ SALT_ADAPTER, adapter.key);
      for (let t = 0; t < n; t++) out[t] = (out[t] as number) + adapter.scale * (GAUSS[tableIndex(ah, t)] as number);
    }
    const { localShift, localShiftRate, noise } = this.knobs;
    if (localShift !== 0 && unit(combine(h ^ SALT_LOCAL_PICK, absPos)) < localShiftRate) {
      const lh = combine(h ^ SALT_LOCAL_VEC, absPos);
      for (let t = 0; t < n; t++)
        out[t] = (out[t] as number) + localShift * (2 * unit(lh ^ Math.imul(t + 1, 0x9e3779b1)) - 1);
    }
    if (noise !== 0) {
      const nh = combine(combine(this.seedHash ^ SALT_NOISE, requestSeed), absPos);
      for (let t = 0; t < n; t++) out[t] = (out[t] as number) + noise * (GAUSS[tableIndex(nh, t)] as number);
    }
    const batch = this.knobs.batchNoise;
    if (batch !== 0 && coResident >= 2) {
      // Batch variance: another reduction order for another batch; alone, the same bits every time.
      const bh = combine(combine(combine(this.seedHash ^ SALT_BATCH, requestSeed), absPos), coResident);
      for (let t = 0; t < n; t++) out[t] = (out[t] as number) + batch * (GAUSS[tableIndex(bh, t)] as number);
    }
    return out;
  }
}

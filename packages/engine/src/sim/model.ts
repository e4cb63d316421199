import type { EngineModel, ModelSequence, NextTokenDistribution } from '../model.js';
import { LogitDistribution } from './distribution.js';
import { SimCore, type SimKnobs } from './logits.js';
import { SplitSequence } from './split.js';
import { concatBytes, EOS_ID, tokenBytesOf, tokenizeBytes, tokenizeLongest, VOCAB } from './vocab.js';

/** Options of the simulated model. Every knob defaults to off (0 / false). */
export interface SimOptions {
  /** Selects the model: same seed and context → the same logits, bit for bit. Default 0. */
  seed?: number;
  /** σ (nats) of Gaussian jitter added to every logit, different for every request. */
  noise?: number;
  /**
   * Magnitude (nats) of a persistent perturbation derived from the prompt and added at every
   * decode step — a corrupted prefill state. 0.3–1.0 moves each step's logprobs by ~0.2–0.5.
   */
  stateShift?: number;
  /** Magnitude (nats) of a perturbation applied only at some positions (see `localShiftRate`). */
  localShift?: number;
  /** Share of positions that `localShift` hits, chosen by a hash of position and context. Default 0.1. */
  localShiftRate?: number;
  /**
   * Tokenizes the same text into other tokens: single bytes instead of multi-byte chunks. Greedy
   * decoding yields the same text as the unsplit model (until `max_tokens` cuts it earlier).
   */
  tokenizerSplit?: boolean;
  /** The id reported by `/v1/models` and in responses. Default `logprobe-sim`. */
  id?: string;
}

/** The simulated model: an `EngineModel` plus the options it was built with. */
export interface SimModel extends EngineModel {
  readonly options: Readonly<Required<SimOptions>>;
}

const decoder = new TextDecoder();

function checkKnob(name: string, value: number, max = Infinity): void {
  if (!Number.isFinite(value) || value < 0 || value > max) {
    throw new RangeError(`sim option ${name} must be a number in [0, ${max}], got ${value}`);
  }
}

function checkId(id: number): void {
  if (!Number.isInteger(id) || id < 0 || id >= VOCAB.size) {
    throw new RangeError(`token id ${id} is outside the vocabulary (0..${VOCAB.size - 1})`);
  }
}

/** One generation on the unsplit simulated model. */
class SimSequence implements ModelSequence {
  private hash: number;
  private genPos = 0;
  private absPos: number;
  private readonly state: Float64Array | null;
  private readonly eosStart: number;

  constructor(
    private readonly core: SimCore,
    private readonly prompt: readonly number[],
    private readonly requestSeed: number,
  ) {
    let h = core.initialHash();
    for (const id of prompt) {
      checkId(id);
      h = core.extend(h, id);
    }
    this.hash = h;
    this.absPos = prompt.length;
    this.state = core.stateVector(h);
    this.eosStart = core.eosStart(h);
  }

  next(): Promise<NextTokenDistribution> {
    const logits = this.core.logits(this.hash, this.genPos, this.absPos, this.requestSeed, this.state, this.eosStart);
    return Promise.resolve(new LogitDistribution(logits));
  }

  push(id: number): Promise<void> {
    checkId(id);
    this.hash = this.core.extend(this.hash, id);
    this.genPos++;
    this.absPos++;
    return Promise.resolve();
  }

  promptDistributions(): Promise<NextTokenDistribution[]> {
    // Prefill sees no corrupted state (that is written by prefill and read by decode steps) but
    // does see noise and local shifts.
    const out: NextTokenDistribution[] = [];
    let h = this.core.initialHash();
    const n = this.prompt.length;
    for (let i = 0; i < n - 1; i++) {
      h = this.core.extend(h, this.prompt[i] as number);
      out.push(new LogitDistribution(this.core.logits(h, i + 1 - n, i + 1, this.requestSeed, null, Infinity)));
    }
    return Promise.resolve(out);
  }

  dispose(): void {}
}

/**
 * Builds the simulated model: a deterministic toy language model over a few hundred tokens whose
 * next-token logits depend on the seed, the prompt and the tokens generated so far, with knobs for
 * run-to-run noise and for the bugs logprobe must detect.
 */
export function createSimModel(options: SimOptions = {}): SimModel {
  const resolved: Required<SimOptions> = {
    seed: options.seed ?? 0,
    noise: options.noise ?? 0,
    stateShift: options.stateShift ?? 0,
    localShift: options.localShift ?? 0,
    localShiftRate: options.localShiftRate ?? 0.1,
    tokenizerSplit: options.tokenizerSplit ?? false,
    id: options.id ?? 'logprobe-sim',
  };
  if (!Number.isInteger(resolved.seed)) throw new RangeError(`sim option seed must be an integer, got ${resolved.seed}`);
  checkKnob('noise', resolved.noise);
  checkKnob('stateShift', resolved.stateShift);
  checkKnob('localShift', resolved.localShift);
  checkKnob('localShiftRate', resolved.localShiftRate, 1);
  const knobs: SimKnobs = { ...resolved, seed: resolved.seed | 0 };
  const core = new SimCore(knobs);
  const split = resolved.tokenizerSplit;
  const startBase = (prompt: readonly number[], requestSeed: number): ModelSequence => new SimSequence(core, prompt, requestSeed);

  return {
    id: resolved.id,
    eosToken: EOS_ID,
    vocabSize: VOCAB.size,
    options: Object.freeze(resolved),
    tokenize: split ? tokenizeBytes : tokenizeLongest,
    tokenText: (id) => {
      const text = VOCAB.texts[id];
      if (text === undefined) throw new RangeError(`token id ${id} is outside the vocabulary (0..${VOCAB.size - 1})`);
      return text;
    },
    tokenBytes: tokenBytesOf,
    detokenize: (ids) => decoder.decode(concatBytes(ids)),
    start: (prompt, { requestSeed }) => {
      if (!split) return Promise.resolve(startBase(prompt, requestSeed));
      // The split model thinks in the canonical tokens of the same text, and spells them out.
      const canonical = tokenizeLongest(decoder.decode(concatBytes(prompt)));
      return Promise.resolve(new SplitSequence(startBase(canonical, requestSeed)));
    },
  };
}

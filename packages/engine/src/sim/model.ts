import type { CacheState, EngineModel, ModelSequence, NextTokenDistribution, StartOptions } from '../model.js';
import { reusable } from '../prefix-cache.js';
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
   * Magnitude (nats) of a persistent perturbation of the state carried into decode (the
   * stand-in for llama's `decode-state:I`): every distribution computed in a decode step or on a
   * reused cached prefix moves; prompt distributions and the prefill's last distribution (the
   * first generated token's) are clean.
   */
  decodeShift?: number;
  /**
   * Magnitude (nats) of a perturbation of what a prefix-cache hit restores (the stand-in for
   * llama's `cache-hit:I`): every distribution computed on a reused prefix moves; a cold
   * request is clean.
   */
  cacheHitShift?: number;
  /**
   * σ (nats) of jitter added to a request's logits at each step while 2 or more sequences are in
   * flight (`StartOptions.coResident`): batch variance. Alone, a request is bit-for-bit the same.
   */
  batchNoise?: number;
  /**
   * Tokenizes the same text into other tokens: single bytes instead of multi-byte chunks. Greedy
   * decoding yields the same text as the unsplit model (until `max_tokens` cuts it earlier).
   */
  tokenizerSplit?: boolean;
  /** The id reported by `/v1/models` and in responses. Default `logprobe-sim`. */
  id?: string;
  /**
   * Prefixes the prefix cache keeps (least recently used evicted), as vLLM's and SGLang's caches
   * keep many; 1 (the default) is llama-server with `-np 1`: the previous request's only.
   */
  cacheSlots?: number;
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

/** The prefix-cache slot: the tokens the last request left (the model is stateless math, so only they are kept). */
interface SimSlot {
  cells: number[];
  /** The state those tokens stand for was corrupted after its prefill (`decodeShift`). */
  corrupt: boolean;
}

/** The perturbations one request's distributions get (null: none), and its cache bookkeeping. */
interface SimRun {
  /** Prompt distributions (all computed on the reused prefix when there is one). */
  readonly prompt: Float64Array | null;
  /** The prefill's last distribution (the first generated token's), on top of `stateShift`. */
  readonly first: Float64Array | null;
  /** Every decode step after it, on top of `stateShift`. */
  readonly later: Float64Array | null;
  readonly from: number;
  readonly reused: number;
  /** Where evaluated tokens are recorded, or null when the request keeps nothing. */
  readonly slot: SimSlot | null;
}

function plus(a: Float64Array | null, b: Float64Array | null): Float64Array | null {
  if (a === null || b === null) return a ?? b;
  return a.map((x, i) => x + (b[i] as number));
}

/** One generation on the unsplit simulated model. */
class SimSequence implements ModelSequence {
  private hash: number;
  private genPos = 0;
  private absPos: number;
  private readonly eosStart: number;
  private readonly first: Float64Array | null;
  private readonly later: Float64Array | null;

  constructor(
    private readonly core: SimCore,
    private readonly prompt: readonly number[],
    private readonly requestSeed: number,
    private readonly run: SimRun,
    private readonly coResident: () => number = () => 1,
  ) {
    let h = core.initialHash();
    for (const id of prompt) {
      checkId(id);
      h = core.extend(h, id);
    }
    this.hash = h;
    this.absPos = prompt.length;
    this.eosStart = core.eosStart(h);
    const state = core.stateVector(h);
    // Without the decode/cache knobs these are `state` itself: nothing added, nothing allocated.
    this.first = plus(state, run.first);
    this.later = plus(state, run.later);
  }

  next(): Promise<NextTokenDistribution> {
    const state = this.genPos === 0 ? this.first : this.later;
    const logits = this.core.logits(
      this.hash,
      this.genPos,
      this.absPos,
      this.requestSeed,
      state,
      this.eosStart,
      this.batch(),
    );
    return Promise.resolve(new LogitDistribution(logits));
  }

  /** Sequences in flight now, asked only when batch noise is on. */
  private batch(): number {
    return this.core.knobs.batchNoise === 0 ? 1 : this.coResident();
  }

  push(id: number): Promise<void> {
    checkId(id);
    this.hash = this.core.extend(this.hash, id);
    this.genPos++;
    this.absPos++;
    // generate() pushes only a token it goes on to evaluate: as llama-server, the slot keeps
    // the prompt and every generated token but the last.
    this.run.slot?.cells.push(id);
    return Promise.resolve();
  }

  promptDistributions(): Promise<NextTokenDistribution[]> {
    // Prefill sees no corrupted decode state (that is written by prefill and read by decode
    // steps) but does see noise, local shifts, and whatever a reused prefix brings.
    const out: NextTokenDistribution[] = [];
    let h = this.core.initialHash();
    const n = this.prompt.length;
    const batch = this.batch();
    for (let i = 0; i < n - 1; i++) {
      h = this.core.extend(h, this.prompt[i] as number);
      if (i + 1 < this.run.from) continue;
      out.push(
        new LogitDistribution(
          this.core.logits(h, i + 1 - n, i + 1, this.requestSeed, this.run.prompt, Infinity, batch),
        ),
      );
    }
    return Promise.resolve(out);
  }

  cacheState(): CacheState {
    return { cells: this.prompt.length, reused: this.run.reused, held: this.prompt.length + this.genPos };
  }

  dispose(): void {}
}

/** `prompt` starts with all of `cells`: a request that only extends a cached entry. */
function extends_(cells: readonly number[], prompt: readonly number[]): boolean {
  return cells.length <= prompt.length && cells.every((c, i) => prompt[i] === c);
}

/** The options with their defaults, checked: a bad one throws a RangeError. */
function resolveSimOptions(options: SimOptions): Required<SimOptions> {
  const resolved: Required<SimOptions> = {
    seed: options.seed ?? 0,
    noise: options.noise ?? 0,
    stateShift: options.stateShift ?? 0,
    localShift: options.localShift ?? 0,
    localShiftRate: options.localShiftRate ?? 0.1,
    decodeShift: options.decodeShift ?? 0,
    cacheHitShift: options.cacheHitShift ?? 0,
    batchNoise: options.batchNoise ?? 0,
    tokenizerSplit: options.tokenizerSplit ?? false,
    id: options.id ?? 'logprobe-sim',
    cacheSlots: options.cacheSlots ?? 1,
  };
  if (!Number.isInteger(resolved.cacheSlots) || resolved.cacheSlots < 1)
    throw new RangeError(`sim option cacheSlots must be an integer ≥ 1, got ${resolved.cacheSlots}`);
  if (!Number.isInteger(resolved.seed))
    throw new RangeError(`sim option seed must be an integer, got ${resolved.seed}`);
  checkKnob('noise', resolved.noise);
  checkKnob('stateShift', resolved.stateShift);
  checkKnob('localShift', resolved.localShift);
  checkKnob('localShiftRate', resolved.localShiftRate, 1);
  checkKnob('decodeShift', resolved.decodeShift);
  checkKnob('cacheHitShift', resolved.cacheHitShift);
  checkKnob('batchNoise', resolved.batchNoise);
  return resolved;
}

/** The simulated model's prefix cache and the fault vectors a reused prefix brings. */
interface SimCache {
  core: SimCore;
  decodeVec: Float64Array | null;
  cacheHitVec: Float64Array | null;
  cacheSlots: number;
  /** Most recently used first. */
  slots: SimSlot[];
}

/** Starts a sequence on the canonical tokens: the longest cached prefix it may reuse, and the slot it writes. */
function startSim(c: SimCache, prompt: readonly number[], o: StartOptions): ModelSequence {
  const { slots, decodeVec, cacheHitVec } = c;
  const logitsFrom = o.promptLogprobsFrom === undefined ? Infinity : o.promptLogprobsFrom - 1;
  let best = -1;
  let reused = 0;
  slots.forEach((s, i) => {
    const n = reusable(s.cells, prompt, o.cache, logitsFrom);
    if (n > reused) [best, reused] = [i, n];
  });
  const warm = reused > 0;
  const hit = best >= 0 ? (slots[best] as SimSlot) : null;
  // What a reused prefix brings: a decode state corrupted after an earlier prefill, or a
  // wrong restore. Positions computed on it move; a cold request's prefill is clean.
  const restored = plus(warm && hit!.corrupt ? decodeVec : null, warm ? cacheHitVec : null);
  const slot = claimSlot(c, hit, best, prompt, o);
  const run: SimRun = {
    prompt: restored,
    first: restored,
    later: plus(decodeVec, warm ? cacheHitVec : null),
    from: o.promptLogprobsFrom ?? 1,
    reused,
    slot,
  };
  const seq = new SimSequence(c.core, prompt, o.requestSeed, run, o.coResident);
  if (slot) {
    slot.cells = [...prompt];
    slot.corrupt = decodeVec !== null;
  }
  return seq;
}

/** The slot a request writes (null: it keeps nothing), the cache's order updated. */
function claimSlot(
  c: SimCache,
  hit: SimSlot | null,
  best: number,
  prompt: readonly number[],
  o: StartOptions,
): SimSlot | null {
  const { slots } = c;
  let slot: SimSlot | null = null;
  if (o.cache?.write) {
    // One slot (llama-server): the slot it reused, overwritten. Several (a radix or block cache,
    // as vLLM's and SGLang's): the entry it extends, or a new one beside the prefix it shared
    // (which stays for the requests that share it); the least recently used evicted.
    if (hit && (c.cacheSlots === 1 || extends_(hit.cells, prompt))) {
      slots.splice(best, 1);
      slot = hit;
    } else {
      if (hit) slots.unshift(...slots.splice(best, 1));
      if (slots.length >= c.cacheSlots) slots.pop();
      slot = { cells: [], corrupt: false };
    }
    slots.unshift(slot);
  } else if (slots.length > 0 && c.cacheSlots === 1) {
    // A request that keeps nothing empties the one slot (llama-server's cache_prompt: false).
    slots.length = 0;
  }
  return slot;
}

/**
 * Builds the simulated model: a deterministic toy language model over a few hundred tokens whose
 * next-token logits depend on the seed, the prompt and the tokens generated so far, with knobs for
 * run-to-run noise and for the bugs logprobe must detect.
 */
export function createSimModel(options: SimOptions = {}): SimModel {
  const resolved = resolveSimOptions(options);
  const knobs: SimKnobs = { ...resolved, seed: resolved.seed | 0 };
  const core = new SimCore(knobs);
  const cache: SimCache = {
    core,
    decodeVec: core.faultVector('decode'),
    cacheHitVec: core.faultVector('cache-hit'),
    cacheSlots: resolved.cacheSlots,
    slots: [],
  };
  const { slots } = cache;
  const split = resolved.tokenizerSplit;
  const startBase = (prompt: readonly number[], o: StartOptions): ModelSequence => startSim(cache, prompt, o);

  return {
    id: resolved.id,
    eosToken: EOS_ID,
    bosToken: null,
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
    start: (prompt, o) => {
      if (!split) return Promise.resolve(startBase(prompt, o));
      // The split model thinks in the canonical tokens of the same text, and spells them out
      // (no prefix cache: its slot would hold canonical tokens the client never sent).
      const canonical = tokenizeLongest(decoder.decode(concatBytes(prompt)));
      return Promise.resolve(
        new SplitSequence(
          startBase(canonical, { requestSeed: o.requestSeed, ...(o.coResident ? { coResident: o.coResident } : {}) }),
        ),
      );
    },
    flushCache: () => {
      const n = slots.reduce((sum, s) => sum + s.cells.length, 0);
      slots.length = 0;
      return n;
    },
  };
}

import type { CacheState, EngineModel, ModelSequence, NextTokenDistribution, StartOptions } from '../model.js';
import { reusable } from '../prefix-cache.js';
import { LogitDistribution } from './distribution.js';
import { combine } from './hash.js';
import { SimCore, type SimAdapterHead, type SimKnobs } from './logits.js';
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
  /**
   * Magnitude (nats) of a perturbation of the logprobs every decode step after the first reports,
   * while the token is still chosen from the exact distribution: speculative decoding keeps the
   * greedy token but reports wrong logprobs (vllm-project/vllm PR #38711, #53488). Prompt
   * logprobs and the first generated token (computed by the prefill) are exact.
   */
  specDecodeShift?: number;
  /**
   * Every decode step after the first reports logprob 0.0 (p = 1.0) for its token and 0.0 for
   * every top entry, while the tokens stay right (ggml-org/llama.cpp#27972: llama-server with
   * speculative decoding).
   */
  zeroDecodeLogprobs?: boolean;
  /**
   * Magnitude (nats) of the previous request's residue in a request's prompt logprobs: an
   * uninitialized buffer (vllm-project/vllm#42019, fix PR #42245 `torch.empty` → `torch.zeros`).
   * The same request gets other prompt logprobs after another request; decode is exact. The
   * previous request is the engine's, whichever model or adapter served it.
   */
  staleBuffer?: number;
  /**
   * LoRA adapters served beside the model (vLLM `--lora-modules`, SGLang `--lora-paths`): each
   * the base model plus its own seeded logit delta, with its own knobs (none inherited from the
   * base, so a fault can be confined to one adapter). `seed`, `tokenizerSplit` and `cacheSlots`
   * are the base's.
   */
  adapters?: readonly SimAdapterOptions[];
}

/** The knobs an adapter sets for itself (see `SimOptions`). */
export type SimKnobOptions = Pick<
  SimOptions,
  | 'noise'
  | 'stateShift'
  | 'localShift'
  | 'localShiftRate'
  | 'decodeShift'
  | 'cacheHitShift'
  | 'batchNoise'
  | 'specDecodeShift'
  | 'zeroDecodeLogprobs'
  | 'staleBuffer'
>;

/** One LoRA adapter of the simulated model. */
export interface SimAdapterOptions extends SimKnobOptions {
  /** The name requests use (`model`; SGLang `/generate`: `lora_path`), unique on the engine. */
  id: string;
  /** `/v1/models` `root`. Default `/adapters/<id>`. */
  path?: string;
  /** σ (nats) of the adapter's logit delta. Default 1: its greedy text differs from the base's. */
  scale?: number;
  /** Selects the delta. Default: derived from `id`, so adapters differ from each other. */
  key?: number;
  /**
   * Prompt logprobs are computed without the adapter's head (the base model's logits) while
   * generated tokens and their logprobs use it (vllm-project/vllm#51594: a LoRA `lm_head` delta
   * dropped from `prompt_logprobs`).
   */
  promptWithoutAdapter?: boolean;
}

/** The simulated model: an `EngineModel` plus the options it was built with. */
export interface SimModel extends EngineModel {
  readonly options: Readonly<Required<SimOptions>>;
  /** The adapters served beside it (none for an adapter). */
  readonly adapters: readonly SimModel[];
  /** For an adapter: its options, resolved. */
  readonly adapter?: Readonly<Required<SimAdapterOptions>>;
}

const decoder = new TextDecoder();

function checkKnob(name: string, value: number, max = Infinity): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > max) {
    throw new RangeError(`sim option ${name} must be a number in [0, ${max}], got ${value}`);
  }
}

function checkFlag(name: string, value: unknown): void {
  if (typeof value !== 'boolean')
    throw new RangeError(`sim option ${name} must be true or false, got ${String(value)}`);
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
  /** The previous request's prompt hash, whose residue prompt logprobs carry (`staleBuffer`), or null. */
  readonly stale: number | null;
  /** Prompt logprobs with the adapter's head (false: `promptWithoutAdapter`). */
  readonly promptHead: boolean;
}

/**
 * Reports other logprobs than those the token is chosen from: a decode step corrupted after the
 * verification that picked its token.
 */
class ReportedDistribution implements NextTokenDistribution {
  readonly ids: ArrayLike<number>;
  readonly logprobs: ArrayLike<number>;
  constructor(
    private readonly shown: NextTokenDistribution,
    readonly choice: NextTokenDistribution,
  ) {
    this.ids = shown.ids;
    this.logprobs = shown.logprobs;
  }
  logprobOf(id: number): number {
    return this.shown.logprobOf(id);
  }
}

/** Every logprob 0.0 (p = 1.0), the listed ids the exact ones: llama-server's speculative path. */
class ZeroLogprobs implements NextTokenDistribution {
  readonly ids: ArrayLike<number>;
  readonly logprobs: Float64Array;
  constructor(readonly choice: NextTokenDistribution) {
    this.ids = choice.ids;
    this.logprobs = new Float64Array(choice.ids.length);
  }
  logprobOf(): number {
    return 0;
  }
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
    const exact = new LogitDistribution(logits);
    // The first generated token comes from the prefill; speculation only runs in later steps.
    if (this.genPos === 0) return Promise.resolve(exact);
    if (this.core.knobs.zeroDecodeLogprobs) return Promise.resolve(new ZeroLogprobs(exact));
    const spec = this.core.specVector(this.hash, this.absPos);
    if (spec === null) return Promise.resolve(exact);
    const shown = new LogitDistribution(logits.map((x, t) => x + (spec[t] as number)));
    return Promise.resolve(new ReportedDistribution(shown, exact));
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
      const stale = this.run.stale === null ? null : this.core.staleVector(this.run.stale, i + 1);
      const state = plus(this.run.prompt, stale);
      out.push(
        new LogitDistribution(
          this.core.logits(h, i + 1 - n, i + 1, this.requestSeed, state, Infinity, batch, this.run.promptHead),
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

/** The knobs an adapter (or the base) sets, with their defaults, checked; `where` prefixes the names in errors. */
function resolveKnobs(o: SimKnobOptions, where = ''): Required<SimKnobOptions> {
  const k: Required<SimKnobOptions> = {
    noise: o.noise ?? 0,
    stateShift: o.stateShift ?? 0,
    localShift: o.localShift ?? 0,
    localShiftRate: o.localShiftRate ?? 0.1,
    decodeShift: o.decodeShift ?? 0,
    cacheHitShift: o.cacheHitShift ?? 0,
    batchNoise: o.batchNoise ?? 0,
    specDecodeShift: o.specDecodeShift ?? 0,
    zeroDecodeLogprobs: o.zeroDecodeLogprobs ?? false,
    staleBuffer: o.staleBuffer ?? 0,
  };
  for (const name of [
    'noise',
    'stateShift',
    'localShift',
    'decodeShift',
    'cacheHitShift',
    'batchNoise',
    'specDecodeShift',
    'staleBuffer',
  ] as const)
    checkKnob(where + name, k[name]);
  checkKnob(`${where}localShiftRate`, k.localShiftRate, 1);
  checkFlag(`${where}zeroDecodeLogprobs`, k.zeroDecodeLogprobs);
  return k;
}

/** The options with their defaults, checked: a bad one throws a RangeError. */
function resolveSimOptions(options: SimOptions): Required<SimOptions> {
  const resolved: Required<SimOptions> = {
    seed: options.seed ?? 0,
    ...resolveKnobs(options),
    tokenizerSplit: options.tokenizerSplit ?? false,
    id: options.id ?? 'logprobe-sim',
    cacheSlots: options.cacheSlots ?? 1,
    adapters: options.adapters ?? [],
  };
  if (!Number.isInteger(resolved.cacheSlots) || resolved.cacheSlots < 1)
    throw new RangeError(`sim option cacheSlots must be an integer ≥ 1, got ${resolved.cacheSlots}`);
  if (!Number.isInteger(resolved.seed))
    throw new RangeError(`sim option seed must be an integer, got ${resolved.seed}`);
  if (!Array.isArray(resolved.adapters))
    throw new RangeError(`sim option adapters must be an array, got ${String(resolved.adapters)}`);
  return resolved;
}

/** An adapter's options with their defaults, checked against the ids already taken. */
function resolveAdapter(a: SimAdapterOptions, i: number, taken: Set<string>): Required<SimAdapterOptions> {
  const where = `adapters[${i}].`;
  if (typeof a?.id !== 'string' || a.id === '')
    throw new RangeError(`sim option ${where}id must be a non-empty string, got ${String(a?.id)}`);
  if (taken.has(a.id)) throw new RangeError(`sim option ${where}id '${a.id}' is already served by this engine`);
  taken.add(a.id);
  const r: Required<SimAdapterOptions> = {
    ...resolveKnobs(a, where),
    id: a.id,
    path: a.path ?? `/adapters/${a.id}`,
    scale: a.scale ?? 1,
    key: a.key ?? idKey(a.id),
    promptWithoutAdapter: a.promptWithoutAdapter ?? false,
  };
  checkKnob(`${where}scale`, r.scale);
  if (!Number.isInteger(r.key)) throw new RangeError(`sim option ${where}key must be an integer, got ${r.key}`);
  checkFlag(`${where}promptWithoutAdapter`, r.promptWithoutAdapter);
  return r;
}

/** A 32-bit key from a string: each adapter id selects its own delta. */
function idKey(id: string): number {
  let h = 0x51a7e0aa;
  for (let i = 0; i < id.length; i++) h = combine(h, id.charCodeAt(i));
  return h;
}

/** The hash of a prompt's tokens, whatever model served it (`staleBuffer`'s source). */
function promptKey(prompt: readonly number[]): number {
  let h = 0x51a7e0bb;
  for (const id of prompt) h = combine(h, id);
  return h;
}

/** What the engine's models share: the previous request the engine served. */
interface SimEngine {
  lastPrompt: number | null;
}

/** The simulated model's prefix cache and the fault vectors a reused prefix brings. */
interface SimCache {
  core: SimCore;
  decodeVec: Float64Array | null;
  cacheHitVec: Float64Array | null;
  cacheSlots: number;
  /** Most recently used first. */
  slots: SimSlot[];
  engine: SimEngine;
  /** Prompt logprobs with the adapter's head (false: `promptWithoutAdapter`). */
  promptHead: boolean;
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
    stale: c.core.knobs.staleBuffer === 0 ? null : c.engine.lastPrompt,
    promptHead: c.promptHead,
  };
  // Every request counts as the previous one for the next, whichever model serves it.
  c.engine.lastPrompt = promptKey(prompt);
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
 * run-to-run noise and for the bugs logprobe must detect — and its adapters, if any.
 */
export function createSimModel(options: SimOptions = {}): SimModel {
  const resolved = resolveSimOptions(options);
  const taken = new Set([resolved.id]);
  const adapters = resolved.adapters.map((a, i) => resolveAdapter(a, i, taken));
  const engine: SimEngine = { lastPrompt: null };
  const built = adapters.map((a) =>
    buildSim(
      { ...resolved, ...a, id: a.id, adapters: [] },
      engine,
      { key: a.key, scale: a.scale },
      { parent: resolved.id, adapter: Object.freeze(a), adapters: [] },
    ),
  );
  return buildSim(resolved, engine, null, { adapters: built });
}

/** One model of the engine: the base (adapter null) or an adapter. */
function buildSim(
  resolved: Required<SimOptions>,
  engine: SimEngine,
  head: SimAdapterHead | null,
  extra: { parent?: string; adapter?: Readonly<Required<SimAdapterOptions>>; adapters: readonly SimModel[] },
): SimModel {
  const knobs: SimKnobs = { ...resolved, seed: resolved.seed | 0 };
  const core = new SimCore(knobs, head);
  const cache: SimCache = {
    core,
    decodeVec: core.faultVector('decode'),
    cacheHitVec: core.faultVector('cache-hit'),
    cacheSlots: resolved.cacheSlots,
    slots: [],
    engine,
    promptHead: !(extra.adapter?.promptWithoutAdapter ?? false),
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
    adapters: extra.adapters,
    ...(extra.parent !== undefined ? { parent: extra.parent, root: extra.adapter!.path, adapter: extra.adapter } : {}),
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
      // One engine, one flush: the adapters' cached prefixes go too.
      let n = slots.reduce((sum, s) => sum + s.cells.length, 0);
      slots.length = 0;
      for (const a of extra.adapters) n += a.flushCache!() as number;
      return n;
    },
  };
}

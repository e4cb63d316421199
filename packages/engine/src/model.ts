/**
 * The contract between a language model and the OpenAI-compatible engine server
 * (`src/openai-server.ts`). The simulated engine and the llama.cpp engine both implement
 * it, so request handling, SSE framing and the logprob wire shapes are written once.
 */

/** Log-probabilities of the next token, over the whole vocabulary or a prefix of it. */
export interface NextTokenDistribution {
  /**
   * Token ids, most likely first: the whole vocabulary or at least its 20 most likely tokens
   * (the OpenAI maximum of `top_logprobs`).
   */
  readonly ids: ArrayLike<number>;
  /** Natural-log probabilities, aligned with `ids`, non-increasing. */
  readonly logprobs: ArrayLike<number>;
  /**
   * Log-probability of any token id (including ids not in `ids`), or `-Infinity` when the model
   * cannot say. Used for the chosen token when it was sampled outside the listed prefix.
   */
  logprobOf(id: number): number;
  /**
   * The distribution the token is chosen from, when it is not the one reported: a fault that
   * corrupts only the reported logprobs (speculative decoding keeps the greedy token while the
   * logprobs it reports are wrong). Absent: the token is chosen from this distribution.
   */
  readonly choice?: NextTokenDistribution;
}

/**
 * How one request uses the prefix cache: one slot holding the previous request's evaluated
 * tokens (prompt + generated), like llama-server with `-np 1`. Every engine re-evaluates at
 * least the last prompt token (it needs that position's logits).
 */
export interface CacheUse {
  /** Reuse the cached state of the longest common prefix (off: vLLM `prompt_logprobs`, llama.cpp `cache_prompt: false`). */
  readonly read: boolean;
  /** Keep this request's tokens for the next one (off: llama.cpp `cache_prompt: false`, which empties the slot). */
  readonly write: boolean;
  /** Reuse whole blocks of this many tokens only (vLLM caches full KV blocks of 16). Default 1. */
  readonly block?: number;
  /** Reuse at most this many leading tokens (SGLang: never beyond `logprob_start_len`). */
  readonly limit?: number;
}

/** Options of {@link EngineModel.start}. */
export interface StartOptions {
  /** Lets a simulated model vary per request (run-to-run noise); real engines ignore it. */
  readonly requestSeed: number;
  /**
   * Prepend the model's BOS token (when it has one). Default true: the engine's historical
   * behaviour. False: the prompt is the exact token sequence, as vLLM, SGLang and llama-server
   * use token-id prompts (the server adds BOS to text prompts itself).
   */
  readonly addBos?: boolean;
  /** The prefix cache. Default: neither read nor written — a fresh state, nothing kept. */
  readonly cache?: CacheUse;
  /**
   * The first prompt index (≥ 1) whose logprob `promptDistributions()` will be asked for; the
   * positions before it may come from the prefix cache. Default: none announced (the model
   * prepares them only when `promptDistributions()` is called first).
   */
  readonly promptLogprobsFrom?: number;
  /**
   * How many sequences are in flight beside and including this one, asked at every step (a real
   * engine batches them, and batch composition moves logits unless its kernels are batch-invariant).
   * Absent: alone. The simulated model's `batchNoise` reads it; other models ignore it.
   */
  readonly coResident?: () => number;
}

/** What a request took from and left in the prefix-cache slot. */
export interface CacheState {
  /** Tokens of the request (BOS included when the model prepended it). */
  readonly cells: number;
  /** Leading tokens taken from the cache instead of evaluated. */
  readonly reused: number;
  /** Tokens held for this request now: reused + evaluated (llama-server's `n_past`). */
  readonly held: number;
}

/** One generation in progress: the prompt has been evaluated; tokens are appended one by one. */
export interface ModelSequence {
  /** The distribution of the next token given everything evaluated so far. */
  next(): Promise<NextTokenDistribution>;
  /** Appends the chosen token to the context. */
  push(id: number): Promise<void>;
  /**
   * Conditional distributions of prompt tokens f..n-1, f = `promptLogprobsFrom` (default 1):
   * entry k is the distribution that predicted prompt token f+k (for `echo` with logprobs,
   * vLLM `prompt_logprobs`, SGLang input logprobs). Optional: engines without it reject them.
   */
  promptDistributions?(): Promise<NextTokenDistribution[]>;
  /** The prefix-cache bookkeeping, valid after the first `next()` or `promptDistributions()`. */
  cacheState?(): CacheState;
  /** Frees the sequence. */
  dispose(): Promise<void> | void;
}

/** What `/v1/models` tells about a model file (llama-server's `meta`). */
export interface ModelCard {
  readonly path: string;
  readonly embedding: number;
  readonly parameters: number;
  readonly bytes: number;
}

/** A model behind the engine server. */
export interface EngineModel {
  /** The id reported by `/v1/models` and in responses. */
  readonly id: string;
  /**
   * Models served beside this one on the same engine: LoRA adapters (vLLM `--lora-modules
   * name=path`, SGLang `--lora-paths name=path`), each with `parent` set to this model's id. A
   * request's `model` (SGLang `/generate`: `lora_path`) picks which one computes.
   */
  readonly adapters?: readonly EngineModel[];
  /** For an adapter: the id of the base model it adapts (vLLM's and SGLang's `/v1/models` `parent`). */
  readonly parent?: string;
  /** For an adapter: where it was loaded from (`/v1/models` `root`). Default: its id. */
  readonly root?: string;
  /** The end-of-sequence token id, or null when the model has none. */
  readonly eosToken: number | null;
  /** The beginning-of-sequence token id, or null/absent when the model has none (the simulated model). */
  readonly bosToken?: number | null;
  /**
   * Number of token ids (valid ids are 0..vocabSize-1). Sampling with `temperature > 0` walks the
   * whole vocabulary through `logprobOf` when a distribution lists only a prefix.
   */
  readonly vocabSize: number;
  /** Text → token ids. */
  tokenize(text: string): number[];
  /** Text → token ids, special-token text (`<|endoftext|>`) parsed as the special token (llama.cpp's `parse_special`). */
  tokenizeSpecial?(text: string): number[];
  /** The text of one token (may be a partial UTF-8 sequence rendered with U+FFFD). */
  tokenText(id: number): string;
  /** The token as the vocabulary spells it (`Ġthe` for a byte-level BPE): vLLM's `token_strs`. */
  vocabPiece?(id: number): string;
  /** The raw bytes of one token. */
  tokenBytes(id: number): Uint8Array;
  /** The text of a token sequence (decoded together, so multi-byte characters survive splits). */
  detokenize(ids: readonly number[]): string;
  /** Starts a sequence on a prompt. */
  start(prompt: readonly number[], options: StartOptions): Promise<ModelSequence>;
  /**
   * Empties the prefix-cache slot (SGLang `/flush_cache`, vLLM `/reset_prefix_cache`,
   * llama-server's slot erase); returns the number of tokens it held. Never while a sequence runs.
   */
  flushCache?(): Promise<number> | number;
  /** The model file, for engines that report it. */
  readonly card?: ModelCard;
  /** Releases the model. */
  close?(): Promise<void> | void;
}

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
}

/** One generation in progress: the prompt has been evaluated; tokens are appended one by one. */
export interface ModelSequence {
  /** The distribution of the next token given everything evaluated so far. */
  next(): Promise<NextTokenDistribution>;
  /** Appends the chosen token to the context. */
  push(id: number): Promise<void>;
  /**
   * Conditional distributions of prompt tokens 1..n-1 (for `echo` with logprobs); entry i is the
   * distribution that predicted prompt token i+1. Optional: engines without it reject `echo`.
   */
  promptDistributions?(): Promise<NextTokenDistribution[]>;
  /** Frees the sequence (no prefix reuse between requests). */
  dispose(): Promise<void> | void;
}

/** A model behind the engine server. */
export interface EngineModel {
  /** The id reported by `/v1/models` and in responses. */
  readonly id: string;
  /** The end-of-sequence token id, or null when the model has none. */
  readonly eosToken: number | null;
  /**
   * Number of token ids (valid ids are 0..vocabSize-1). Sampling with `temperature > 0` walks the
   * whole vocabulary through `logprobOf` when a distribution lists only a prefix.
   */
  readonly vocabSize: number;
  /** Text → token ids. */
  tokenize(text: string): number[];
  /** The text of one token (may be a partial UTF-8 sequence rendered with U+FFFD). */
  tokenText(id: number): string;
  /** The raw bytes of one token. */
  tokenBytes(id: number): Uint8Array;
  /** The text of a token sequence (decoded together, so multi-byte characters survive splits). */
  detokenize(ids: readonly number[]): string;
  /**
   * Starts a sequence on a prompt. `requestSeed` lets a simulated model vary per request
   * (run-to-run noise); real engines ignore it.
   */
  start(prompt: readonly number[], options: { requestSeed: number }): Promise<ModelSequence>;
  /** Releases the model. */
  close?(): Promise<void> | void;
}

/**
 * One generation on a llama.cpp context sequence: prefill the prompt, then read the next-token
 * distribution and append the chosen token, step by step, through `controlledEvaluate`.
 */
import type { ControlledEvaluateInputItem, LlamaContextSequence, Token } from 'node-llama-cpp';
import type { ModelSequence, NextTokenDistribution } from '../model.js';

const WITH_PROBABILITIES = { generateNext: { probabilities: true } } as const;

/** node-llama-cpp brands token ids; ours are validated against the vocabulary by the model. */
const tok = (id: number): Token => id as Token;

/**
 * Converts node-llama-cpp's probability map (the float32 softmax of the raw logits at
 * temperature 0, sorted highest first) into logprobs. Zero probabilities (float32 underflow)
 * are left out of the list; `logprobOf` reports them as -Infinity.
 */
export function toDistribution(probabilities: ReadonlyMap<Token, number>, vocabSize: number): NextTokenDistribution {
  const ids: number[] = [];
  const logprobs: number[] = [];
  const byId = new Float64Array(vocabSize).fill(-Infinity);
  for (const [id, p] of probabilities) {
    if (!(p > 0)) continue;
    const lp = Math.log(p);
    ids.push(id);
    logprobs.push(lp);
    if (id >= 0 && id < vocabSize) byId[id] = lp;
  }
  return {
    ids,
    logprobs,
    logprobOf: (id: number) => (Number.isInteger(id) && id >= 0 && id < vocabSize ? (byId[id] ?? -Infinity) : -Infinity),
  };
}

/** What a sequence needs from its model. */
export interface SequenceOptions {
  readonly sequence: LlamaContextSequence;
  /** The prompt with BOS prepended: these are the KV cells, in order. */
  readonly cells: readonly number[];
  readonly vocabSize: number;
  /** KV cell to erase after prefill (the `drop-prompt-token` fault), or null. */
  readonly dropCell: number | null;
  /** False once a newer request took the context over. */
  readonly isCurrent: () => boolean;
}

/** A {@link ModelSequence} over a llama.cpp context sequence whose history was cleared. */
export class LlamaSequence implements ModelSequence {
  private prefilled = false;
  private echo: NextTokenDistribution[] | null = null;
  private current: NextTokenDistribution | null = null;
  private pending: number | null = null;
  /** Tokens evaluated after the prompt, for replaying the state (see `promptDistributions`). */
  private readonly generated: number[] = [];
  private disposed = false;

  constructor(private readonly o: SequenceOptions) {}

  private check(): void {
    if (this.disposed) throw new Error('llama sequence used after dispose()');
    if (!this.o.isCurrent()) throw new Error('llama sequence superseded: the engine serves one request at a time');
  }

  private async evaluate(items: ControlledEvaluateInputItem[]): Promise<NextTokenDistribution[]> {
    const { sequence, vocabSize } = this.o;
    if (sequence.nextTokenIndex + items.length > sequence.contextSize) {
      // node-llama-cpp would silently shift the context (erase its beginning), changing numerics.
      throw new Error(`context full: ${sequence.contextSize} tokens`);
    }
    const results = await sequence.controlledEvaluate(items);
    const out: NextTokenDistribution[] = [];
    items.forEach((item, i) => {
      if (!Array.isArray(item)) return;
      const probabilities = results[i]?.next.probabilities;
      if (probabilities === undefined) throw new Error('llama.cpp returned no probabilities');
      out.push(toDistribution(probabilities, vocabSize));
    });
    return out;
  }

  /**
   * Evaluates the prompt. Cell 0 is BOS, so cells 1..n-1 predict prompt tokens 1..n-1 (the echo
   * distributions) and the last cell predicts the first generated token. With `dropCell`, the
   * prompt up to the last token is evaluated, the cell is erased, and the last token is
   * evaluated without it, so that every generated token misses it.
   */
  private async prefill(withEcho: boolean): Promise<void> {
    this.prefilled = true;
    const { cells, dropCell, sequence } = this.o;
    const last = cells.length - 1;
    const items: ControlledEvaluateInputItem[] = cells.map((id, c) =>
      c === last || (withEcho && c >= 1) ? [tok(id), WITH_PROBABILITIES] : tok(id),
    );
    if (dropCell !== null && dropCell < last) {
      const head = await this.evaluate(items.slice(0, last));
      await sequence.eraseContextTokenRanges([{ start: dropCell, end: dropCell + 1 }]);
      const [tail] = await this.evaluate(items.slice(last));
      this.echo = withEcho ? head : null;
      this.current = tail ?? null;
    } else {
      const dists = await this.evaluate(items);
      this.current = dists.pop() ?? null;
      this.echo = withEcho ? dists : null;
      // Losing the last prompt token: the first step still saw it, later steps do not.
      if (dropCell === last) await sequence.eraseContextTokenRanges([{ start: dropCell, end: dropCell + 1 }]);
    }
  }

  /**
   * Echo distributions. Cheapest before the first `next()`; afterwards the prompt is evaluated
   * again with logits at every position and the generated tokens replayed one by one, with the
   * same batch structure as the first time, so the KV cache (and every later logprob) comes back
   * bit for bit.
   */
  async promptDistributions(): Promise<NextTokenDistribution[]> {
    this.check();
    if (!this.prefilled) await this.prefill(true);
    if (this.echo === null) {
      await this.o.sequence.clearHistory();
      await this.prefill(true);
      for (const id of this.generated) {
        const [dist] = await this.evaluate([[tok(id), WITH_PROBABILITIES]]);
        this.current = dist ?? null;
      }
    }
    return this.echo ?? [];
  }

  async next(): Promise<NextTokenDistribution> {
    this.check();
    if (!this.prefilled) await this.prefill(false);
    if (this.pending !== null) {
      const [dist] = await this.evaluate([[tok(this.pending), WITH_PROBABILITIES]]);
      this.generated.push(this.pending);
      this.pending = null;
      this.current = dist ?? null;
    }
    if (this.current === null) throw new Error('llama.cpp returned no distribution');
    return this.current;
  }

  async push(id: number): Promise<void> {
    this.check();
    if (!Number.isInteger(id) || id < 0 || id >= this.o.vocabSize) throw new RangeError(`token id ${id} is outside the vocabulary`);
    if (!this.prefilled) await this.prefill(false);
    // Appending twice without next() in between: evaluate the first one now, without logits.
    if (this.pending !== null) {
      await this.evaluate([tok(this.pending)]);
      this.generated.push(this.pending);
    }
    this.pending = id;
  }

  dispose(): void {
    this.disposed = true;
  }
}

/**
 * One generation on the llama engine's slot: prefill the prompt (reusing the cached prefix when
 * the request may), then read the next-token distribution and append the chosen token, step by
 * step, through `controlledEvaluate`. The KV-cell faults act here, each at its moment.
 */
import type { ControlledEvaluateInputItem, Token } from 'node-llama-cpp';
import type { CacheState, CacheUse, ModelSequence, NextTokenDistribution } from '../model.js';
import { reusable } from '../prefix-cache.js';
import type { LlamaSlot, SlotClaim } from './slot.js';

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
    logprobOf: (id: number) =>
      Number.isInteger(id) && id >= 0 && id < vocabSize ? (byId[id] ?? -Infinity) : -Infinity,
  };
}

/** The KV cells (indices into the request's tokens) each fault erases, null when off or out of range. */
export interface CellFaults {
  /** `drop-prompt-token`: erased before the last prompt token is evaluated. */
  readonly drop: number | null;
  /** `decode-state`: erased once the whole prompt is evaluated. */
  readonly decodeState: number | null;
  /** `cache-hit`: erased from a reused prefix before the rest is evaluated. */
  readonly cacheHit: number | null;
}

/** What a sequence needs from its model. */
export interface SequenceOptions {
  readonly slot: LlamaSlot;
  readonly claim: SlotClaim;
  /** The request's tokens (BOS first when the model prepended it): these become the KV cells. */
  readonly cells: readonly number[];
  readonly vocabSize: number;
  readonly faults: CellFaults;
  readonly cache: CacheUse | undefined;
  /** The cell whose distribution predicts the first prompt token `promptDistributions()` returns. */
  readonly echoCell: number;
  /** Whether the prompt distributions were announced (`promptLogprobsFrom`): prefill computes them. */
  readonly echoAnnounced: boolean;
  readonly isClosed: () => boolean;
}

/** A {@link ModelSequence} over the llama engine's slot. */
export class LlamaSequence implements ModelSequence {
  private prefilled = false;
  private echo: NextTokenDistribution[] | null = null;
  private current: NextTokenDistribution | null = null;
  private pending: number | null = null;
  private reused = 0;
  /** Tokens evaluated after the prompt, for replaying the state (see `promptDistributions`). */
  private readonly generated: number[] = [];
  private disposed = false;

  constructor(private readonly o: SequenceOptions) {}

  private check(): void {
    if (this.disposed) throw new Error('llama sequence used after dispose()');
    if (this.o.isClosed()) throw new Error('llama model is closed');
    if (!this.o.slot.owns(this.o.claim))
      throw new Error('llama sequence superseded: the engine serves one request at a time');
  }

  private async evaluate(items: ControlledEvaluateInputItem[]): Promise<NextTokenDistribution[]> {
    const results = await this.o.slot.evaluate(items);
    const out: NextTokenDistribution[] = [];
    items.forEach((item, i) => {
      if (!Array.isArray(item)) return;
      const probabilities = results[i]?.next.probabilities;
      if (probabilities === undefined) throw new Error('llama.cpp returned no probabilities');
      out.push(toDistribution(probabilities, this.o.vocabSize));
    });
    return out;
  }

  /**
   * Evaluates the prompt after the reused prefix. The last cell predicts the first generated
   * token; with `withEcho`, cells from `echoCell` on also give their distributions (so the
   * cache is read only before them). The faults act in order: a warm request loses the
   * `cache-hit` cell of what it restored; `drop-prompt-token` is lost before the last prompt
   * token is evaluated (every generated token misses it); `decode-state` once the prompt is
   * evaluated (its logits are clean, every later evaluation on this state misses it).
   */
  private async prefill(withEcho: boolean, fresh = false): Promise<void> {
    this.prefilled = true;
    const { cells, slot, faults, echoCell } = this.o;
    const last = cells.length - 1;
    const reuse = fresh ? 0 : reusable(slot.cached, cells, this.o.cache, withEcho ? echoCell : Infinity);
    await slot.begin(reuse, this.o.cache?.write ?? false);
    this.reused = reuse;
    if (faults.cacheHit !== null && faults.cacheHit < reuse) await slot.erase(faults.cacheHit);
    const drop = faults.drop;
    if (drop !== null && drop < reuse) await slot.erase(drop);
    const items: ControlledEvaluateInputItem[] = [];
    for (let c = reuse; c <= last; c++) {
      const id = tok(cells[c] as number);
      items.push(c === last || (withEcho && c >= echoCell) ? [id, WITH_PROBABILITIES] : id);
    }
    if (drop !== null && drop >= reuse && drop < last) {
      const head = await this.evaluate(items.slice(0, last - reuse));
      await slot.erase(drop);
      const [tail] = await this.evaluate(items.slice(last - reuse));
      this.echo = withEcho ? head : null;
      this.current = tail ?? null;
    } else {
      const dists = await this.evaluate(items);
      this.current = dists.pop() ?? null;
      this.echo = withEcho ? dists : null;
      // Losing the last prompt token: the first step still saw it, later steps do not.
      if (drop === last) await slot.erase(last);
    }
    if (faults.decodeState !== null && faults.decodeState <= last) await slot.erase(faults.decodeState);
  }

  /**
   * Prompt distributions. Cheapest announced or before the first `next()`; afterwards the prompt
   * is evaluated again from scratch with logits at every position and the generated tokens
   * replayed one by one, with the same batch structure as the first time, so the KV cache (and
   * every later logprob) comes back bit for bit.
   */
  async promptDistributions(): Promise<NextTokenDistribution[]> {
    this.check();
    if (!this.prefilled) await this.prefill(true);
    if (this.echo === null) {
      await this.prefill(true, true);
      for (const id of this.generated) {
        const [dist] = await this.evaluate([[tok(id), WITH_PROBABILITIES]]);
        this.current = dist ?? null;
      }
    }
    return this.echo ?? [];
  }

  async next(): Promise<NextTokenDistribution> {
    this.check();
    if (!this.prefilled) await this.prefill(this.o.echoAnnounced);
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
    if (!Number.isInteger(id) || id < 0 || id >= this.o.vocabSize)
      throw new RangeError(`token id ${id} is outside the vocabulary`);
    if (!this.prefilled) await this.prefill(this.o.echoAnnounced);
    // Appending twice without next() in between: evaluate the first one now, without logits.
    if (this.pending !== null) {
      await this.evaluate([tok(this.pending)]);
      this.generated.push(this.pending);
    }
    this.pending = id;
  }

  cacheState(): CacheState {
    return {
      cells: this.o.cells.length,
      reused: this.reused,
      held: this.o.slot.owns(this.o.claim) ? this.o.slot.length : this.reused,
    };
  }

  dispose(): void {
    this.disposed = true;
  }
}

/**
 * The llama engine's one slot (llama-server with `-np 1`): the context sequence whose KV cache
 * survives between requests when the prefix cache is on, and the tokens the server believes it
 * holds. The two can differ on purpose: a fault erases a KV cell (`eraseContextTokenRanges`,
 * which also shifts the later cells down one position) while the server's list still names the
 * token, so a request that reuses the prefix runs on a state that misses it — as a real engine
 * whose cache lost a cell would, without knowing.
 */
import type { ControlledEvaluateInputItem, LlamaContextSequence, Token } from 'node-llama-cpp';

/** One request's claim on the slot; a newer claim supersedes it. */
export type SlotClaim = number;

/** The context sequence plus the server's view of what it holds. */
export class LlamaSlot {
  /** The tokens the slot holds as the server sees them (llama-server's `cache_tokens`). */
  private cells: number[] = [];
  /** Indices into `cells` whose KV cell a fault erased, ascending. */
  private holes: number[] = [];
  /** Whether the last request left its tokens for the next one to reuse. */
  private kept = false;
  private owner: SlotClaim = 0;

  constructor(readonly sequence: LlamaContextSequence) {}

  /** Takes the slot for a new request. */
  claim(): SlotClaim {
    return ++this.owner;
  }

  /** Whether `claim` is still the current request. */
  owns(claim: SlotClaim): boolean {
    return claim === this.owner;
  }

  /** What a new request may reuse from: the previous request's tokens if it kept them. */
  get cached(): readonly number[] {
    return this.kept ? this.cells : [];
  }

  /** Tokens held now (erased cells included: the server does not know they are gone). */
  get length(): number {
    return this.cells.length;
  }

  /** Starts a request: keeps the first `reuse` tokens, drops the rest; `keep` says whether the next request may reuse this one. */
  async begin(reuse: number, keep: boolean): Promise<void> {
    this.kept = keep;
    if (reuse === 0) {
      await this.sequence.clearHistory();
      this.cells = [];
      this.holes = [];
      return;
    }
    await this.sequence.eraseContextTokenRanges([{ start: this.physical(reuse), end: this.sequence.nextTokenIndex }]);
    this.cells.length = reuse;
    this.holes = this.holes.filter((h) => h < reuse);
  }

  /** Whether token `index` is held and its KV cell still there. */
  has(index: number): boolean {
    return index < this.cells.length && !this.holes.includes(index);
  }

  /** Erases the KV cell of token `index` (a fault); the server's list keeps the token. */
  async erase(index: number): Promise<void> {
    if (!this.has(index)) return;
    const at = this.physical(index);
    await this.sequence.eraseContextTokenRanges([{ start: at, end: at + 1 }]);
    this.holes.push(index);
    this.holes.sort((a, b) => a - b);
  }

  /** Evaluates `items` after what the slot holds; their tokens join it. */
  async evaluate(
    items: readonly ControlledEvaluateInputItem[],
  ): Promise<Awaited<ReturnType<LlamaContextSequence['controlledEvaluate']>>> {
    const { sequence } = this;
    if (sequence.nextTokenIndex + items.length > sequence.contextSize) {
      // node-llama-cpp would silently shift the context (erase its beginning), changing numerics.
      throw new Error(`context full: ${sequence.contextSize} tokens`);
    }
    const results = await sequence.controlledEvaluate([...items]);
    for (const item of items) this.cells.push(Array.isArray(item) ? (item[0] as Token) : (item as Token));
    return results;
  }

  /** Empties the slot; returns how many tokens it held. */
  async flush(): Promise<number> {
    const n = this.cells.length;
    await this.sequence.clearHistory();
    this.cells = [];
    this.holes = [];
    this.kept = false;
    return n;
  }

  /** The KV position of token `index`: erased cells before it shifted it down. */
  private physical(index: number): number {
    let below = 0;
    for (const h of this.holes) if (h < index) below++;
    return index - below;
  }
}

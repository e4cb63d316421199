import type { ModelSequence, NextTokenDistribution } from '../model.js';
import { LogitDistribution } from './distribution.js';
import { BYTE_BASE, EOS_ID, VOCAB } from './vocab.js';

/** How much more likely the next byte of a word in progress is than anything else (nats). */
const SPELLING_MARGIN = 5;

/**
 * A sequence that emits single-byte tokens while the model underneath thinks in its canonical
 * multi-byte tokens — the same text under another tokenizer. At a token boundary each byte gets
 * the best logit of the canonical tokens it starts (max-pooling keeps the argmax, so greedy text
 * is unchanged); inside a token the next byte of the word in progress is confident.
 */
export class SplitSequence implements ModelSequence {
  private pending: number[] = [];
  private spelled: number[] = [];
  private current = -1;
  private pooled = new Float64Array(0);
  private best = new Int32Array(0);

  constructor(private readonly base: ModelSequence) {}

  async next(): Promise<NextTokenDistribution> {
    if (this.pending.length === 0) {
      const d = await this.base.next();
      const pooled = new Float64Array(VOCAB.size).fill(-Infinity);
      const best = new Int32Array(VOCAB.size).fill(-1);
      for (let t = 0; t < VOCAB.size; t++) {
        const lp = d.logprobOf(t);
        if (lp === -Infinity) continue;
        const first = t === EOS_ID ? EOS_ID : BYTE_BASE + ((VOCAB.bytes[t] as Uint8Array)[0] as number);
        if (lp > (pooled[first] as number)) {
          pooled[first] = lp;
          best[first] = t;
        }
      }
      this.pooled = pooled;
      this.best = best;
      return new LogitDistribution(Float64Array.from(pooled));
    }
    const logits = Float64Array.from(this.pooled);
    let max = -Infinity;
    for (const l of logits) if (l > max) max = l;
    logits[this.pending[0] as number] = max + SPELLING_MARGIN;
    return new LogitDistribution(logits);
  }

  async push(id: number): Promise<void> {
    if (this.pending.length === 0) {
      const t = this.best[id] ?? -1;
      const bytes = VOCAB.bytes[t];
      if (t < 0 || t === EOS_ID || !bytes || bytes.length === 1) {
        await this.base.push(id);
        return;
      }
      this.current = t;
      this.spelled = [id];
      this.pending = Array.from(bytes.subarray(1), (b) => BYTE_BASE + b);
      return;
    }
    if (id === this.pending[0]) {
      this.pending.shift();
      this.spelled.push(id);
      if (this.pending.length === 0) await this.base.push(this.current);
      return;
    }
    // Sampling left the word: the model underneath sees the bytes that were really emitted.
    for (const b of this.spelled) await this.base.push(b);
    await this.base.push(id);
    this.pending = [];
    this.spelled = [];
  }

  dispose(): Promise<void> | void {
    return this.base.dispose();
  }
}

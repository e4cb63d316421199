/**
 * The generation loop shared by both routes: choose a token, decode its text, watch for stop
 * strings, and hand finished tokens to the route's writer. Text that might still turn into a
 * stop string is held back, so a stream never shows text the non-streamed answer would cut.
 */
import type { EngineModel, ModelSequence, NextTokenDistribution } from './model.js';
import type { SamplingParams } from './request.js';
import { setTimeout as delay } from 'node:timers/promises';
import { chooseToken, type Rng } from './sampling.js';

/** One of the most likely tokens at a position. */
export interface TopEntry {
  readonly id: number;
  readonly logprob: number;
}

/** One generated token as the routes report it. */
export interface TokenStep {
  readonly id: number;
  /** The text this token adds (UTF-8 decoded across tokens; '' inside a multi-byte character; cut at a stop string). */
  readonly text: string;
  /** Offset of `text` in the generated text, in UTF-16 units. */
  readonly offset: number;
  readonly logprob: number;
  /** The `topN` most likely tokens at this position, or null when logprobs were not asked for. */
  readonly top: readonly TopEntry[] | null;
  /** The whole distribution, with `keepDistributions` (SGLang's `token_ids_logprob`). */
  readonly dist?: NextTokenDistribution;
}

/** How a generation ended. */
export type FinishReason = 'stop' | 'length';

/** What `generate` needs. */
export interface GenerateOptions {
  readonly model: EngineModel;
  readonly seq: ModelSequence;
  readonly params: SamplingParams;
  /** Top entries to capture per position; null = no logprobs at all. */
  readonly topN: number | null;
  readonly rng: Rng;
  readonly signal: AbortSignal;
  /** Receives tokens in order, as soon as they are final; may return a promise (backpressure). */
  readonly emit: (steps: TokenStep[]) => void | Promise<void>;
  /** Yield to the event loop every this many tokens, so aborts and other sockets get a turn. Default 16. */
  readonly yieldEvery?: number;
  /** Pause this long after every token (a realistic decode pace for streams and abort tests). Default 0. */
  readonly tokenDelayMs?: number;
  /** Attach each step's distribution to it (`TokenStep.dist`). Default false. */
  readonly keepDistributions?: boolean;
  /**
   * What the step reports instead of the model's distribution (vLLM's `--logprobs-mode`: logits,
   * processed values); the token is still chosen from the model's own. Default: the distribution.
   */
  readonly report?: (dist: NextTokenDistribution) => NextTokenDistribution;
}

/** The outcome of a generation. */
export interface GenerateResult {
  readonly finishReason: FinishReason;
  /** Tokens the model produced (including any cut by a stop string; not the end-of-sequence token). */
  readonly completionTokens: number;
  /** The end-of-sequence token that ended it (SGLang and llama-server report it), or absent. */
  readonly eos?: Omit<TokenStep, 'text' | 'offset'>;
  /** The stop string that ended it (vLLM's `stop_reason`), or absent. */
  readonly stopString?: string;
}

/** Thrown (as `signal.reason` when unset) when the client went away mid-generation. */
export class GenerationAborted extends Error {
  override readonly name = 'GenerationAborted';
}

/** The top `n` entries of a distribution. */
export function topEntries(dist: NextTokenDistribution, n: number): TopEntry[] {
  const k = Math.min(n, dist.ids.length);
  const out = new Array<TopEntry>(k);
  for (let i = 0; i < k; i++) out[i] = { id: dist.ids[i] as number, logprob: dist.logprobs[i] as number };
  return out;
}

function findStop(text: string, stops: readonly string[], from: number): { at: number; stop: string } | null {
  let best: { at: number; stop: string } | null = null;
  for (const s of stops) {
    const i = text.indexOf(s, from);
    if (i >= 0 && (best === null || i < best.at)) best = { at: i, stop: s };
  }
  return best;
}

/** The end of the text that cannot be the start of a stop string still being completed. */
function safeEnd(text: string, stops: readonly string[], maxStop: number): number {
  for (let j = Math.max(0, text.length - maxStop + 1); j < text.length; j++) {
    const tail = text.slice(j);
    if (stops.some((s) => s.startsWith(tail))) return j;
  }
  return text.length;
}

/** A step's top entries (null: no logprobs asked) and, when kept, its distribution. */
function stepExtras(
  o: GenerateOptions,
  dist: NextTokenDistribution,
): { top: TopEntry[] | null; dist?: NextTokenDistribution } {
  return { top: o.topN === null ? null : topEntries(dist, o.topN), ...(o.keepDistributions ? { dist } : {}) };
}

/** The held steps before a stop string at `hit`, the one it starts in cut to end there. */
function cutAt(held: readonly TokenStep[], text: string, hit: number): TokenStep[] {
  return held
    .filter((s) => s.offset < hit)
    .map((s) => (s.offset + s.text.length > hit ? { ...s, text: text.slice(s.offset, hit) } : s));
}

const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Runs one generation to `max_tokens`, end-of-sequence or a stop string. */
export async function generate(o: GenerateOptions): Promise<GenerateResult> {
  const { model, seq, params, signal } = o;
  const stops = params.stop;
  const maxStop = stops.reduce((m, s) => Math.max(m, s.length), 0);
  const yieldEvery = o.yieldEvery ?? 16;
  const decoder = new TextDecoder();
  const held: TokenStep[] = [];
  let text = '';
  let count = 0;

  const release = async (upTo: number): Promise<void> => {
    let i = 0;
    while (i < held.length && (held[i] as TokenStep).offset + (held[i] as TokenStep).text.length <= upTo) i++;
    if (i > 0) await o.emit(held.splice(0, i));
  };

  while (count < params.maxTokens) {
    if (signal.aborted) throw signal.reason ?? new GenerationAborted('the client went away');
    const dist = await seq.next();
    // A fault may report other logprobs than those the token is chosen from (`choice`).
    const id = chooseToken(dist.choice ?? dist, params, o.rng, model.vocabSize);
    const shown = o.report ? o.report(dist) : dist;
    if (id === model.eosToken) {
      await release(Infinity);
      const eos = { id, logprob: shown.logprobOf(id), ...stepExtras(o, shown) };
      return { finishReason: 'stop', completionTokens: count, eos };
    }
    count++;
    const piece = decoder.decode(model.tokenBytes(id), { stream: true });
    const step: TokenStep = {
      id,
      text: piece,
      offset: text.length,
      logprob: shown.logprobOf(id),
      ...stepExtras(o, shown),
    };
    text += piece;
    held.push(step);
    if (maxStop > 0) {
      const found = findStop(text, stops, Math.max(0, step.offset - maxStop + 1));
      if (found !== null) {
        const kept = cutAt(held, text, found.at);
        held.length = 0;
        if (kept.length > 0) await o.emit(kept);
        return { finishReason: 'stop', completionTokens: count, stopString: found.stop };
      }
      await release(safeEnd(text, stops, maxStop));
    } else {
      await release(Infinity);
    }
    if (count >= params.maxTokens) break;
    await seq.push(id);
    if (o.tokenDelayMs) await delay(o.tokenDelayMs, undefined, { signal });
    else if (count % yieldEvery === 0) await yieldToLoop();
  }
  // A trailing partial UTF-8 character is dropped, as the tokens' concatenated text has none.
  await release(Infinity);
  return { finishReason: 'length', completionTokens: count };
}

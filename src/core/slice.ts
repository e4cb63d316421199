/**
 * Slices of traffic (docs/detection.md "Slices"): the request's `model` — under vLLM's and
 * SGLang's multi-LoRA serving an adapter's name — and whether the candidate's copy read from its
 * prefix cache. Every detector and the `auto` floor run per model, so a fault confined to one
 * adapter is judged on that adapter's pairs alone instead of being diluted by the others; the
 * cache split says whether shifts concentrate on cache hits.
 */

/** The model slice of names outside `slices.models`, or past the first `slices.maxModels` seen. */
export const OTHER_MODEL = 'other';
/** The model slice of a request that names no model (a string `model` field). */
export const NO_MODEL = 'none';

/** Whether the candidate's copy read part of its prompt from the prefix cache, as its engine reported. */
export type CacheSplit = 'hit' | 'miss' | 'unknown';
export const CACHE_SPLITS: readonly CacheSplit[] = ['hit', 'miss', 'unknown'];

/** Where a pair belongs: its model slice and its cache split. */
export interface Slice {
  model: string;
  cache: CacheSplit;
}

/** The cache split of a count of prompt tokens served from the cache (null: not reported). */
export function cacheSplit(cachedTokens: number | null): CacheSplit {
  if (cachedTokens === null) return 'unknown';
  return cachedTokens > 0 ? 'hit' : 'miss';
}

/** The longest model name that becomes a label value of its own (served names and adapter names are far shorter). */
export const MAX_NAME = 128;
// eslint-disable-next-line no-control-regex -- the point: control characters never reach a label
const CONTROL = /[\u0000-\u001f\u007f]/;

/** How models become slices (the config's `slices`). */
export interface SliceOptions {
  /** The allow-list: these names are slices, every other is `other`. Null: the first `maxModels` names seen. */
  models: readonly string[] | null;
  maxModels: number;
}

/**
 * Names a request's model slice, within a bound: the allow-list's names, or the first
 * `maxModels` distinct names seen; everything else is {@link OTHER_MODEL}, and `onOverflow` is
 * told each time a name is folded in (`logprobe_slice_overflow_total`). So an unbounded stream of
 * model names cannot grow the label's values past `maxModels + 2` (with `other` and `none`).
 */
export class Slicer {
  private readonly seen = new Set<string>();
  private readonly allowed: ReadonlySet<string> | null;

  constructor(
    private readonly options: SliceOptions,
    private readonly onNew?: (model: string) => void,
    private readonly onOverflow?: (model: string) => void,
  ) {
    this.allowed = options.models === null ? null : new Set(options.models);
  }

  /**
   * The slices known from the start: the allow-list's, and `other` (always a possible value: its
   * series exist at 0 before any request, so rules and panels that read `model` see one).
   */
  initial(): string[] {
    return [...(this.options.models ?? []), OTHER_MODEL];
  }

  /**
   * The slice of a mirrored body's `model` field. A name a label should not carry (longer than
   * {@link MAX_NAME}, or with control characters) is `other`, as a name past the bound is.
   */
  model(body: Readonly<Record<string, unknown>>): string {
    const name = body.model;
    if (typeof name !== 'string' || name === '') return NO_MODEL;
    if (name.length > MAX_NAME || CONTROL.test(name)) {
      this.onOverflow?.(name);
      return OTHER_MODEL;
    }
    if (this.allowed !== null) {
      if (this.allowed.has(name)) return name;
      this.onOverflow?.(name);
      return OTHER_MODEL;
    }
    if (this.seen.has(name)) return name;
    if (this.seen.size >= this.options.maxModels) {
      this.onOverflow?.(name);
      return OTHER_MODEL;
    }
    this.seen.add(name);
    this.onNew?.(name);
    return name;
  }
}

import { matchPosition, scratch } from './match.js';
import type { PositionRow, TokenStep } from './types.js';

/**
 * The health figures of a pair (docs/format.md, `health`): the mean per-position KL estimate,
 * the relative probability error of the chosen token `|p_c − p_b| / p_b`, and the largest
 * absolute logprob difference over each side's top-10 — what the logits and distribution layers
 * of the alignment gate (src/core/gates.ts) check, measured on every pair whatever its verdict. Pure.
 */

/** The health thresholds: KL < 0.05, mean relative error < 0.03, max < 0.15. */
export const HEALTH_LIMITS = Object.freeze({ kl: 0.05, relErrMean: 0.03, relErrMax: 0.15 });

/** How many entries of each side's top list the logits figure reads: the top-10. */
export const LOGITS_TOP = 10;

/** A mean and a maximum over `n` positions (both `null` when `n` is 0). */
export interface Figure {
  mean: number | null;
  max: number | null;
  n: number;
}

/** Which positions a figure was read on: free-running (`0..d`), teacher-forced continuation, or the prompt's own. */
export type PositionBlock = 'free' | 'scored' | 'prompt';

/** The largest |lp_c(t) − lp_b(t)| over the tokens of each side's top-10, over every position the pair has. */
export interface LogitsFigure {
  /** The largest difference, nats; `null` when no position had a top list on both sides. */
  max: number | null;
  /** Positions read. */
  n: number;
  /** The shortest top list read (at most 10): below 10 the figure is over fewer entries than the top-10 it is defined on. */
  topK: number | null;
  /** Where the largest difference is. */
  at: { block: PositionBlock; i: number } | null;
  /**
   * True when the largest difference is a lower bound: a token in one side's top-10 that the
   * other side does not list at all (its logprob there is at most the other side's smallest).
   */
  lowerBound: boolean;
}

/** the documented `health` block of a comparison. */
export interface Health {
  /** The positions KL and relative error are taken over: the free-running `0..d`, or the teacher-forced continuation when it was scored. */
  over: 'free' | 'scored';
  /** Positions in that set. */
  positions: number;
  /** Per-position KL(baseline ‖ candidate) estimate (`positions[].kl`). */
  kl: Figure;
  /** `|p_c − p_b| / p_b = |exp(lp_c − lp_b) − 1|` of the chosen token, where both sides chose it and know its logprob. */
  relErr: Figure;
  /** Over the free-running positions, and the scored and prompt positions when there are any. */
  logits: LogitsFigure;
}

/** Accumulates a {@link Figure}. */
export class FigureSum {
  private sum = 0;
  private n = 0;
  private top = -Infinity;

  add(x: number | null | undefined): void {
    if (x === null || x === undefined || !Number.isFinite(x)) return;
    this.sum += x;
    this.n++;
    if (x > this.top) this.top = x;
  }

  /** Adds a whole figure (means weighted by their counts). */
  merge(f: Figure): void {
    if (f.n === 0 || f.mean === null || f.max === null) return;
    this.sum += f.mean * f.n;
    this.n += f.n;
    if (f.max > this.top) this.top = f.max;
  }

  figure(): Figure {
    return this.n === 0 ? { mean: null, max: null, n: 0 } : { mean: this.sum / this.n, max: this.top, n: this.n };
  }
}

/** The chosen token's relative probability error for a logprob difference `lp_c − lp_b`. */
export function relativeError(diff: number): number {
  return Math.abs(Math.expm1(diff));
}

const NO_LOGITS: LogitsFigure = Object.freeze({
  max: null,
  n: 0,
  topK: null,
  at: null,
  lowerBound: false,
}) as LogitsFigure;

/**
 * The logits figure over positions `0..n−1` of two step lists (the same context at each index:
 * free-running up to the divergence, or teacher-forced). `byId` matches tokens by id (both sides
 * carry ids on every step and top entry), else by text — as `compare` does.
 */
export function logitsFigure(
  cs: readonly TokenStep[],
  bs: readonly TokenStep[],
  n: number,
  byId: boolean,
  block: PositionBlock,
): LogitsFigure {
  const sum = new LogitsSum(block);
  for (let i = 0; i < n; i++) {
    const c = cs[i]!;
    const b = bs[i]!;
    const kc = c.top.length;
    const kb = b.top.length;
    if (kc === 0 || kb === 0) continue;
    matchPosition(c, b, byId);
    sum.add(i, kc, kb);
  }
  return sum.figure();
}

/** The scratch object itself (its fields change, the object never does). */
const S = scratch;

/**
 * The logits figure accumulated one position at a time, each read off the scratch just filled by
 * `matchPosition` (so that `compare` matches a position once for all its figures).
 */
export class LogitsSum {
  private best = -1;
  private atI = -1;
  private lowerBound = false;
  private read = 0;
  private topK = Infinity;
  private here = -1;
  private bound = false;

  constructor(private readonly block: PositionBlock) {}

  /** Position `i`, just matched; `kc`, `kb` are the two sides' top-list lengths (a side without one is skipped). */
  add(i: number, kc: number, kb: number): void {
    if (kc === 0 || kb === 0) return;
    const { vc, vb, mc } = S;
    this.here = -1;
    this.bound = false;
    this.sideMax(vc, vb, mc, kc, kb, 0);
    this.baselineSide(i, kc, kb);
  }

  /**
   * {@link add} when the caller has measured the candidate's side itself (`compare` does, in the
   * loop that takes the position's shift over the same pairs): `here` is the largest difference
   * of the candidate's top entries (≤ 10) in list order, `bound` whether it was a lower bound;
   * `allPaired` when each of the baseline's top-10 entries is paired with one of those (its side
   * then has nothing left to measure).
   */
  addMeasured(i: number, kc: number, kb: number, here: number, bound: boolean, allPaired: boolean): void {
    if (kc === 0 || kb === 0) return;
    this.here = here;
    this.bound = bound;
    this.baselineSide(i, kc, kb, allPaired);
  }

  private baselineSide(i: number, kc: number, kb: number, allPaired = false): void {
    const { vc, vb, mb } = S;
    // A pair the candidate's side already measured gives the same difference again (|a − b| is
    // exact either way), which cannot exceed the maximum it set: skipped.
    if (!allPaired) this.sideMax(vb, vc, mb, kb, kc, kc < LOGITS_TOP ? kc : LOGITS_TOP);
    const here = this.here;
    if (here < 0) return;
    this.read++;
    this.topK = Math.min(this.topK, kc, kb, LOGITS_TOP);
    if (here > this.best) {
      this.best = here;
      this.atI = i;
      this.lowerBound = this.bound;
    }
  }

  figure(): LogitsFigure {
    return this.read === 0
      ? { ...NO_LOGITS }
      : {
          max: this.best,
          n: this.read,
          topK: this.topK,
          at: { block: this.block, i: this.atI },
          lowerBound: this.lowerBound,
        };
  }

  /**
   * The largest difference of one side's top entries (≤ 10) against the other side's `kw`
   * listed ones, skipping the pairs whose other entry is below `measured` (already compared); that
   * side's smallest listed value is looked up only for a token it lacks.
   */
  private sideMax(v: Float64Array, w: Float64Array, m: Int32Array, k: number, kw: number, measured: number): void {
    const top = k < LOGITS_TOP ? k : LOGITS_TOP;
    let minOther = Number.NaN;
    for (let j = 0; j < top; j++) {
      const x = v[j]!;
      if (x !== x) continue;
      const l = m[j]!;
      let d: number;
      let lb = false;
      if (l >= 0) {
        if (l < measured) continue;
        const y = w[l]!;
        if (y !== y) continue;
        d = x > y ? x - y : y - x;
      } else {
        // Not listed on the other side: there it is at most that side's smallest listed value.
        if (minOther !== minOther) minOther = smallest(w, kw);
        if (minOther === Infinity) continue;
        d = x > minOther ? x - minOther : 0;
        lb = true;
      }
      if (d > this.here) {
        this.here = d;
        this.bound = lb;
      }
    }
  }
}

/** The smallest known value among the first `k` entries (Infinity when none). */
export function smallest(v: Float64Array, k: number): number {
  let m = Infinity;
  for (let j = 0; j < k; j++) {
    const x = v[j]!;
    if (x === x && x < m) m = x;
  }
  return m;
}

/** The larger of two logits figures (positions added up, the shorter top list kept). */
export function maxLogits(a: LogitsFigure, b: LogitsFigure): LogitsFigure {
  if (b.n === 0) return a;
  if (a.n === 0) return b;
  const top = (a.max ?? -1) >= (b.max ?? -1) ? a : b;
  return {
    max: top.max,
    n: a.n + b.n,
    topK: Math.min(a.topK ?? LOGITS_TOP, b.topK ?? LOGITS_TOP),
    at: top.at,
    lowerBound: top.lowerBound,
  };
}

/**
 * The health of a comparison's positions (what `compare` attaches): KL over every comparable
 * position, the relative error over the aligned ones (the divergence has two chosen tokens), and
 * the logits figure over the comparable positions.
 */
export function healthOf(
  positions: readonly PositionRow[],
  cs: readonly TokenStep[],
  bs: readonly TokenStep[],
  byId: boolean,
  over: Health['over'] = 'free',
): Health {
  const kl = new FigureSum();
  const rel = new FigureSum();
  for (const p of positions) {
    kl.add(p.kl);
    if (p.candidateToken === undefined && p.candidate !== null && p.baseline !== null)
      rel.add(relativeError(p.candidate - p.baseline));
  }
  return {
    over,
    positions: positions.length,
    kl: kl.figure(),
    relErr: rel.figure(),
    logits: logitsFigure(cs, bs, positions.length, byId, over === 'scored' ? 'scored' : 'free'),
  };
}

/** Whether a figure passes {@link HEALTH_LIMITS}: `{kl, relErrMean, relErrMax}`, each true, false or null (not measured). */
export function healthMarks(h: Pick<Health, 'kl' | 'relErr'>): {
  kl: boolean | null;
  relErrMean: boolean | null;
  relErrMax: boolean | null;
} {
  return {
    kl: h.kl.mean === null ? null : h.kl.mean < HEALTH_LIMITS.kl,
    relErrMean: h.relErr.mean === null ? null : h.relErr.mean < HEALTH_LIMITS.relErrMean,
    relErrMax: h.relErr.max === null ? null : h.relErr.max < HEALTH_LIMITS.relErrMax,
  };
}

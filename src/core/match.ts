import type { TokenStep } from './types.js';

/**
 * Matching the tokens of one position across the two sides, without allocating: the hot loop of
 * `compare` runs this for every comparable position of every mirrored pair.
 *
 * Each side is seen as a *virtual list*: its top-k entries, plus the chosen token appended when
 * it is not among them. The chosen token's entry carries the chosen logprob (the top value when
 * the logprob was a sentinel). After {@link matchPosition}, {@link scratch} holds for both sides
 * each entry's value (NaN when unknown), the index of the same token on the other side (−1 when
 * absent), where the chosen token sits, and which entries repeat an earlier one of their side.
 */
export interface MatchScratch {
  /** Entry values of the candidate's virtual list (NaN = unknown). */
  vc: Float64Array;
  /** Entry values of the baseline's virtual list. */
  vb: Float64Array;
  /** `Math.exp` of each candidate entry value (NaN where the value is unknown): computed once per position, read by the KL estimate and the definition checks' top-list sums. */
  ec: Float64Array;
  /** `Math.exp` of each baseline entry value. */
  eb: Float64Array;
  /** For each candidate entry: index of the same token in the baseline's list, or −1. */
  mc: Int32Array;
  /** For each baseline entry: index of the same token in the candidate's list, or −1. */
  mb: Int32Array;
  /** 1 where a candidate entry repeats an earlier one (only meaningful when `repeats`); a repeat matches nothing. */
  dc: Uint8Array;
  /** 1 where a baseline entry repeats an earlier one (only meaningful when `repeats`). */
  db: Uint8Array;
  /** Whether either side lists a token twice (then `dc`/`db` mark the later copies). */
  repeats: boolean;
  /** Length of the candidate's virtual list at the last matched position. */
  nc: number;
  /** Length of the baseline's virtual list. */
  nb: number;
  /** Index of the candidate's chosen token in its virtual list. */
  ic: number;
  /** Index of the baseline's chosen token in its virtual list. */
  ib: number;
}

/** The scratch filled by {@link matchPosition}; valid until the next call. */
export const scratch: MatchScratch = {
  vc: new Float64Array(32),
  vb: new Float64Array(32),
  ec: new Float64Array(32),
  eb: new Float64Array(32),
  mc: new Int32Array(32),
  mb: new Int32Array(32),
  dc: new Uint8Array(32),
  db: new Uint8Array(32),
  repeats: false,
  nc: 0,
  nb: 0,
  ic: 0,
  ib: 0,
};

function grow(n: number): void {
  if (scratch.vc.length >= n) return;
  const size = Math.max(n, scratch.vc.length * 2);
  scratch.vc = new Float64Array(size);
  scratch.vb = new Float64Array(size);
  scratch.ec = new Float64Array(size);
  scratch.eb = new Float64Array(size);
  scratch.mc = new Int32Array(size);
  scratch.mb = new Int32Array(size);
  scratch.dc = new Uint8Array(size);
  scratch.db = new Uint8Array(size);
}

/** Key equality of entry `i` of `a`'s virtual list and entry `j` of `b`'s (index k = the chosen). */
function sameKey(a: TokenStep, i: number, b: TokenStep, j: number, byId: boolean): boolean {
  const ka = a.top.length;
  const kb = b.top.length;
  if (byId) return (i < ka ? a.topIds![i] : a.id) === (j < kb ? b.topIds![j] : b.id);
  return (i < ka ? a.top[i]![0] : a.token) === (j < kb ? b.top[j]![0] : b.token);
}

/** Sums over one side's top list (its own values, before the chosen logprob replaces one), for the definition checks. */
export interface TopSums {
  /** Σ exp(value) over the entries that are not −∞, in list order. */
  sum: number;
  /** Entries that are not −∞ (the others are sentinels). */
  finite: number;
  /** The exponentials of the entries (`scratch.ec` or `eb`), valid except at `replaced`. */
  e: Float64Array;
  /** The index whose exponential is the chosen logprob's rather than the entry's own value, or −1. */
  replaced: number;
}

/** The top-list sums of the candidate and of the baseline at the position last matched. */
export const topSums: { c: TopSums; b: TopSums } = {
  c: { sum: 0, finite: 0, e: scratch.ec, replaced: -1 },
  b: { sum: 0, finite: 0, e: scratch.eb, replaced: -1 },
};

/** Each side's entry keys (token ids or texts) at the position last matched, chosen last when appended. */
const keysC: Array<string | number | undefined> = [];
const keysB: Array<string | number | undefined> = [];

/**
 * Loads one side's values into `v`, their exponentials into `e` and their keys into `keys`, and
 * the top list's sums into `out`; returns the index of the chosen token (its top copy, or k when
 * it is appended). A chosen entry with a known logprob takes that logprob.
 */
function load(
  s: TokenStep,
  v: Float64Array,
  e: Float64Array,
  keys: Array<string | number | undefined>,
  out: TopSums,
  byId: boolean,
): number {
  const top = s.top;
  const k = top.length;
  const ids = s.topIds;
  const own = byId ? s.id : s.token;
  let chosen = k;
  let sum = 0;
  let finite = 0;
  for (let j = 0; j < k; j++) {
    const t = top[j]!;
    const x = t[1];
    if (x === -Infinity) {
      v[j] = Number.NaN;
      e[j] = Number.NaN;
    } else {
      const p = Math.exp(x);
      v[j] = x;
      e[j] = p;
      sum += p;
      finite++;
    }
    const key = byId ? ids![j] : t[0];
    keys[j] = key;
    if (chosen === k && key === own) chosen = j;
  }
  out.sum = sum;
  out.finite = finite;
  out.e = e;
  out.replaced = -1;
  if (chosen === k) keys[k] = own;
  const lp = s.logprob;
  if (lp !== null) {
    // (The top copy's value usually is the logprob itself: no second exp then.)
    if (chosen === k || v[chosen] !== lp) {
      e[chosen] = Math.exp(lp);
      if (chosen < k) out.replaced = chosen;
    }
    v[chosen] = lp;
  } else if (chosen === k) {
    v[k] = Number.NaN;
    e[k] = Number.NaN;
  }
  return chosen;
}

function hasRepeats(s: TokenStep): boolean {
  return s.flags !== undefined && s.flags.includes('duplicateTopKeys');
}

/**
 * Fills {@link scratch} for one position. `byId` matches tokens by id (both sides carry ids on
 * every step and top entry), otherwise by text. When a side lists a token twice, the first entry
 * is the token's and the later copies are ignored.
 */
export function matchPosition(c: TokenStep, b: TokenStep, byId: boolean): void {
  const kc = c.top.length;
  const kb = b.top.length;
  grow((kc > kb ? kc : kb) + 1);
  const { vc, vb, mc, mb } = scratch;
  const ic = load(c, vc, scratch.ec, keysC, topSums.c, byId);
  const ib = load(b, vb, scratch.eb, keysB, topSums.b, byId);
  const nc = ic === kc ? kc + 1 : kc;
  const nb = ib === kb ? kb + 1 : kb;
  scratch.ic = ic;
  scratch.ib = ib;
  scratch.nc = nc;
  scratch.nb = nb;
  for (let l = 0; l < nb; l++) mb[l] = -1;
  if (hasRepeats(c) || hasRepeats(b)) {
    matchWithRepeats(c, b, byId);
    return;
  }
  scratch.repeats = false;
  // Every token appears once per side. Sorted lists of two close distributions mostly keep the
  // same order, so the same index is tried first.
  for (let j = 0; j < nc; j++) {
    const key = keysC[j];
    let hit = -1;
    if (j < nb && keysB[j] === key) hit = j;
    else {
      for (let l = 0; l < nb; l++) {
        if (l !== j && keysB[l] === key) {
          hit = l;
          break;
        }
      }
    }
    mc[j] = hit;
    if (hit >= 0) mb[hit] = j;
  }
}

function markRepeats(s: TokenStep, n: number, out: Uint8Array, byId: boolean): void {
  out.fill(0, 0, n);
  for (let j = 1; j < n; j++) {
    for (let l = 0; l < j; l++) {
      if (sameKey(s, l, s, j, byId)) {
        out[j] = 1;
        break;
      }
    }
  }
}

function matchWithRepeats(c: TokenStep, b: TokenStep, byId: boolean): void {
  const { mc, mb, dc, db, nc, nb } = scratch;
  scratch.repeats = true;
  markRepeats(c, nc, dc, byId);
  markRepeats(b, nb, db, byId);
  // A repeated token counts once, with its first (larger) entry; the copies match nothing.
  for (let j = 0; j < nc; j++) {
    let hit = -1;
    if (dc[j] === 0) {
      for (let l = 0; l < nb; l++) {
        if (db[l] === 0 && sameKey(c, j, b, l, byId)) {
          hit = l;
          break;
        }
      }
    }
    mc[j] = hit;
    if (hit >= 0) mb[hit] = j;
  }
}

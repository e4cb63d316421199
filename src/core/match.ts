import type { TokenStep } from './types.js';

/**
 * Matching the tokens of one position across the two sides, without allocating: the hot loop of
 * {@link compare} runs this for every comparable position of every mirrored pair.
 *
 * Each side is seen as a *virtual list*: index 0 is the chosen token with its logprob, indices
 * 1..k the top-k entries. After {@link matchPosition}, the module's scratch arrays hold, for both
 * sides, each entry's value (NaN when unknown or a sentinel), the index of the same token on the
 * other side (−1 when absent), and whether the entry repeats an earlier one of its own side.
 */
export interface MatchScratch {
  /** Entry values of the candidate's virtual list (NaN = unknown). */
  vc: Float64Array;
  /** Entry values of the baseline's virtual list. */
  vb: Float64Array;
  /** For each candidate entry: index of the same token in the baseline's list, or −1. */
  mc: Int32Array;
  /** For each baseline entry: index of the same token in the candidate's list, or −1. */
  mb: Int32Array;
  /** 1 where a candidate entry repeats an earlier candidate entry. */
  dc: Uint8Array;
  /** 1 where a baseline entry repeats an earlier baseline entry. */
  db: Uint8Array;
  /** Virtual list lengths (1 + top-k) of the last matched position. */
  nc: number;
  nb: number;
}

/** The scratch filled by {@link matchPosition}; valid until the next call. */
export const scratch: MatchScratch = {
  vc: new Float64Array(32),
  vb: new Float64Array(32),
  mc: new Int32Array(32),
  mb: new Int32Array(32),
  dc: new Uint8Array(32),
  db: new Uint8Array(32),
  nc: 0,
  nb: 0,
};

function grow(n: number): void {
  if (scratch.vc.length >= n) return;
  const size = Math.max(n, scratch.vc.length * 2);
  scratch.vc = new Float64Array(size);
  scratch.vb = new Float64Array(size);
  scratch.mc = new Int32Array(size);
  scratch.mb = new Int32Array(size);
  scratch.dc = new Uint8Array(size);
  scratch.db = new Uint8Array(size);
}

/** The chosen logprob, or NaN. */
function chosenValue(s: TokenStep): number {
  return s.logprob ?? Number.NaN;
}

/** A top value, NaN for the `-Infinity` that stands for a sentinel. */
function topVal(v: number): number {
  return v === -Infinity ? Number.NaN : v;
}

function sameKey(a: TokenStep, i: number, b: TokenStep, j: number, byId: boolean): boolean {
  if (byId) {
    const ka = i === 0 ? a.id : a.topIds![i - 1];
    const kb = j === 0 ? b.id : b.topIds![j - 1];
    return ka === kb;
  }
  const ka = i === 0 ? a.token : a.top[i - 1]![0];
  const kb = j === 0 ? b.token : b.top[j - 1]![0];
  return ka === kb;
}

/**
 * Marks repeats within one side's virtual list (the chosen token is usually also top-1) and
 * returns the index of the chosen token's copy in the top list, or −1.
 */
function markRepeats(s: TokenStep, n: number, out: Uint8Array, byId: boolean): number {
  out.fill(0, 0, n);
  let copy = -1;
  for (let j = 1; j < n; j++) {
    if (sameKey(s, 0, s, j, byId)) {
      out[j] = 1;
      copy = j;
      break;
    }
  }
  // Top lists repeat a token only when the parser flagged it; skip the quadratic scan otherwise.
  if (s.flags === undefined || !s.flags.includes('duplicateTopKeys')) return copy;
  for (let j = 2; j < n; j++) {
    if (out[j] === 1) continue;
    for (let l = 1; l < j; l++) {
      if (sameKey(s, l, s, j, byId)) {
        out[j] = 1;
        break;
      }
    }
  }
  return copy;
}

/**
 * Fills {@link scratch} for one position. `byId` matches tokens by id (both sides carry ids on
 * every step and every top entry), otherwise by text. When a token appears twice on a side, the
 * first entry with a known value is the one matched.
 */
export function matchPosition(c: TokenStep, b: TokenStep, byId: boolean): void {
  const nc = 1 + c.top.length;
  const nb = 1 + b.top.length;
  grow(nc > nb ? nc : nb);
  const { vc, vb, mc, mb, dc, db } = scratch;
  scratch.nc = nc;
  scratch.nb = nb;
  vc[0] = chosenValue(c);
  for (let j = 1; j < nc; j++) vc[j] = topVal(c.top[j - 1]![1]);
  vb[0] = chosenValue(b);
  for (let j = 1; j < nb; j++) vb[j] = topVal(b.top[j - 1]![1]);
  // A sentinel chosen logprob falls back to the chosen token's own top entry, when that is known.
  const copyC = markRepeats(c, nc, dc, byId);
  if (vc[0] !== vc[0] && copyC > 0) vc[0] = vc[copyC]!;
  const copyB = markRepeats(b, nb, db, byId);
  if (vb[0] !== vb[0] && copyB > 0) vb[0] = vb[copyB]!;
  mb.fill(-1, 0, nb);
  let skipped = false;
  for (let j = 0; j < nc; j++) {
    let hit = -1;
    for (let l = 0; l < nb; l++) {
      if (!sameKey(c, j, b, l, byId)) continue;
      if (hit < 0) hit = l;
      else skipped = true;
      if (vb[l] === vb[l]) {
        hit = l;
        break;
      }
    }
    mc[j] = hit;
    if (hit >= 0 && dc[j] === 0 && mb[hit]! < 0) mb[hit] = j;
  }
  if (!skipped) return;
  // A hit moved past an unknown value to a later copy: point the first copy back as well.
  for (let l = 1; l < nb; l++) {
    if (db[l] === 1 || mb[l]! >= 0) continue;
    for (let j = 0; j < nc; j++) {
      if (sameKey(c, j, b, l, byId)) {
        mb[l] = j;
        break;
      }
    }
  }
}

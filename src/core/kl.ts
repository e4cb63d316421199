import { scratch } from './match.js';

/** Smallest probability mass given to a tail bucket, so that logs stay finite. */
const EPS = 1e-12;

/** The scratch object itself (its fields change, the object never does): one module lookup, not one per call. */
const S = scratch;

/**
 * KL(baseline ‖ candidate) in nats for the position last matched by `matchPosition`, estimated
 * over the union of both sides' reported tokens (chosen + top-k) plus one tail bucket for the
 * unreported mass. A token one side did not report gets, on that side, the smaller of its lowest
 * reported probability and an equal share of its tail; the tail keeps what is left.
 *
 * It is an estimate for dashboards (the `logprobe_token_kl_nats` histogram): top-k lists truncate
 * both distributions, so it is not used by the verdict. Returns `null` when a side reports no
 * usable value, and never a negative number. The probabilities are the exponentials
 * `matchPosition` already took (`scratch.ec`/`eb`): no `Math.exp` here.
 *
 * Long on purpose: the hot path of every compared position: one pass over the shared scratch arrays, held in locals; split, the parts would pass them all or allocate (the zero-allocation matching).
 */
// eslint-disable-next-line max-lines-per-function -- the hot path of every compared position
export function klAtMatchedPosition(): number | null {
  const { vc, vb, ec, eb, mc, mb, dc, db, nc, nb, repeats } = S;
  let massB = 0;
  let massC = 0;
  let minB = Infinity;
  let minC = Infinity;
  let pMinB = 0;
  let pMinC = 0;
  let missingInC = 0; // baseline tokens the candidate did not report
  let missingInB = 0;
  for (let l = 0; l < nb; l++) {
    const v = vb[l]!;
    if (v !== v || (repeats && db[l] === 1)) continue;
    const p = eb[l]!;
    massB += p;
    if (v < minB) {
      minB = v;
      pMinB = p;
    }
    const j = mb[l]!;
    if (j < 0 || vc[j] !== vc[j]) missingInC++;
  }
  for (let j = 0; j < nc; j++) {
    const v = vc[j]!;
    if (v !== v || (repeats && dc[j] === 1)) continue;
    const p = ec[j]!;
    massC += p;
    if (v < minC) {
      minC = v;
      pMinC = p;
    }
    const l = mc[j]!;
    if (l < 0 || vb[l] !== vb[l]) missingInB++;
  }
  if (minB === Infinity || minC === Infinity) return null;
  const tailB = Math.max(1 - massB, EPS);
  const tailC = Math.max(1 - massC, EPS);
  const qB = Math.max(Math.min(pMinB, tailB / (missingInB + 1)), EPS);
  const qC = Math.max(Math.min(pMinC, tailC / (missingInC + 1)), EPS);
  const restB = Math.max(tailB - missingInB * qB, EPS);
  const restC = Math.max(tailC - missingInC * qC, EPS);
  const logQC = missingInC > 0 ? Math.log(qC) : 0;
  let kl = 0;
  for (let l = 0; l < nb; l++) {
    const v = vb[l]!;
    if (v !== v || (repeats && db[l] === 1)) continue;
    const j = mb[l]!;
    const w = j >= 0 ? vc[j]! : Number.NaN;
    kl += eb[l]! * (v - (w === w ? w : logQC));
  }
  if (missingInB > 0) {
    const logQB = Math.log(qB);
    for (let j = 0; j < nc; j++) {
      const v = vc[j]!;
      if (v !== v || (repeats && dc[j] === 1)) continue;
      const l = mc[j]!;
      if (l < 0 || vb[l] !== vb[l]) kl += qB * (logQB - v);
    }
  }
  kl += restB * Math.log(restB / restC);
  return Number.isFinite(kl) ? Math.max(kl, 0) : null;
}

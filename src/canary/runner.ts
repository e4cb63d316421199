import type { BackendResult } from '../backend/dispatch.js';
import { detectorEvidence, formatNats, type Comparison, type Thresholds } from '../core/index.js';
import { permutationPValue, pairDifference } from '../core/permutation.js';
import { mulberry32 } from '../core/random.js';
import { analyzePair, type PairResult } from '../pair/analyze.js';
import type { PairCopy, PairPipeline } from '../pair/pipeline.js';
import { goldenBody } from '../replay/golden-run.js';
import { goldenKey, goldenSide, type GoldenIndex } from '../replay/golden.js';
import { probeCopy, type CanaryCopyOptions, type CanaryProbe } from './probes.js';

/** One probe sent and compared: what each side answered, the pair classified, the tokens it cost. */
export interface CanaryPair {
  probe: CanaryProbe;
  /** The model named in the copy (null: none). */
  model: string | null;
  /** The body the candidate got. */
  request: Record<string, unknown>;
  candidate: BackendResult;
  /** The baseline's answer, or the reference's recorded one. */
  baseline: BackendResult;
  /** The other side was a recorded reference (a golden file), not a live baseline. */
  reference: boolean;
  result: PairResult;
  /**
   * The decode steps' evidence: the compared positions after the first (the prefill computes the
   * first token; a decode-only bug leaves it clean) and those that shifted above the floor.
   */
  decode: StepEvidence;
  /** Prompt and generated tokens both sides spent (a recorded reference spends none). */
  tokens: number;
  /** The most the same probe can cost next time: each run's prompt tokens as reported, plus the tokens it asks for. */
  bound: number;
  /**
   * The trusted side's run-to-run spread on this probe: the baseline's second run compared with
   * its first (against a reference, the candidate's second run with its first); null when a run
   * failed, absent when the runner was not asked to measure it (`self`).
   */
  self?: Comparison | null;
}

/**
 * Sends canary probes through the one pair pipeline (src/pair/pipeline.ts): to the candidate and
 * the baseline at once, or — for a server with no twin — to the candidate alone, compared with the
 * answer a golden file recorded for the same probe (`logprobe record PROBES --backend TRUSTED`).
 * No repeats and no path check: a probe is short, and its worth is its first tokens.
 */
export class CanaryRunner {
  constructor(
    private readonly o: {
      pipeline: PairPipeline;
      /** The recorded reference (candidate-only mode), or null with a live baseline. */
      reference: GoldenIndex | null;
      copy: Omit<CanaryCopyOptions, 'model'>;
      /**
       * Send each probe a second time to one side to measure its run-to-run spread (the
       * baseline live; the candidate against a reference), for {@link judgeRound}'s spread test.
       * Costs that side's tokens twice.
       */
      self?: boolean;
    },
  ) {}

  /** One probe, compared at `thresholds`. Never throws: a failed side is an outcome of the pair. */
  async one(probe: CanaryProbe, model: string | null, thresholds: Thresholds): Promise<CanaryPair> {
    const copy = probeCopy(probe, { ...this.o.copy, model });
    const ref = this.o.reference;
    if (ref === null) {
      const repeat = this.o.self ? { backends: ['baseline' as const], flush: false } : null;
      const run = await this.o.pipeline.run(copy, { thresholds, busy: false, repeat, path: null });
      const baseline = run.baseline!;
      const again = run.repeats[0];
      return {
        ...(this.o.self ? { self: again?.analysis ?? null } : {}),
        probe,
        model,
        request: run.request,
        candidate: run.candidate,
        baseline,
        reference: false,
        result: run.result,
        decode: decodeEvidence(run.result.comparison, thresholds.noiseFloor),
        tokens:
          spent(run.candidate, copy.body) + spent(baseline, copy.body) + (again ? spent(again.second, copy.body) : 0),
        bound:
          costBound(run.candidate, copy.body) +
          costBound(baseline, copy.body) +
          (this.o.self ? costBound(again?.second ?? baseline, copy.body) : 0),
      };
    }
    return this.againstReference(probe, model, copy, ref, thresholds);
  }

  /** The candidate alone, compared with the answer the reference recorded for the same probe. */
  private async againstReference(
    probe: CanaryProbe,
    model: string | null,
    copy: PairCopy,
    ref: GoldenIndex,
    thresholds: Thresholds,
  ): Promise<CanaryPair> {
    const golden = ref.byKey.get(goldenKey(probe.route, probe.body));
    if (golden === undefined) {
      const missing: BackendResult = {
        status: 0,
        latencyMs: 0,
        body: null,
        serverHeaders: {},
        error: `no reference for probe ${probe.id} in ${ref.file} (record it: logprobe record PROBES --backend TRUSTED)`,
      };
      return {
        probe,
        model,
        request: copy.body,
        candidate: missing,
        baseline: missing,
        reference: true,
        result: analyzePair(missing, missing, thresholds),
        decode: { shifted: 0, comparable: 0 },
        tokens: 0,
        bound: 0,
      };
    }
    // The recorded request, at most the canary's length: the reference holds no more.
    const recorded = { ...copy, body: goldenBody(golden.request, this.o.copy.maxTokens), payload: undefined };
    const sent = await this.o.pipeline.send(recorded);
    const base = goldenSide(golden);
    const again = this.o.self ? await this.o.pipeline.send(recorded) : null;
    const result = analyzePair(sent.candidate, base, thresholds);
    return {
      ...(again ? { self: analyzePair(again.candidate, sent.candidate, thresholds).comparison } : {}),
      probe,
      model,
      request: sent.request,
      candidate: sent.candidate,
      baseline: base,
      reference: true,
      result,
      decode: decodeEvidence(result.comparison, thresholds.noiseFloor),
      tokens: spent(sent.candidate, sent.request) + (again ? spent(again.candidate, again.request) : 0),
      bound: costBound(sent.candidate, sent.request) * (this.o.self ? 2 : 1),
    };
  }
}

/** Positions compared and those shifted above the floor. */
export interface StepEvidence {
  shifted: number;
  comparable: number;
}

/**
 * A pair's decode steps: its compared positions after the first, and those whose shift passed
 * `floor` (the comparison's own rule, src/core/compare.ts). None for an unusable comparison.
 */
export function decodeEvidence(c: Comparison | null, floor: number): StepEvidence {
  const out = { shifted: 0, comparable: 0 };
  if (!usable(c)) return out;
  for (const p of c.positions) {
    if (p.i < 1) continue;
    out.comparable++;
    if (p.shift !== null && p.shift > floor) out.shifted++;
  }
  return out;
}

/** Tokens a side spent on a copy: its `usage.total_tokens`, else the copy's upper bound ({@link estimateTokens}). */
export function spent(r: BackendResult, body: Readonly<Record<string, unknown>>): number {
  const usage = (r.body as { usage?: { total_tokens?: unknown } } | null)?.usage;
  if (typeof usage?.total_tokens === 'number' && usage.total_tokens >= 0) return usage.total_tokens;
  return estimateTokens(body);
}

/**
 * The most a copy can cost on one side before it was ever sent: one token per UTF-8 byte of its
 * prompt (no tokenizer makes more, byte-level ones at most that) plus 32 for a chat template's
 * own tokens, plus the tokens it asks for.
 */
export function estimateTokens(body: Readonly<Record<string, unknown>>): number {
  return promptBytes(body) + 32 + asked(body);
}

/** The UTF-8 bytes of a copy's prompt (`prompt`, or the `messages` as JSON). */
export function promptBytes(body: Readonly<Record<string, unknown>>): number {
  const prompt = body.prompt ?? body.messages ?? '';
  return Buffer.byteLength(typeof prompt === 'string' ? prompt : JSON.stringify(prompt), 'utf8');
}

/** The most the same copy can cost next time on one side: its prompt tokens as the side reported them, plus the tokens asked for. */
export function costBound(r: BackendResult, body: Readonly<Record<string, unknown>>): number {
  const usage = (r.body as { usage?: { prompt_tokens?: unknown } } | null)?.usage;
  if (typeof usage?.prompt_tokens === 'number' && usage.prompt_tokens >= 0) return usage.prompt_tokens + asked(body);
  return estimateTokens(body);
}

function asked(body: Readonly<Record<string, unknown>>): number {
  const v = body.max_tokens ?? body.max_completion_tokens;
  return typeof v === 'number' && v > 0 ? v : 16;
}

/** A round of canaries judged: changed or the same, with the figures that say why. */
export interface CanaryJudgement {
  verdict: 'same' | 'changed' | 'inconclusive';
  /** Probes sent, and those compared (both sides usable). */
  probes: number;
  compared: number;
  /** Compared probes whose verdict is a shift (global, early, local). */
  shiftedProbes: number;
  /** Shifted share of the comparable positions pooled over the round (the window statistic). */
  pooledShare: number;
  /** The same share over the decode steps alone (positions after the first; {@link decodeEvidence}); null: none compared. */
  decodeShare: number | null;
  /** Decode-step positions compared over the round. */
  decodePositions: number;
  /** Largest position shift of the round, nats. */
  maxShift: number | null;
  /** The sign-flip permutation test's p-value over the probes' mean logprob differences. */
  pValue: number;
  /**
   * The spread test's one-sided p-value: each probe's shift between the two sides against the
   * trusted side's own run-to-run shift on it; null when the round measured no spread
   * (the runner's `self`).
   */
  spreadPValue: number | null;
  /** Probes the spread test compared (both the pair and the trusted side's repeat usable). */
  spreadProbes: number;
  /** Border probes (a built `gap`) whose first token flipped or moved by at least that gap. */
  borderShifts: number;
  /** The round's reading in one line. */
  summary: string;
}

/** How a round is judged: `alpha` for the permutation tests, `fireFraction` for the pooled share. */
export interface JudgeOptions {
  alpha: number;
  fireFraction: number;
  permutations: number;
  seed: number;
}

const SHIFTS = new Set(['global_shift', 'early_shift', 'local_shift']);

const usable = (c: Comparison | null | undefined): c is Comparison =>
  c !== null && c !== undefined && c.verdict !== 'incomparable' && c.verdict !== 'prompt_mismatch';

/**
 * Judges one round: changed when any of four rules says so, inconclusive when nothing was
 * compared.
 *
 * 1. The pooled shifted share of the probes' positions reaches `fireFraction` (the window alert's
 *    rule, at the analysis floor) — over all positions, or over the decode steps alone (the
 *    positions after the first, {@link decodeEvidence}): a bug of the decode path leaves every
 *    first token clean, and the first-token probes would dilute its share below the fraction.
 * 2. The probes' logprobs moved together: the sign-flip permutation test of the mean differences
 *    |Σ dᵢ| has p ≤ `alpha` (Log Probability Tracking's test). A change that moves logprobs up
 *    and down alike — weight noise, a state shift — cancels in Σ dᵢ and is not seen here.
 * 3. The spread test, where the round measured the trusted side's run-to-run spread (each pair's
 *    `self`): eᵢ = maxShift(candidate vs trusted) − maxShift(trusted vs itself), one-sided
 *    sign-flip test of Σ eᵢ, changed at p ≤ `alpha`. If the candidate is the trusted build up to
 *    noise, its run and the trusted side's second run are exchangeable, so eᵢ is symmetric about
 *    0 and the p-value is exact, whatever the engine's noise (none on a deterministic engine:
 *    every eᵢ = 0, p = 1). It sees a zero-mean change below the floor: all n probes shifted
 *    more than the spread give p ≈ 2⁻ⁿ (≤ 0.01 from 7 probes on).
 * 4. The border rule ({@link borderShifted}).
 */
export function judgeRound(pairs: readonly CanaryPair[], o: JudgeOptions): CanaryJudgement {
  const compared = pairs.filter((p) => usable(p.result.comparison));
  let shifted = 0;
  let comparable = 0;
  let maxShift: number | null = null;
  const decode = { shifted: 0, comparable: 0 };
  const d: number[] = [];
  const e: number[] = [];
  for (const p of compared) {
    const c = p.result.comparison!;
    const ev = detectorEvidence(c);
    shifted += ev.shifted;
    comparable += ev.comparable;
    if (ev.maxShift !== null) maxShift = Math.max(maxShift ?? 0, ev.maxShift);
    decode.shifted += p.decode.shifted;
    decode.comparable += p.decode.comparable;
    const v = pairDifference(c);
    if (v !== null) d.push(v);
    if (usable(p.self) && c.maxShift !== null) e.push(c.maxShift - (p.self.maxShift ?? 0));
  }
  const pooledShare = comparable > 0 ? shifted / comparable : 0;
  const decodeShare = decode.comparable > 0 ? decode.shifted / decode.comparable : null;
  const pValue = permutationPValue(d, o.permutations, mulberry32(o.seed));
  const measured = pairs.some((p) => p.self !== undefined);
  const spreadPValue = measured ? oneSidedPValue(e, o.permutations, mulberry32(o.seed)) : null;
  const shiftedProbes = compared.filter((p) => SHIFTS.has(p.result.comparison!.verdict)).length;
  const borderShifts = compared.filter(borderShifted).length;
  const fired =
    pValue <= o.alpha ||
    pooledShare >= o.fireFraction ||
    (decodeShare !== null && decodeShare >= o.fireFraction) ||
    (spreadPValue !== null && spreadPValue <= o.alpha) ||
    borderShifts > 0;
  const j = {
    verdict: compared.length === 0 ? 'inconclusive' : fired ? 'changed' : 'same',
    probes: pairs.length,
    compared: compared.length,
    shiftedProbes,
    pooledShare,
    decodeShare,
    decodePositions: decode.comparable,
    maxShift,
    pValue,
    spreadPValue,
    spreadProbes: e.length,
    borderShifts,
  } as const;
  return { ...j, summary: judgementSummary(j, o) };
}

/** The round's reading in one line, with every figure and the threshold it is judged at. */
function judgementSummary(j: Omit<CanaryJudgement, 'summary'>, o: JudgeOptions): string {
  if (j.compared === 0) return `inconclusive: none of ${j.probes} probes could be compared`;
  const spread =
    j.spreadPValue === null ? '' : `, spread test p ${j.spreadPValue.toPrecision(3)} over ${j.spreadProbes} probes`;
  const border = j.borderShifts > 0 ? `, ${j.borderShifts} border probes moved by their gap` : '';
  const decode =
    j.decodeShare === null ? '' : `, decode-step share ${j.decodeShare.toFixed(3)} over ${j.decodePositions} positions`;
  return `${j.verdict}: ${j.shiftedProbes} of ${j.compared} probes shifted, pooled share ${j.pooledShare.toFixed(3)}${decode} (changed at ${o.fireFraction})${border}, max shift ${formatNats(j.maxShift)} nats, permutation p ${j.pValue.toPrecision(3)}${spread} (${spread ? 'each ' : ''}changed at ≤ ${o.alpha})`;
}

/**
 * The one-sided sign-flip p-value of Σ e: (1 + #{Σ ±eᵢ ≥ Σ eᵢ}) / (1 + B) over `permutations`
 * random sign vectors. 1 for an empty set or Σ e ≤ 0 (no evidence the candidate moved more).
 */
export function oneSidedPValue(e: readonly number[], permutations: number, random: () => number): number {
  let observed = 0;
  for (const v of e) observed += v;
  if (e.length === 0 || !(observed > 0)) return 1;
  // Ties within rounding count as at least as extreme (a conservative p).
  const eps = observed * 1e-12;
  let extreme = 0;
  for (let b = 0; b < permutations; b++) {
    let sum = 0;
    for (const v of e) sum += random() < 0.5 ? v : -v;
    if (sum >= observed - eps) extreme++;
  }
  return (1 + extreme) / (1 + permutations);
}

/**
 * Gap-weighted flip evidence at a border probe: its first token flipped, or some top-k logprob
 * there moved by at least the probe's `gap` (the trusted side's top-1/top-2 gap that `canary
 * build` measured). The force that flips a border input is its gap, and `canary build` keeps only
 * gaps above flip noise, so a move that large is not noise (B3IT, arXiv 2602.11083, sees only the
 * flip; the logprobs show the push before it flips). A probe with no measured gap gives none.
 */
export function borderShifted(p: CanaryPair): boolean {
  const c = p.result.comparison;
  const gap = p.probe.gap;
  if (gap === null || gap <= 0 || !usable(c)) return false;
  if (c.firstDivergence === 0) return true;
  const first = c.positions[0];
  return first?.i === 0 && first.shift !== null && first.shift >= gap;
}

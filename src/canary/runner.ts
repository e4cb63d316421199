import type { BackendResult } from '../backend/dispatch.js';
import { detectorEvidence, formatNats, type Comparison, type Thresholds } from '../core/index.js';
import { permutationPValue, pairDifference } from '../core/permutation.js';
import { mulberry32 } from '../core/random.js';
import { analyzePair, type PairResult } from '../pair/analyze.js';
import type { PairPipeline } from '../pair/pipeline.js';
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
  /** Prompt and generated tokens both sides spent (a recorded reference spends none). */
  tokens: number;
  /** The most the same probe can cost next time: each side's prompt tokens as reported, plus the tokens it asks for. */
  bound: number;
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
    },
  ) {}

  /** One probe, compared at `thresholds`. Never throws: a failed side is an outcome of the pair. */
  async one(probe: CanaryProbe, model: string | null, thresholds: Thresholds): Promise<CanaryPair> {
    const copy = probeCopy(probe, { ...this.o.copy, model });
    const ref = this.o.reference;
    if (ref === null) {
      const run = await this.o.pipeline.run(copy, { thresholds, busy: false, repeat: null, path: null });
      const baseline = run.baseline!;
      return {
        probe,
        model,
        request: run.request,
        candidate: run.candidate,
        baseline,
        reference: false,
        result: run.result,
        tokens: spent(run.candidate, copy.body) + spent(baseline, copy.body),
        bound: costBound(run.candidate, copy.body) + costBound(baseline, copy.body),
      };
    }
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
        tokens: 0,
        bound: 0,
      };
    }
    // The recorded request, at most the canary's length: the reference holds no more.
    const sent = await this.o.pipeline.send({
      ...copy,
      body: goldenBody(golden.request, this.o.copy.maxTokens),
      payload: undefined,
    } as typeof copy);
    const base = goldenSide(golden);
    return {
      probe,
      model,
      request: sent.request,
      candidate: sent.candidate,
      baseline: base,
      reference: true,
      result: analyzePair(sent.candidate, base, thresholds),
      tokens: spent(sent.candidate, sent.request),
      bound: costBound(sent.candidate, sent.request),
    };
  }
}

/** Tokens a side spent on a copy: its `usage.total_tokens`, else prompt characters / 4 + the tokens asked for. */
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
  const prompt = body.prompt ?? body.messages ?? '';
  const bytes = Buffer.byteLength(typeof prompt === 'string' ? prompt : JSON.stringify(prompt), 'utf8');
  return bytes + 32 + asked(body);
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
  /** Largest position shift of the round, nats. */
  maxShift: number | null;
  /** The sign-flip permutation test's p-value over the probes' mean logprob differences. */
  pValue: number;
  /** Border probes (a built `gap`) whose first token flipped or moved by at least that gap. */
  borderShifts: number;
  /** The round's reading in one line. */
  summary: string;
}

/** How a round is judged: `alpha` for the permutation test, `fireFraction` for the pooled share. */
export interface JudgeOptions {
  alpha: number;
  fireFraction: number;
  permutations: number;
  seed: number;
}

const SHIFTS = new Set(['global_shift', 'early_shift', 'local_shift']);

/**
 * Judges one round: changed when the probes' logprobs moved together (the permutation test's
 * p ≤ `alpha`: an exact false-alarm rate whatever the noise, as Log Probability Tracking's test),
 * when the pooled shifted share of their positions reaches `fireFraction` (the window alert's
 * rule), or when a border probe moved by its own gap ({@link borderShifted}); inconclusive when
 * nothing was compared.
 */
export function judgeRound(pairs: readonly CanaryPair[], o: JudgeOptions): CanaryJudgement {
  const compared = pairs.filter((p) => comparable(p.result.comparison));
  let shifted = 0;
  let comparablePositions = 0;
  let maxShift: number | null = null;
  const d: number[] = [];
  for (const { result } of compared) {
    const c = result.comparison!;
    const e = detectorEvidence(c);
    shifted += e.shifted;
    comparablePositions += e.comparable;
    if (e.maxShift !== null) maxShift = Math.max(maxShift ?? 0, e.maxShift);
    const v = pairDifference(c);
    if (v !== null) d.push(v);
  }
  const pooledShare = comparablePositions > 0 ? shifted / comparablePositions : 0;
  const pValue = permutationPValue(d, o.permutations, mulberry32(o.seed));
  const shiftedProbes = compared.filter((p) => SHIFTS.has(p.result.comparison!.verdict)).length;
  const borderShifts = compared.filter(borderShifted).length;
  const changed = pValue <= o.alpha || pooledShare >= o.fireFraction || borderShifts > 0;
  const verdict = compared.length === 0 ? 'inconclusive' : changed ? 'changed' : 'same';
  const summary =
    compared.length === 0
      ? `inconclusive: none of ${pairs.length} probes could be compared`
      : `${verdict}: ${shiftedProbes} of ${compared.length} probes shifted, pooled share ${pooledShare.toFixed(3)} (changed at ${o.fireFraction}), ${borderShifts} border probes moved by their gap, max shift ${formatNats(maxShift)} nats, permutation p ${pValue.toPrecision(3)} (changed at ≤ ${o.alpha})`;
  return {
    verdict,
    probes: pairs.length,
    compared: compared.length,
    shiftedProbes,
    pooledShare,
    maxShift,
    pValue,
    borderShifts,
    summary,
  };
}

const comparable = (c: Comparison | null): c is Comparison =>
  c !== null && c.verdict !== 'incomparable' && c.verdict !== 'prompt_mismatch';

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
  if (gap === null || gap <= 0 || !comparable(c)) return false;
  if (c.firstDivergence === 0) return true;
  const first = c.positions[0];
  return first?.i === 0 && first.shift !== null && first.shift >= gap;
}

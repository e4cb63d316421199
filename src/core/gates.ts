import { formatNats } from './explain.js';
import { FigureSum, HEALTH_LIMITS, LOGITS_TOP, type Figure } from './health.js';
import type { DefinitionWarning } from './definition.js';
import type { Comparison } from './types.js';

/**
 * A three-layer alignment gate as named, composable checks over analysed pairs
 * (docs/format.md, "Gates"): `logits:T` (the largest absolute logprob difference over each
 * side's top-10 on every scored position ≤ T), `tokens:N` (greedy token ids identical for the
 * first N tokens), `kl:T` (each prompt's mean per-position KL estimate ≤ T) and `definition`
 * (no definition warning). Each is decided per prompt; a gate passes when every prompt passes.
 * A pair that was not compared fails every gate (a gate does not pass on no evidence). Pure.
 */

export const GATE_KINDS = ['logits', 'tokens', 'kl', 'definition'] as const;
export type GateKind = (typeof GATE_KINDS)[number];

/** One gate as asked on the command line. */
export interface GateSpec {
  kind: GateKind;
  /** logits/kl: nats; tokens: N; definition: null. */
  threshold: number | null;
  /** How it is written (`logits:0.01`, `tokens:128`, `kl:0.05`, `definition`). */
  name: string;
}

/** The default thresholds: top-10 within 0.01 nats, 128 greedy tokens, KL 0.05 nats. */
export const GATE_DEFAULTS: Readonly<Record<Exclude<GateKind, 'definition'>, number>> = Object.freeze({
  logits: 0.01,
  tokens: 128,
  kl: 0.05,
});

/** Parses `--gate` values (each may hold a comma-separated list); throws an Error naming the bad item. */
export function parseGates(values: readonly string[]): GateSpec[] {
  const out: GateSpec[] = [];
  for (const raw of values.flatMap((v) => v.split(','))) {
    const item = raw.trim();
    if (item === '') continue;
    const [kind, arg, extra] = item.split(':');
    if (!(GATE_KINDS as readonly string[]).includes(kind!) || extra !== undefined)
      throw new Error(`--gate: unknown gate '${item}' (expected logits[:T], tokens[:N], kl[:T] or definition)`);
    const k = kind as GateKind;
    if (k === 'definition') {
      if (arg !== undefined) throw new Error(`--gate: 'definition' takes no value (got '${item}')`);
      out.push({ kind: k, threshold: null, name: 'definition' });
      continue;
    }
    let threshold = GATE_DEFAULTS[k];
    if (arg !== undefined) {
      const n = Number(arg);
      const ok = arg.trim() !== '' && Number.isFinite(n) && (k === 'tokens' ? Number.isInteger(n) && n >= 1 : n >= 0);
      if (!ok)
        throw new Error(
          `--gate ${k}: expected ${k === 'tokens' ? 'a whole number of tokens ≥ 1' : 'a number of nats ≥ 0'}, got '${arg}'`,
        );
      threshold = n;
    }
    const spec: GateSpec = { kind: k, threshold, name: `${k}:${threshold}` };
    // The last of a kind wins: `--gate kl:0.1 --gate kl:0.05` is one gate.
    const at = out.findIndex((g) => g.kind === k);
    if (at >= 0) out[at] = spec;
    else out.push(spec);
  }
  return out;
}

/** What a gate needs to know of one analysed pair. */
export interface GatePair {
  /** The input's place (`prompts.jsonl:3`) and the record's id. */
  at: string;
  id: string;
  route: string;
  /** The mirror's outcome (`ok`, `incomparable`, `candidate_error`, …). */
  outcome: string;
  comparison: Comparison | null;
  /** Generated tokens on each side (null when a side was not parsed). */
  lengths: { candidate: number; baseline: number } | null;
  /** The `max_tokens` (or `max_completion_tokens`) the request asked for, when it names one. */
  maxTokens: number | null;
}

/** One prompt's result under one gate. */
export interface GateCase {
  status: 'passed' | 'failed' | 'error';
  /** The figure the gate reads (logits/kl: nats; tokens: the first differing position, or the positions checked; definition: warnings). */
  figure: number | null;
  /** One line: what was measured against what. */
  message: string;
  /** Why fewer than asked were checked (a cap, a short top list). */
  note?: string;
}

/** A prompt among a gate's worst. */
export interface GateWorst {
  at: string;
  id: string;
  route: string;
  figure: number | null;
  message: string;
}

/** the documented result of one gate (`replay --json` `gates[]`). */
export interface GateResult {
  gate: string;
  kind: GateKind;
  threshold: number | null;
  passed: boolean;
  prompts: number;
  /** Prompts that failed (errors included). */
  failed: number;
  /** Prompts that could not be judged (not compared, nothing to read). */
  errors: number;
  /** The worst prompt's figure: logits the largest difference, kl the largest prompt mean, tokens the earliest differing position (null: none differ), definition the prompts warned. */
  figure: number | null;
  /** kl: the run's pooled mean over every position; logits: the shortest top list read. */
  pooled?: number | null;
  /** One line: the figure against the threshold. */
  summary: string;
  /** Up to five prompts, worst first. */
  worst: GateWorst[];
  /** Caps and limits (max_tokens below N, top lists below 10), each once with its count. */
  notes: string[];
}

/** Judges one pair under one gate: a pair not compared is an error under every gate. */
export function judge(spec: GateSpec, p: GatePair): GateCase {
  const c = p.comparison;
  if (c === null)
    return {
      status: 'error',
      figure: null,
      message: `not compared (${p.outcome}): a gate does not pass on no evidence`,
    };
  switch (spec.kind) {
    case 'logits':
      return judgeLogits(spec.threshold!, c);
    case 'kl':
      return judgeKl(spec.threshold!, c);
    case 'definition':
      return judgeDefinition(c);
    case 'tokens':
      return judgeTokens(spec.threshold!, c, p);
  }
}

/** `logits:T`: the largest |Δ logprob| over each side's top list against T nats. */
function judgeLogits(t: number, c: Comparison): GateCase {
  const l = c.health?.logits;
  if (!l || l.max === null)
    return {
      status: 'error',
      figure: null,
      message:
        'no position with a top list on both sides: the logits gate needs top logprobs (mirror.topLogprobs ≥ 10)',
    };
  const where = l.at ? `${l.at.block} position ${l.at.i}` : 'n/a';
  const note =
    l.topK !== null && l.topK < LOGITS_TOP ? `top lists of ${l.topK} (fewer than the ${LOGITS_TOP} asked)` : undefined;
  const msg = `max |Δ logprob| over each side's ${topLabel(l.topK)} ${l.lowerBound ? '≥ ' : ''}${formatNats(l.max)} ${l.max <= t ? '≤' : '>'} ${t} nats at ${where} (${l.n} positions)`;
  return { status: l.max <= t ? 'passed' : 'failed', figure: l.max, message: msg, ...(note ? { note } : {}) };
}

/** `kl:T`: the prompt's mean KL estimate against T nats. */
function judgeKl(t: number, c: Comparison): GateCase {
  const k = c.health?.kl;
  if (!k || k.mean === null) return { status: 'error', figure: null, message: 'no position with a KL estimate' };
  return {
    status: k.mean <= t ? 'passed' : 'failed',
    figure: k.mean,
    message: `mean KL ${formatNats(k.mean)} ${k.mean <= t ? '≤' : '>'} ${t} nats over ${k.n} ${c.health!.over} positions (max ${formatNats(k.max)})`,
  };
}

/** `definition`: no definition warning on either side. */
function judgeDefinition(c: Comparison): GateCase {
  const w: DefinitionWarning[] = c.definition ?? [];
  if (w.length === 0)
    return {
      status: 'passed',
      figure: 0,
      message: 'no definition warning: both sides read as raw full-vocabulary logprobs',
    };
  return {
    status: 'failed',
    figure: w.length,
    message: w.map((x) => `${x.check} (${x.side}): ${x.detail}`).join('; '),
  };
}

/** `tokens:N`: the greedy token ids identical for the first N tokens (or as far as both sides went). */
function judgeTokens(n: number, c: Comparison, p: GatePair): GateCase {
  const lengths = p.lengths;
  if (c.verdict === 'incomparable' || lengths === null)
    return { status: 'error', figure: null, message: `no tokens to compare (${c.notes[0] ?? c.verdict})` };
  const d = c.firstDivergence;
  if (d !== null && d < n) {
    const f = c.flip;
    return {
      status: 'failed',
      figure: d,
      message: `token ids differ at position ${d} of the first ${n}${f ? ` (baseline ${JSON.stringify(f.baselineToken)}, candidate ${JSON.stringify(f.candidateToken)})` : ''}`,
    };
  }
  const common = Math.min(lengths.candidate, lengths.baseline);
  const capped = p.maxTokens !== null && p.maxTokens < n;
  if (
    d === null &&
    lengths.candidate !== lengths.baseline &&
    common < n &&
    (p.maxTokens === null || common < p.maxTokens)
  ) {
    const shorter = lengths.candidate < lengths.baseline ? 'candidate' : 'baseline';
    return {
      status: 'failed',
      figure: common,
      message: `the ${shorter} stopped after ${common} tokens and the other went on (${lengths.candidate} vs ${lengths.baseline}), within the first ${n}`,
    };
  }
  const checked = Math.min(n, d ?? common);
  const note = capped
    ? `max_tokens ${p.maxTokens} < ${n}: only the first ${p.maxTokens} tokens could be checked`
    : undefined;
  return {
    status: 'passed',
    figure: checked,
    message: `the first ${checked} token ids are identical${checked < n ? ` (${note ? note : `both sides stopped after ${checked}`})` : ''}`,
    ...(note ? { note } : {}),
  };
}

/** Accumulates every gate over the pairs of a run; `onCase` sees each prompt's result (JUnit). */
export class GateAccumulator {
  private readonly state: Array<{
    spec: GateSpec;
    prompts: number;
    failed: number;
    errors: number;
    worst: Array<GateWorst & { rank: number }>;
    notes: Map<string, number>;
    pooled: FigureSum;
    figure: number | null;
    topK: number | null;
    /** tokens: the fewest and most tokens a passing prompt had compared. */
    checked: { min: number; max: number } | null;
  }>;

  constructor(
    readonly specs: readonly GateSpec[],
    private readonly onCase?: (spec: GateSpec, pair: GatePair, result: GateCase) => void,
  ) {
    this.state = specs.map((spec) => ({
      spec,
      prompts: 0,
      failed: 0,
      errors: 0,
      worst: [],
      notes: new Map(),
      pooled: new FigureSum(),
      figure: null,
      topK: null,
      checked: null,
    }));
  }

  add(p: GatePair): void {
    for (const s of this.state) {
      const r = judge(s.spec, p);
      s.prompts++;
      if (r.status !== 'passed') s.failed++;
      if (r.status === 'error') s.errors++;
      if (r.note) s.notes.set(r.note, (s.notes.get(r.note) ?? 0) + 1);
      if (s.spec.kind === 'kl' && p.comparison?.health) s.pooled.merge(p.comparison.health.kl);
      if (s.spec.kind === 'tokens' && r.status === 'passed' && r.figure !== null)
        s.checked = {
          min: Math.min(s.checked?.min ?? r.figure, r.figure),
          max: Math.max(s.checked?.max ?? r.figure, r.figure),
        };
      if (s.spec.kind === 'logits' && p.comparison?.health?.logits.topK != null)
        s.topK = Math.min(s.topK ?? LOGITS_TOP, p.comparison.health.logits.topK);
      const rank = rankOf(s.spec.kind, r);
      if (r.status !== 'passed' || s.spec.kind !== 'definition') {
        if (r.figure !== null && (s.spec.kind === 'tokens' ? r.status === 'failed' : true)) {
          if (s.figure === null || (s.spec.kind === 'tokens' ? r.figure < s.figure : r.figure > s.figure))
            s.figure = r.figure;
        }
        s.worst.push({ at: p.at, id: p.id, route: p.route, figure: r.figure, message: r.message, rank });
        s.worst.sort((a, b) => b.rank - a.rank);
        if (s.worst.length > 5) s.worst.length = 5;
      }
      this.onCase?.(s.spec, p, r);
    }
  }

  results(): GateResult[] {
    return this.state.map((s) => {
      const passed = s.prompts > 0 && s.failed === 0;
      const worst = s.worst.filter((w) => w.rank > -Infinity).map(({ rank: _r, ...w }) => w);
      const notes = [...s.notes].map(([note, n]) => `${n} prompt${n === 1 ? '' : 's'}: ${note}`);
      const base = {
        gate: s.spec.name,
        kind: s.spec.kind,
        threshold: s.spec.threshold,
        passed,
        prompts: s.prompts,
        failed: s.failed,
        errors: s.errors,
        figure: s.figure,
        worst,
        notes,
      };
      const pooled = s.spec.kind === 'kl' ? s.pooled.figure().mean : s.spec.kind === 'logits' ? s.topK : undefined;
      return {
        ...base,
        ...(pooled !== undefined ? { pooled } : {}),
        summary: summaryLine(s.spec, base, pooled ?? null, s.checked),
      };
    });
  }
}

/** Larger is worse; passed prompts rank below failed ones. */
function rankOf(kind: GateKind, r: GateCase): number {
  const failing = r.status === 'passed' ? 0 : 1e9;
  if (r.status === 'error') return 2e9;
  switch (kind) {
    case 'tokens':
      return r.status === 'passed' ? -Infinity : failing - (r.figure ?? 0);
    case 'definition':
      return r.status === 'passed' ? -Infinity : failing + (r.figure ?? 0);
    default:
      return failing + (r.figure ?? 0);
  }
}

/**
 * The top lists the logits figure was read over, as the gate labels it: the k actually read (the
 * shortest list of either side, at most 10, as the health report says it), and when under 10,
 * that the figure is defined on 10.
 */
function topLabel(topK: number | null): string {
  const k = Math.min(topK ?? LOGITS_TOP, LOGITS_TOP);
  return `top-${k}${k < LOGITS_TOP ? ` (top lists of ${k} only, fewer than the ${LOGITS_TOP} the figure is defined on)` : ''}`;
}

/** The tokens gate's passing figure: the tokens actually compared (the gate's N, or fewer where the answers stopped sooner). */
function identicalFor(n: number, checked: { min: number; max: number } | null): string {
  if (checked === null) return 'no prompt had its token ids compared';
  if (checked.min >= n) return `greedy token ids identical for the first ${n}`;
  const span = checked.min === checked.max ? `${checked.min}` : `${checked.min}–${checked.max}`;
  return `greedy token ids identical for the first ${span} tokens (of the ${n} asked: the answers were shorter)`;
}

function summaryLine(
  spec: GateSpec,
  r: Pick<GateResult, 'passed' | 'prompts' | 'failed' | 'errors' | 'figure'>,
  pooled: number | null,
  checked: { min: number; max: number } | null = null,
): string {
  const failing =
    r.failed > 0
      ? `${r.failed} of ${r.prompts} prompts fail${r.errors > 0 ? ` (${r.errors} not judged)` : ''}`
      : `all ${r.prompts} prompts pass`;
  const verb = r.passed ? 'PASS' : 'FAIL';
  switch (spec.kind) {
    case 'logits':
      return `${verb} ${spec.name}: largest |Δ logprob| over each side's ${topLabel(pooled)} ${formatNats(r.figure)} against ${spec.threshold} nats; ${failing}`;
    case 'kl':
      return `${verb} ${spec.name}: worst prompt's mean KL ${formatNats(r.figure)} against ${spec.threshold} nats (run mean ${formatNats(pooled)}); ${failing}`;
    case 'tokens':
      return `${verb} ${spec.name}: ${r.figure === null ? identicalFor(spec.threshold!, checked) : `earliest differing token at position ${r.figure} (of the first ${spec.threshold})`}; ${failing}`;
    case 'definition':
      return `${verb} definition: ${r.failed === 0 ? 'no definition warning' : `definition warnings on ${r.failed - r.errors} prompts`}; ${failing}`;
  }
}

/**
 * The run's health over every compared pair (docs/format.md, `health` of a summary): the pooled
 * KL and relative-error figures, the largest logits difference, and which prompts are worst.
 */
export interface RunHealth {
  pairs: number;
  kl: Figure;
  relErr: Figure;
  logits: { max: number | null; at: string | null; topK: number | null };
  limits: typeof HEALTH_LIMITS;
  /** Whether each figure is within the health thresholds ({@link HEALTH_LIMITS}; null: not measured). */
  ok: { kl: boolean | null; relErrMean: boolean | null; relErrMax: boolean | null };
  /** Up to five pairs by mean KL. */
  worst: Array<{ at: string; id: string; kl: number | null; relErrMax: number | null; logits: number | null }>;
}

/** The definition warnings of a run, by check and side. */
export interface RunDefinition {
  check: DefinitionWarning['check'];
  side: DefinitionWarning['side'];
  pairs: number;
  /** The first pair's detail, and where it was. */
  example: string;
  at: string;
}

/** Accumulates {@link RunHealth} and {@link RunDefinition} (a summary's part). */
export class HealthAccumulator {
  private pairs = 0;
  private readonly kl = new FigureSum();
  private readonly rel = new FigureSum();
  private logits: RunHealth['logits'] = { max: null, at: null, topK: null };
  private worst: RunHealth['worst'] = [];
  private readonly defs = new Map<string, RunDefinition>();

  add(c: Comparison, at: string, id: string): void {
    for (const w of c.definition ?? []) {
      const key = `${w.check} ${w.side}`;
      const known = this.defs.get(key);
      if (known) known.pairs++;
      else if (this.defs.size < 32)
        this.defs.set(key, { check: w.check, side: w.side, pairs: 1, example: w.detail, at });
    }
    const h = c.health;
    if (!h) return;
    this.pairs++;
    this.kl.merge(h.kl);
    this.rel.merge(h.relErr);
    const l = h.logits;
    if (l.max !== null && (this.logits.max === null || l.max > this.logits.max))
      this.logits = { ...this.logits, max: l.max, at };
    if (l.topK !== null) this.logits.topK = Math.min(this.logits.topK ?? LOGITS_TOP, l.topK);
    if (h.kl.mean !== null || h.relErr.max !== null) {
      this.worst.push({ at, id, kl: h.kl.mean, relErrMax: h.relErr.max, logits: l.max });
      this.worst.sort((a, b) => (b.kl ?? -1) - (a.kl ?? -1) || (b.relErrMax ?? -1) - (a.relErrMax ?? -1));
      if (this.worst.length > 5) this.worst.length = 5;
    }
  }

  health(): RunHealth {
    const kl = this.kl.figure();
    const relErr = this.rel.figure();
    return {
      pairs: this.pairs,
      kl,
      relErr,
      logits: { ...this.logits },
      limits: HEALTH_LIMITS,
      ok: {
        kl: kl.mean === null ? null : kl.mean < HEALTH_LIMITS.kl,
        relErrMean: relErr.mean === null ? null : relErr.mean < HEALTH_LIMITS.relErrMean,
        relErrMax: relErr.max === null ? null : relErr.max < HEALTH_LIMITS.relErrMax,
      },
      worst: this.worst.map((w) => ({ ...w })),
    };
  }

  definition(): RunDefinition[] {
    return [...this.defs.values()].map((d) => ({ ...d }));
  }
}

import { VERDICTS, type Verdict } from '../core/index.js';
import { SELF_VERDICTS, type SelfVerdict } from '../core/self.js';
import { Slicer, type SliceOptions } from '../core/slice.js';
import type { MirrorOutcome } from '../pair/types.js';
import type { SummaryEntry } from '../report/summary.js';

/**
 * replay's gate by model (docs/format.md "replay --json", `byModel`): each replayed pair counts in
 * its model slice (src/core/slice.ts) — the capture's `slice.model`, else the request's `model` —
 * and the verdict gate (`--fail-on`) and every `--gate` are decided again on each slice's pairs
 * alone, so that a shift confined to one adapter is named. Bounded as the live slices are
 * (`slices.models` / `slices.maxModels` of `--config`; the rest `other`).
 *
 * The run-level checks stay run-level: `alert` (the offline detectors run over the whole run in
 * input order) and "no pair could be compared"; a model with no compared pair is shown as such and
 * fails only on what `--fail-on` names (its errors).
 */

/** One model's share of the run and its gate. */
export interface ModelGate {
  model: string;
  pairs: number;
  /** Pairs compared candidate against baseline (baseline-free: none; see `self`). */
  compared: number;
  verdicts: Record<Verdict, number>;
  uncompared: Partial<Record<MirrorOutcome, number>>;
  /** Repeat probes by self verdict (baseline-free runs). */
  self: Record<SelfVerdict, number>;
  /** Each `--gate` on this model's prompts. */
  gates: Array<{ gate: string; prompts: number; failed: number }>;
  /** What failed the gate for this model (`global_shift 28`, `logits:0.01 on 3 of 30 prompts`); empty when it passed. */
  failedOn: string[];
  passed: boolean;
}

interface Tally {
  pairs: number;
  verdicts: Record<Verdict, number>;
  uncompared: Partial<Record<MirrorOutcome, number>>;
  self: Record<SelfVerdict, number>;
  gates: Map<string, { prompts: number; failed: number }>;
}

const zeros = <K extends string>(keys: readonly K[]): Record<K, number> =>
  Object.fromEntries(keys.map((k) => [k, 0])) as Record<K, number>;

/** Counts a replay's pairs and gate cases by model, and decides the gate per model. */
export class ModelGates {
  private readonly slicer: Slicer;
  private readonly tallies = new Map<string, Tally>();

  constructor(slices: SliceOptions) {
    this.slicer = new Slicer(slices);
  }

  /** The slice a pair counts in, bounded (a name past the bound is `other`, none `none`). */
  slice(model: unknown): string {
    return this.slicer.model({ model });
  }

  private of(model: string): Tally {
    let t = this.tallies.get(model);
    if (!t) {
      t = { pairs: 0, verdicts: zeros(VERDICTS), uncompared: {}, self: zeros(SELF_VERDICTS), gates: new Map() };
      this.tallies.set(model, t);
    }
    return t;
  }

  /** One pair, as the summary counts it: a verdict, an uncompared outcome, or (baseline-free) its repeats' verdicts. */
  add(model: string, e: SummaryEntry): void {
    const t = this.of(model);
    t.pairs++;
    for (const r of e.repeats ?? []) if (r.verdict !== null) t.self[r.verdict]++;
    if (e.result.baselineFree) return;
    const c = e.result.comparison;
    if (c === null) t.uncompared[e.result.outcome] = (t.uncompared[e.result.outcome] ?? 0) + 1;
    else t.verdicts[c.verdict]++;
  }

  /** One prompt's result under a `--gate`. */
  gateCase(model: string, gate: string, status: 'passed' | 'failed' | 'error'): void {
    const g = this.of(model).gates;
    const s = g.get(gate) ?? { prompts: 0, failed: 0 };
    s.prompts++;
    if (status !== 'passed') s.failed++;
    g.set(gate, s);
  }

  /** Each model's gate under `failOn` (`alert` is run-level: not here), failing models first, then by name. */
  results(failOn: ReadonlySet<string>): ModelGate[] {
    const out = [...this.tallies].map(([model, t]): ModelGate => {
      const count = (name: string): number =>
        name === 'self_inconsistent'
          ? t.self.self_inconsistent
          : ((t.verdicts as Record<string, number>)[name] ?? (t.uncompared as Record<string, number>)[name] ?? 0);
      const failedOn = [...failOn].filter((v) => v !== 'alert' && count(v) > 0).map((v) => `${v} ${count(v)}`);
      const gates = [...t.gates].map(([gate, s]) => ({ gate, ...s }));
      for (const g of gates) if (g.failed > 0) failedOn.push(`${g.gate} on ${g.failed} of ${g.prompts} prompts`);
      const compared = VERDICTS.reduce((n, v) => n + t.verdicts[v], 0);
      return { model, pairs: t.pairs, compared, ...pick(t), gates, failedOn, passed: failedOn.length === 0 };
    });
    return out.sort((a, b) => Number(a.passed) - Number(b.passed) || a.model.localeCompare(b.model));
  }
}

function pick(t: Tally): Pick<ModelGate, 'verdicts' | 'uncompared' | 'self'> {
  return { verdicts: t.verdicts, uncompared: t.uncompared, self: t.self };
}

/** The part of the gate line naming the models that failed it (empty with one model: the line is the model's). */
export function failedModelsNote(models: readonly ModelGate[]): string {
  const failed = models.filter((m) => !m.passed).map((m) => m.model);
  if (models.length < 2 || failed.length === 0) return '';
  return `; failed in model${failed.length === 1 ? '' : 's'} ${failed.join(', ')}`;
}

/**
 * The text table of the gate by model (shown with more than one model): each model's pairs, its
 * non-zero verdicts and uncompared outcomes (columns present in any model), and its gate.
 */
export function renderModelTable(models: readonly ModelGate[]): string {
  const cols = [
    ...VERDICTS.filter((v) => models.some((m) => m.verdicts[v] > 0)),
    ...(['self_inconsistent'] as const).filter(() => models.some((m) => m.self.self_inconsistent > 0)),
    ...[...new Set(models.flatMap((m) => Object.keys(m.uncompared)))],
  ];
  const cell = (m: ModelGate, c: string): string =>
    String(
      c === 'self_inconsistent'
        ? m.self.self_inconsistent
        : ((m.verdicts as Record<string, number>)[c] ?? (m.uncompared as Record<string, number>)[c] ?? 0),
    );
  const head = ['model', 'pairs', ...cols, 'gate'];
  const rows = models.map((m) => [
    m.model,
    String(m.pairs),
    ...cols.map((c) => cell(m, c)),
    m.passed ? 'PASS' : `FAIL: ${m.failedOn.join(', ')}`,
  ]);
  const width = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (i === head.length - 1 ? 0 : r[i]!.length))));
  const line = (r: string[]) =>
    `  ${r.map((x, i) => (i === 0 ? x.padEnd(width[i]!) : i === r.length - 1 ? x : x.padStart(width[i]!))).join('  ')}`;
  return ['Gate by model', line(head), ...rows.map(line), ''].join('\n');
}

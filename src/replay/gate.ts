import type { GateResult } from '../core/gates.js';
import type { MirrorOutcome } from '../pair/types.js';
import type { Summary, SummaryData } from '../report/summary.js';
import { failedModelsNote, type ModelGate } from './models.js';

/** The CI gate's decision over a replay, and the one line that says it. */
export interface GateDecision {
  passed: boolean;
  /** `gate: PASS (…)` or `gate: FAIL (…)`, naming what failed it. */
  line: string;
}

/**
 * Decides the gate: it fails when a verdict or outcome named by `failOn` occurred (`alert`: the
 * offline detectors fired over the run), and also when no pair at all could be compared — a
 * candidate that is down must not pass on no evidence. With `models` (more than one), a failing
 * line names the models that failed it (src/replay/models.ts).
 */
export function decideGate(
  summary: Summary,
  data: SummaryData,
  failOn: ReadonlySet<string>,
  gates: readonly GateResult[] = [],
  models: readonly ModelGate[] = [],
): GateDecision {
  const hits = [...failOn]
    .filter((v) => v !== 'alert' && summary.count([v]) > 0)
    .map((v) => withReasons(data, v, summary.count([v])));
  if (failOn.has('alert') && summary.alertsFired > 0) hits.push(`alert ${data.alerts.map((a) => a.alert).join(', ')}`);
  // The named gates (--gate, src/core/gates.ts): each fails on its own prompts.
  for (const g of gates) if (!g.passed) hits.push(`${g.gate} on ${g.failed} of ${g.prompts} prompts`);
  if (hits.length > 0) return { passed: false, line: `gate: FAIL (${hits.join(', ')}${failedModelsNote(models)})` };
  if (data.compared === 0 && summary.selfCompared === 0)
    return { passed: false, line: `gate: FAIL (no pair could be compared: ${noEvidence(data)})` };
  const named = gates.length > 0 ? `; ${gates.map((g) => g.gate).join(', ')} passed` : '';
  return {
    passed: true,
    line: `gate: PASS (${failOn.size ? `no ${[...failOn].join(', no ')}` : '--fail-on none'}${named})`,
  };
}

/**
 * An outcome and its count, with its most frequent reasons when it is an uncompared one:
 * `candidate_error 24: ECONNREFUSED 127.0.0.1:39999`, or `… 24: ECONNREFUSED … ×20, HTTP 503 ×4`.
 */
export function withReasons(data: SummaryData, name: string, count: number): string {
  const reasons = data.uncomparedReasons[name as MirrorOutcome] ?? [];
  if (reasons.length === 0) return `${name} ${count}`;
  const one = reasons.length === 1 && reasons[0]!.count === count;
  return `${name} ${count}: ${reasons.map((r) => (one ? r.reason : `${r.reason} ×${r.count}`)).join(', ')}`;
}

/** Why a run compared nothing: its uncompared outcomes with their reasons, most frequent first. */
function noEvidence(data: SummaryData): string {
  const outcomes = Object.entries(data.uncompared)
    .filter(([, n]) => (n ?? 0) > 0)
    .sort((a, b) => (b[1] ?? 0) - (a[1] ?? 0));
  return outcomes.length > 0
    ? outcomes.map(([o, n]) => withReasons(data, o, n ?? 0)).join('; ')
    : 'a gate does not pass on no evidence';
}

import type { Summary, SummaryData } from '../report/summary.js';

/** The CI gate's decision over a replay, and the one line that says it. */
export interface GateDecision {
  passed: boolean;
  /** `gate: PASS (…)` or `gate: FAIL (…)`, naming what failed it. */
  line: string;
}

/**
 * Decides the gate: it fails when a verdict or outcome named by `failOn` occurred (`alert`: the
 * offline detectors fired over the run), and also when no pair at all could be compared — a
 * candidate that is down must not pass on no evidence.
 */
export function decideGate(summary: Summary, data: SummaryData, failOn: ReadonlySet<string>): GateDecision {
  const hits = [...failOn].filter((v) => v !== 'alert' && summary.count([v]) > 0).map((v) => `${v} ${summary.count([v])}`);
  if (failOn.has('alert') && summary.alertsFired > 0) hits.push(`alert ${data.alerts.map((a) => a.alert).join(', ')}`);
  if (hits.length > 0) return { passed: false, line: `gate: FAIL (${hits.join(', ')})` };
  if (data.compared === 0) return { passed: false, line: 'gate: FAIL (no pair could be compared: a gate does not pass on no evidence)' };
  return { passed: true, line: `gate: PASS (${failOn.size ? `no ${[...failOn].join(', no ')}` : '--fail-on none'})` };
}

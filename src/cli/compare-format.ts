import { formatNats, HEALTH_LIMITS, healthMarks, type Comparison, type Thresholds } from '../core/index.js';

const RED = '\u001b[31m';
const YELLOW = '\u001b[33m';
const BOLD = '\u001b[1m';
const RESET = '\u001b[0m';

/**
 * The human-readable report of `logprobe compare`: the per-token table (position, token,
 * candidate and baseline logprob, diff, baseline top-1/top-2 gap, shift) with shifted cells
 * marked `*` (and red when `color`), then the summary, the flip line, the verdict and its
 * explanation.
 */
export function renderComparison(r: Comparison, t: Thresholds, color: boolean): string {
  const paint = (s: string, code: string): string => (color ? `${code}${s}${RESET}` : s);
  const lines: string[] = [];
  if (r.positions.length > 0) {
    lines.push(...positionTable(r, t, paint));
    lines.push(
      "top gap: the baseline's top-1 − top-2 at the position (the flip's gap below is lp_b(A) − lp_b(B), its own token against the candidate's)",
    );
    lines.push('');
  }
  const share = r.shiftedFraction === null ? 'n/a' : `${(r.shiftedFraction * 100).toFixed(0)}%`;
  lines.push(
    `free-running: comparable ${r.comparable}, aligned ${r.aligned}, shifted ${r.shifted} (${share} above ${formatNats(t.noiseFloor)} nats), ` +
      `max |diff| ${formatNats(r.maxAbsDiff)}, mean |diff| ${formatNats(r.meanAbsDiff)}, max shift ${formatNats(r.maxShift)}`,
  );
  lines.push(flipLine(r));
  const scored = scoredLine(r);
  if (scored !== null) lines.push(scored);
  if (r.prompt)
    lines.push(
      `prompt: ${r.prompt.comparable} positions from ${r.prompt.start}, shifted ${r.prompt.shifted}, prompt max shift ${formatNats(r.prompt.maxShift)}`,
    );
  if (r.locus) lines.push(`locus: ${r.locus}`);
  const health = healthLine(r);
  if (health !== null) lines.push(health);
  for (const d of r.definition ?? []) lines.push(`definition: ${d.check} (${d.side}): ${d.detail}`);
  for (const note of r.notes) lines.push(`note: ${note}`);
  lines.push(`verdict: ${paint(r.verdict, BOLD)}`);
  lines.push(r.explanation);
  return `${lines.join('\n')}\n`;
}

/** The per-token table: a shifted cell red, a flipped token yellow (when painting). */
function positionTable(r: Comparison, t: Thresholds, paint: (s: string, code: string) => string): string[] {
  const lines: string[] = [];
  const header = ['pos', 'token', 'candidate', 'baseline', 'diff', 'top gap', 'shift'];
  const rows = r.positions.map((p) => {
    const token = p.candidateToken === undefined ? show(p.token) : `${show(p.token)}→${show(p.candidateToken)}`;
    const shifted = p.shift !== null && p.shift > t.noiseFloor;
    return {
      cells: [
        String(p.i),
        token,
        num(p.candidate),
        num(p.baseline),
        signed(p.diff),
        num(p.gap),
        shifted ? `${num(p.shift)}*` : num(p.shift),
      ],
      shifted,
      flip: p.candidateToken !== undefined,
    };
  });
  const widths = header.map((h, k) => Math.max(h.length, ...rows.map((row) => row.cells[k]!.length)));
  const fit = (cells: string[]): string[] =>
    cells.map((c, k) => (k === 1 ? c.padEnd(widths[k]!) : c.padStart(widths[k]!)));
  lines.push(fit(header).join('  '));
  for (const row of rows) {
    const cells = fit(row.cells);
    if (row.shifted) cells[6] = paint(cells[6]!, RED);
    if (row.flip) cells[1] = paint(cells[1]!, YELLOW);
    lines.push(cells.join('  '));
  }
  return lines;
}

/** The first flip (where the greedy paths part), or that there is none. */
function flipLine(r: Comparison): string {
  const f = r.flip;
  if (f) {
    const gap = f.gap === null ? 'unknown' : `${f.lowerBound ? '≥ ' : ''}${formatNats(f.gap)}`;
    const cross = f.crossPathDiff === null ? 'n/a' : signed(f.crossPathDiff);
    const top = r.positions.find((p) => p.i === f.index)?.gap ?? null;
    const topNote =
      top === null || formatNats(top) === formatNats(f.gap)
        ? ''
        : ` (top gap there ${formatNats(top)}: the baseline's top-2 is not the candidate's token)`;
    return `flip at ${f.index}: baseline ${show(f.baselineToken)} → candidate ${show(f.candidateToken)}, flip gap lp_b(A) − lp_b(B) ${gap} nats (${f.class})${topNote}, cross-path diff ${cross}`;
  }
  return 'flip: none';
}

/** The teacher-forced scoring's summary (null: not scored). */
function scoredLine(r: Comparison): string | null {
  const s = r.scored;
  if (s?.outcome === 'ok') {
    const sshare =
      s.shiftedFraction === null || s.shiftedFraction === undefined
        ? 'n/a'
        : `${(s.shiftedFraction * 100).toFixed(0)}%`;
    return `scored ${s.comparable} teacher-forced positions (${s.method}, ${s.mode}): shifted ${s.shifted} (${sshare}), teacher-forced max shift ${formatNats(s.maxShift ?? null)}`;
  } else if (s) {
    return `scored: ${s.outcome} (${s.reason ?? 'no reason given'})`;
  }
  return null;
}

/** The health figures against their thresholds (null: none measured). */
function healthLine(r: Comparison): string | null {
  const h = r.health;
  if (h) {
    const m = healthMarks(h);
    const fig = (x: number | null, ok: boolean | null, limit: number) =>
      `${x === null ? 'n/a' : x.toPrecision(2)}${ok === false ? ` (above ${limit})` : ''}`;
    return `health (${h.over === 'scored' ? 'teacher-forced' : 'free-running'} positions): KL mean ${fig(h.kl.mean, m.kl, HEALTH_LIMITS.kl)}, relative error mean ${fig(h.relErr.mean, m.relErrMean, HEALTH_LIMITS.relErrMean)}, max ${fig(h.relErr.max, m.relErrMax, HEALTH_LIMITS.relErrMax)}; largest |Δ logprob| over each side's top-${Math.min(h.logits.topK ?? 10, 10)} ${formatNats(h.logits.max)}`;
  }
  return null;
}

function show(token: string): string {
  const s = JSON.stringify(token);
  return s.length > 26 ? `${s.slice(0, 24)}…"` : s;
}

function num(x: number | null): string {
  return x === null ? '—' : formatNats(x);
}

function signed(x: number | null): string {
  if (x === null) return '—';
  const s = formatNats(x);
  return x > 0 ? `+${s}` : s;
}

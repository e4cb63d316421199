import {
  formatNats,
  HEALTH_LIMITS,
  LOGITS_TOP,
  type GateResult,
  type RunDefinition,
  type RunHealth,
} from '../core/index.js';
import { esc } from './html-svg.js';

/**
 * The health figures, the definition warnings and the gates in the reports of `analyze`,
 * `replay` and the training comparison (text and HTML).
 */

/** What the reports show besides the summary: health (every run), definition warnings, gates (when asked). */
export interface HealthReport {
  health: RunHealth;
  definition: RunDefinition[];
  gates?: GateResult[];
}

const int = (n: number): string => n.toLocaleString('en-US');

function mark(ok: boolean | null): string {
  return ok === null ? 'n/a' : ok ? 'ok' : 'ABOVE';
}

/** The figure lines: value, mark, threshold. */
function rows(h: RunHealth): Array<[string, number | null, boolean | null, string]> {
  return [
    ['KL mean', h.kl.mean, h.ok.kl, `< ${HEALTH_LIMITS.kl}`],
    ['relative error mean', h.relErr.mean, h.ok.relErrMean, `< ${HEALTH_LIMITS.relErrMean}`],
    ['relative error max', h.relErr.max, h.ok.relErrMax, `< ${HEALTH_LIMITS.relErrMax}`],
  ];
}

/** The text lines (no trailing blank line). */
export function healthLines(r: HealthReport): string[] {
  const h = r.health;
  const out: string[] = [];
  out.push(
    `health (KL over ${int(h.kl.n)} positions, relative error |p_c − p_b| / p_b of the chosen token over ${int(h.relErr.n)}, ${int(h.pairs)} pairs)`,
  );
  for (const [name, v, ok, limit] of rows(h))
    out.push(
      `  ${name.padEnd(21)}${(v === null ? 'n/a' : v.toPrecision(3)).padStart(10)}  ${mark(ok).padEnd(5)} (${limit})`,
    );
  if (h.logits.max !== null) {
    const k = Math.min(h.logits.topK ?? LOGITS_TOP, LOGITS_TOP);
    out.push(
      `  largest |Δ logprob| over each side's top-${k}: ${formatNats(h.logits.max)} nats${h.logits.at ? ` (${h.logits.at})` : ''}${k < LOGITS_TOP ? ` — top lists of ${k} only, fewer than the ${LOGITS_TOP} the figure is defined on` : ''}`,
    );
  }
  const worst = h.worst.filter((w) => (w.kl ?? 0) > 0 || (w.relErrMax ?? 0) > 0).slice(0, 3);
  if (worst.length > 0)
    out.push(
      `  worst: ${worst.map((w) => `${w.at} (KL ${w.kl === null ? 'n/a' : w.kl.toPrecision(2)}, rel. err max ${w.relErrMax === null ? 'n/a' : w.relErrMax.toPrecision(2)})`).join('; ')}`,
    );
  if (r.definition.length > 0) {
    out.push(
      '',
      'definition warnings (the two sides may not be the same quantity: compare definitions before numbers)',
    );
    for (const d of r.definition)
      out.push(
        `  ${d.check} (${d.side}) on ${int(d.pairs)} pair${d.pairs === 1 ? '' : 's'}, first ${d.at}: ${d.example}`,
      );
  }
  if (r.gates && r.gates.length > 0) {
    out.push('', 'gates');
    for (const g of r.gates) {
      out.push(`  ${g.summary}`);
      const bad = g.worst.filter((w) => g.passed === false && w.message !== '').slice(0, g.passed ? 0 : 3);
      bad.forEach((w, i) => out.push(`     ${i + 1}. ${w.at}  ${w.message}`));
      for (const n of g.notes) out.push(`     note: ${n}`);
    }
  }
  return out;
}

/** The HTML section (`<section id="health">`), inline styles from the report's sheet only. */
export function healthHtml(r: HealthReport): string {
  const h = r.health;
  const badge = (ok: boolean | null) =>
    ok === null
      ? '<span class="badge">n/a</span>'
      : ok
        ? '<span class="badge v-noise">ok</span>'
        : '<span class="badge v-global_shift">above</span>';
  const trs = rows(h)
    .map(
      ([name, v, ok, limit]) =>
        `<tr data-health="${esc(name)}"><th scope="row">${esc(name)}</th><td class="num">${v === null ? 'n/a' : esc(v.toPrecision(3))}</td><td>${badge(ok)}</td><td class="muted">${esc(limit)}</td></tr>`,
    )
    .join('');
  const logits =
    h.logits.max === null
      ? ''
      : `<p>Largest |Δ logprob| over each side's top-${Math.min(h.logits.topK ?? LOGITS_TOP, LOGITS_TOP)}: <strong>${esc(formatNats(h.logits.max))}</strong> nats${h.logits.at ? ` (<code>${esc(h.logits.at)}</code>)` : ''}.</p>`;
  const defs =
    r.definition.length === 0
      ? '<p class="muted">No definition warning: both sides read as raw full-vocabulary logprobs.</p>'
      : `<h3>Definition warnings</h3><ul id="definition">${r.definition.map((d) => `<li data-check="${esc(d.check)}"><strong>${esc(d.check)}</strong> (${esc(d.side)}), ${int(d.pairs)} pair${d.pairs === 1 ? '' : 's'}, first <code>${esc(d.at)}</code>: ${esc(d.example)}</li>`).join('')}</ul>`;
  const gates =
    r.gates && r.gates.length > 0
      ? `<h3>Gates</h3><table id="gates"><thead><tr><th>gate</th><th>result</th><th class="num">failing prompts</th><th>figure</th><th>worst prompts</th></tr></thead><tbody>${r.gates
          .map(
            (g) =>
              `<tr data-gate="${esc(g.gate)}" data-passed="${g.passed}"><th scope="row"><code>${esc(g.gate)}</code></th><td>${g.passed ? '<span class="badge v-noise">PASS</span>' : '<span class="badge v-global_shift">FAIL</span>'}</td><td class="num">${int(g.failed)} / ${int(g.prompts)}</td><td>${esc(g.summary.replace(/^(PASS|FAIL) [^:]+: /, ''))}${g.notes.map((n) => `<br><span class="muted">${esc(n)}</span>`).join('')}</td><td>${g.worst
                .filter(() => !g.passed)
                .slice(0, 5)
                .map((w) => `<code>${esc(w.at)}</code> ${esc(w.message)}`)
                .join('<br>')}</td></tr>`,
          )
          .join('')}</tbody></table>`
      : '';
  return `<section id="health"><h2>Health</h2><p>Health figures over ${int(h.pairs)} pairs (KL over ${int(h.kl.n)} positions; relative error |p<sub>c</sub> − p<sub>b</sub>| / p<sub>b</sub> of the chosen token over ${int(h.relErr.n)}).</p><table class="health"><tbody>${trs}</tbody></table>${logits}${defs}${gates}</section>`;
}

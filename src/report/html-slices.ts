import { formatNats } from '../core/index.js';
import { PATH_VERDICTS } from '../core/path.js';
import { CACHE_SPLITS } from '../core/slice.js';
import { esc } from './html-svg.js';
import { SHIFT_VERDICTS } from './slices.js';
import type { SummaryData } from './summary.js';
import { alertName, cacheRuleText, cacheSentence, VERDICT_ORDER } from './text.js';

const int = (n: number): string => n.toLocaleString('en-US');

/** The verdicts present in a count, most alarming first, as text. */
function mix(verdicts: Readonly<Record<string, number>>, order: readonly string[]): string {
  return (
    order
      .filter((v) => (verdicts[v] ?? 0) > 0)
      .map((v) => `${v} ${int(verdicts[v]!)}`)
      .join(', ') || '—'
  );
}

/** What the offline detectors would have raised: each alert's first firing per model (and backend). */
export function alertsSection(d: SummaryData): string {
  if (d.alerts.length === 0) return '';
  const items = d.alerts.map(
    (a) =>
      `<li data-alert="${esc(a.alert)}" data-model="${esc(a.model)}"${a.backend ? ` data-backend="${a.backend}"` : ''} data-at-pair="${a.atPair}"><strong>${esc(alertName(a, d))}</strong> would fire at pair ${int(a.atPair)}, id <code>${esc(a.id)}</code> (<code>${esc(a.where)}</code>; pooled share ${a.pooledShare.toFixed(2)}, CUSUM ${a.cusum.toFixed(1)}).</li>`,
  );
  return `<section id="alerts"><h2>Detectors</h2><p class="muted">The in-process detectors replayed over the pairs in capture order${d.models.length > 1 ? ', each model with its own, as online' : ''}.</p><ul>${items.join('')}</ul></section>`;
}

/** Each model's own figures (only when the input had more than one model). */
export function modelsSection(d: SummaryData): string {
  if (d.models.length < 2) return '';
  const rows = d.models.map((m) => {
    const shifted = SHIFT_VERDICTS.reduce((n, v) => n + m.verdicts[v], 0);
    const det = m.detector;
    const alerts = d.alerts.filter((a) => a.model === m.model).map((a) => esc(alertName(a, { models: [] })));
    return `<tr data-model="${esc(m.model)}"><th scope="row">${esc(m.model)}</th><td class="num">${int(m.compared)}</td><td class="num" data-shifted="${shifted}">${int(shifted)}</td><td>${esc(mix(m.verdicts, VERDICT_ORDER))}</td><td class="num">${det ? det.share.toFixed(2) : '—'}</td><td class="num">${det ? det.cusum.toFixed(1) : '—'}</td><td class="num">${det ? det.pValue.toFixed(3) : '—'}</td><td>${alerts.join('<br>') || '—'}</td></tr>`;
  });
  return `<section id="models"><h2>By model</h2><p>${d.models.length} models, each with its own detectors (window, CUSUM, permutation test), as online; their figures after the last pair.</p><table class="models"><thead><tr><th>model</th><th class="num">compared</th><th class="num">shifted</th><th>verdicts</th><th class="num">window share</th><th class="num">CUSUM</th><th class="num">p-value</th><th>alerts</th></tr></thead><tbody>${rows.join('')}</tbody></table></section>`;
}

/** The verdicts by cache split per model, and the sentence where shifts concentrate on hits. */
export function cacheSection(d: SummaryData): string {
  const known = d.models.filter((m) => m.cache.hit.compared + m.cache.miss.compared > 0);
  if (known.length === 0) return '';
  const rows = known.flatMap((m) =>
    CACHE_SPLITS.map((c) => {
      const cell = m.cache[c];
      return `<tr data-model="${esc(m.model)}" data-cache="${c}"><th scope="row">${esc(m.model)}</th><td>${c}</td><td class="num">${int(cell.compared)}</td><td class="num" data-shifted="${cell.shifted}">${int(cell.shifted)}</td><td>${esc(mix(cell.verdicts, VERDICT_ORDER))}</td></tr>`;
    }),
  );
  const suspects = known
    .filter((m) => m.cacheSuspect)
    .map((m) => `<p class="cache-suspect">${esc(cacheSentence(m))}.</p>`);
  return `<section id="cache"><h2>Cache split</h2><p>Pair verdicts by whether the candidate's copy read part of its prompt from its prefix cache, as its engine reported (compared: not incomparable, not prompt_mismatch). A model's shifts concentrate on hits when ${esc(cacheRuleText(d))}.</p><table class="cache"><thead><tr><th>model</th><th>cache</th><th class="num">compared</th><th class="num">shifted</th><th>verdicts</th></tr></thead><tbody>${rows.join('')}</tbody></table>${suspects.join('')}</section>`;
}

/** Each backend's path checks (decode vs its own prefill of the same tokens). */
export function pathSection(d: SummaryData): string {
  if (d.paths.length === 0) return '';
  const order = [...PATH_VERDICTS].reverse();
  const rows = d.paths.flatMap((p) => {
    const h = p.pairMaxShift;
    const median = h.n > 0 ? medianUpper(h) : null;
    const head = `<tr data-backend="${p.backend}" data-model="*"><th scope="row">${p.backend}</th><td>all</td><td class="num">${int(p.outcomes.ok)}</td><td>${esc(mix(p.verdicts, order))}</td><td class="num">${median === null ? '—' : `≤ ${formatNats(median)}`}</td><td class="num">${formatNats(h.max)}</td></tr>`;
    const byModel =
      d.models.length > 1
        ? p.models.map(
            (m) =>
              `<tr data-backend="${p.backend}" data-model="${esc(m.model)}"><th scope="row"></th><td>${esc(m.model)}</td><td class="num">${int(PATH_VERDICTS.reduce((n, v) => n + m.verdicts[v], 0))}</td><td>${esc(mix(m.verdicts, order))}</td><td></td><td></td></tr>`,
          )
        : [];
    return [head, ...byModel];
  });
  const notChecked = d.paths
    .map(
      (p) =>
        `${p.backend}: unsupported ${int(p.outcomes.unsupported)}, skipped ${int(p.outcomes.skipped)}, failed ${int(p.outcomes.failed)}`,
    )
    .join('; ');
  return `<section id="paths"><h2>Decode vs prefill (the path check)</h2><p>Each backend's decode-time logprobs of the tokens it generated against its own prefill of the same tokens. Not checked — ${esc(notChecked)}.</p><table class="paths"><thead><tr><th>backend</th><th>model</th><th class="num">checked</th><th>verdicts</th><th class="num">median max shift</th><th class="num">max shift</th></tr></thead><tbody>${rows.join('')}</tbody></table></section>`;
}

/** The upper edge of the bucket holding the median (the figure the text report prints as `p50 ≤`). */
function medianUpper(h: SummaryData['positionShift']): number | null {
  const target = Math.max(1, Math.ceil(0.5 * h.n));
  let seen = 0;
  for (let i = 0; i < h.counts.length; i++) {
    seen += h.counts[i]!;
    if (seen >= target) return i < h.edges.length ? Math.min(h.edges[i]!, h.max ?? Infinity) : h.max;
  }
  return h.max;
}

import { formatNats } from '../core/index.js';
import { coarsen, type HistogramData } from './histogram.js';
import { pageScript } from './scripts.js';
import { HTML_STYLE } from './html-style.js';
import { esc, svgHistogram, svgShareChart, svgStackedBar, type Bar } from './html-svg.js';
import { gapBucketLabel } from './threshold.js';
import { flipStopSentence } from './text.js';
import { healthHtml } from './health-text.js';
import { alertsSection, cacheSection, modelsSection, pathSection } from './html-slices.js';
import type { Strip } from './strips.js';
import { FLIP_CLASSES, type SummaryData } from './summary.js';
import { ABSENCE_NOTE, notableWorst, VERDICT_ORDER, type ReportContext } from './text.js';

/** What the page says about its inputs. */
export interface HtmlContext extends ReportContext {
  title: string;
  inputs: readonly string[];
  /** Strips per page (default 25, clamped to 1–200). */
  perPage?: number;
}

const int = (n: number): string => n.toLocaleString('en-US');

/** JSON for a `<script type="application/json">`: `<` escaped so that no `</script>` can end it early. */
function embedJson(value: unknown): string {
  return JSON.stringify(value)
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

/** Position-shift histogram: 5 bars per decade from 1e-5 to 10 nats, zero apart, the floor marked. */
function shiftChart(h: HistogramData, floors: readonly number[]): string {
  const keep = [0];
  for (let e = -50; e <= 10; e += 2) keep.push(Number((10 ** (e / 10)).toPrecision(6)));
  const c = coarsen(h, keep);
  const label = (i: number) =>
    i === 0
      ? '0'
      : i >= keep.length
        ? `> ${keep[keep.length - 1]}`
        : `(${formatNats(keep[i - 1]!)}, ${formatNats(keep[i]!)}]`;
  const bars: Bar[] = c.counts.map((count, i) => ({
    label: `shift ${label(i)} nats`,
    segments: [
      { count, cls: i === 0 ? 's-zero' : keep[i]! <= (floors[0] ?? 0.1) ? 's-noise' : 's-shift', name: 'positions' },
    ],
  }));
  // Bar 0 holds exact zeros; bar i ≥ 1 spans x ∈ [i, i+1] and ends at keep[i], so a value v ≥ 1e-5 sits at x = 2 + 5(log10 v + 5).
  const at = (v: number) => 2 + 5 * (Math.log10(v) + 5);
  const ticks = [-5, -4, -3, -2, -1, 0, 1].map((k) => ({ index: at(10 ** k), text: `1e${k}` }));
  ticks.unshift({ index: 0.5, text: '0' });
  const markers = floors.slice(0, 3).map((f) => ({ at: at(f), label: `floor ${formatNats(f)}` }));
  return svgHistogram({
    id: 'shift-hist',
    title: `Position shift over ${int(h.n)} comparable free-running positions (log scale)`,
    bars,
    ticks,
    markers,
    xLabel: 'position shift, nats (log scale)',
  });
}

/** Flip-gap histogram: 0.1-nat bars up to 3 nats, stacked by class, the two gap thresholds marked. */
function flipChart(d: SummaryData, ctx: HtmlContext): string {
  const keep: number[] = [];
  for (let i = 1; i <= 30; i++) keep.push(Number((i * 0.1).toFixed(6)));
  const byClass = Object.fromEntries(FLIP_CLASSES.map((c) => [c, coarsen(d.flips[c], keep)])) as Record<
    string,
    HistogramData
  >;
  const bars: Bar[] = [];
  for (let i = 0; i <= keep.length; i++) {
    const label = i === keep.length ? '> 3 nats' : `gap ${(i * 0.1).toFixed(1)}–${keep[i]!.toFixed(1)} nats`;
    bars.push({
      label,
      segments: FLIP_CLASSES.map((c) => ({ count: byClass[c]!.counts[i]!, cls: `c-${c}`, name: c })),
    });
  }
  const ticks = [0, 0.5, 1, 1.5, 2, 2.5, 3].map((v) => ({ index: v * 10, text: String(v) }));
  const markers = [
    { at: ctx.gapAmbiguous * 10, label: `ambiguous < ${ctx.gapAmbiguous}` },
    { at: ctx.gapSystematic * 10, label: `systematic > ${ctx.gapSystematic}` },
  ];
  const n = FLIP_CLASSES.reduce((s, c) => s + d.flips[c].n, 0);
  return svgHistogram({
    id: 'flip-hist',
    title: `Flip gap of ${int(n)} diverging pairs, by class`,
    bars,
    ticks,
    markers,
    xLabel: 'flip gap lp_b(A) − lp_b(B), nats',
  });
}

/** The threshold model: the share of positions that flipped per baseline-gap bucket, and where flips stop. */
function flipCurveSection(d: SummaryData, ctx: HtmlContext): string {
  const fc = d.flipCurve;
  if (fc.positions.every((n) => n === 0) || fc.flips.every((f) => f === 0)) return '';
  const points = fc.positions.map((n, i) => ({
    label: gapBucketLabel(fc.edges, i),
    share: n > 0 ? fc.flips[i]! / n : 0,
    detail: `${int(fc.flips[i]!)} of ${int(n)} positions flipped`,
  }));
  let marker;
  if (fc.stop !== null) {
    const g = fc.stop.gap;
    const i = fc.edges.findIndex((e) => g <= e);
    const lo = i <= 0 ? 0 : fc.edges[i - 1]!;
    const at = i < 0 ? fc.edges.length + 0.5 : i + (g - lo) / (fc.edges[i]! - lo);
    marker = { at, label: `flips stop ≈ ${formatNats(g)}` };
  }
  const chart = svgShareChart({
    id: 'flip-curve',
    title: "Share of positions that flipped, by the baseline's top-1 − top-2 gap",
    points,
    ...(marker ? { marker } : {}),
    xLabel: "baseline's top-1 − top-2 gap at the position, nats",
  });
  return `<section id="flip-curve-section"><h2>Flip share by gap (the threshold model)</h2><p>Every comparable position, by the baseline's gap between its top two tokens (the force a flip there needs); a flip is a pair's first divergence. Float noise flips only near-ties; a systematic shift of size s flips the tokens whose gap is below about s.</p>${chart}<p id="flip-stop">${esc(flipStopSentence(fc, ctx.gapAmbiguous, d.positionShift))}</p></section>`;
}

/** Canary pairs, counted apart: per model, the rounds and their probes' verdicts. */
function canarySection(d: SummaryData): string {
  if (d.canaries.length === 0) return '';
  const rows = d.canaries.map((c) => {
    const verdicts = VERDICT_ORDER.filter((v) => (c.verdicts[v] ?? 0) > 0)
      .map((v) => `<span class="badge v-${v}">${v}</span> ${int(c.verdicts[v] ?? 0)}`)
      .join(' ');
    return `<tr data-model="${esc(c.model)}"><th scope="row">${esc(c.model)}</th><td class="num">${int(c.rounds)}</td><td class="num">${int(c.pairs)}</td><td>${verdicts}</td></tr>`;
  });
  return `<section id="canaries"><h2>Canaries</h2><p class="muted">logprobe's own probes, judged online per round (LogprobCanaryShift); not in the figures above.</p><table><thead><tr><th>model</th><th>rounds</th><th>probes</th><th>verdicts</th></tr></thead><tbody>${rows.join('')}</tbody></table></section>`;
}

function verdictSection(d: SummaryData): string {
  const rows = VERDICT_ORDER.map(
    (v) =>
      `<tr data-verdict="${v}"><th scope="row"><span class="badge v-${v}">${v}</span></th><td class="num count" data-count="${d.verdicts[v]}">${int(d.verdicts[v])}</td><td class="num">${d.compared ? ((100 * d.verdicts[v]) / d.compared).toFixed(1) : '0.0'}%</td></tr>`,
  );
  const unc = Object.entries(d.uncompared)
    .filter(([, n]) => (n ?? 0) > 0)
    .map(
      ([k, n]) =>
        `<tr data-outcome="${esc(k)}"><th scope="row">${esc(k)}</th><td class="num count" data-count="${n}">${int(n ?? 0)}</td><td class="num muted">not compared</td></tr>`,
    );
  const bar = svgStackedBar({
    id: 'verdict-bar',
    title: 'Verdict mix',
    parts: VERDICT_ORDER.map((v) => ({ name: v, count: d.verdicts[v], cls: `v-${v}` })),
  });
  const changed =
    d.changed === null
      ? ''
      : `<p>${int(d.changed)} of ${int(d.pairs)} verdicts differ from the ones captured online.</p>`;
  return `<section id="verdicts"><h2>Verdict mix</h2>
<p><span id="pairs-total" data-count="${d.pairs}">${int(d.pairs)}</span> pairs, <span id="pairs-compared" data-count="${d.compared}">${int(d.compared)}</span> compared.</p>
${bar}<table class="verdicts"><thead><tr><th>verdict</th><th class="num">pairs</th><th class="num">share</th></tr></thead><tbody>${rows.join('')}${unc.join('')}</tbody></table>${changed}
<p class="note">Note: ${esc(ABSENCE_NOTE)}</p></section>`;
}

/** A strip's prompt for a table cell: the first characters, or that it was hashed. */
function promptCell(s: Strip, chars = 160): string {
  const p = s.input;
  if (!p) return '<span class="muted">—</span>';
  if ('hashed' in p) return '<span class="muted">prompt hashed (capture.includePrompts: false)</span>';
  const text = [...p.text];
  const more = text.length > chars || p.cut > 0;
  return `${esc(text.slice(0, chars).join(''))}${more ? '<span class="muted"> …</span>' : ''}`;
}

/** "×N similar": the pairs a folded row or strip stands for (the same prompt and verdict). */
function similarBadge(s: Strip): string {
  return s.similar
    ? ` <span class="similar" title="${s.similar + 1} pairs with this prompt and verdict; the worst of them is shown">×${s.similar + 1} similar</span>`
    : '';
}

/** What each verdict and flip class means, said once for the page (the cards and rows keep their own figures). */
const VERDICT_MEANING: Record<string, string> = {
  global_shift:
    'Most comparable positions moved above the noise floor: every decode step moved, not decode-time noise. Where a pair was scored with its prompt, its locus says where: compute (the prompt moved too: weights, kernels, a layer — compare the computation) or decode state (only the continuation: suspect the KV cache / state — compare it where it is written, in the cache medium and where it is read back).',
  early_shift:
    'Diverged within the first few tokens with a real shift: too few positions to localise from one pair alone. Pooled over many pairs (the alert window online, the offline detectors here) it says whether every step moved.',
  local_shift:
    'Specific positions moved above the noise floor: suspect a token-specific path (a vocabulary slice, an embedding row, a sampling-side change).',
  prompt_mismatch:
    "The two sides read different prompt tokens for the same request: the chat template or the tokenizer of the candidate differs from the baseline's, so their logprobs are not compared. The first differing prompt token of each side is shown where the engines tokenize on request.",
  tokenizer_mismatch:
    'The same text with other token boundaries: the servers tokenize or detokenize differently, so their logprobs cannot be compared token by token.',
  noise:
    'No comparable position moved more than the noise floor and no flip is systematic. A noise verdict does not prove there is no bug: a large-gap flip proves presence; small differences do not prove absence.',
  identical: 'Every chosen token, logprob and top-k entry is exactly equal.',
  incomparable: 'A side has no usable logprobs.',
};

function keySection(d: SummaryData, ctx: HtmlContext): string {
  const present = VERDICT_ORDER.filter((v) => d.verdicts[v] > 0);
  if (present.length === 0) return '';
  const verdicts = present
    .map((v) => `<dt><span class="badge v-${v}">${v}</span></dt><dd>${esc(VERDICT_MEANING[v] ?? '')}</dd>`)
    .join('');
  const flips = FLIP_CLASSES.some((c) => d.flips[c].n > 0)
    ? `<dt>flip classes</dt><dd>At the first divergence the gap lp<sub>b</sub>(A) − lp<sub>b</sub>(B) is the force a flip needs: <span class="badge c-ambiguous">ambiguous</span> below ${esc(ctx.gapAmbiguous)} nats, a near-tie float noise can flip, so it cannot be attributed; <span class="badge c-gray">gray</span> between the thresholds, not attributable on its own; <span class="badge c-systematic">systematic</span> above ${esc(ctx.gapSystematic)}, more force than float noise supplies: the distributions themselves moved.</dd>`
    : '';
  return `<section id="key"><h2>What the verdicts say</h2><p class="muted">Once for the page; each row and strip below keeps its own figures (its full explanation is folded in its strip).</p><dl class="key">${verdicts}${flips}</dl></section>`;
}

/** The strips' colour scale, relative to each pair's noise floor (the same as the strips' own colour()). */
export function shiftColour(ratio: number | null): string {
  if (ratio === null) return 'var(--unknown)';
  if (ratio <= 1) {
    const a = ratio <= 0 ? 0 : Math.max(0, Math.min(1, 1 + Math.log10(ratio) / 4));
    return `hsl(146, 40%, ${(95 - 15 * a).toFixed(0)}%)`;
  }
  const r = Math.max(0, Math.min(1, Math.log10(ratio)));
  return `hsl(${(50 - 50 * r).toFixed(0)}, 95%, ${(70 - 18 * r).toFixed(0)}%)`;
}

function legend(): string {
  const steps: Array<[number | null, string]> = [
    [0, '0'],
    [0.1, '0.1×'],
    [0.5, '0.5×'],
    [1, '1× floor'],
    [2, '2×'],
    [5, '5×'],
    [10, '≥ 10×'],
    [null, 'no shift known'],
  ];
  const swatches = steps
    .map(([r, label]) => `<span class="tok" style="background: ${shiftColour(r)}">${esc(label)}</span>`)
    .join('');
  return `<div class="legend" id="legend"><span>Shift relative to the pair's noise floor:</span>${swatches}<span class="muted">green: at or below the floor; yellow to red: 1× to 10× above it. Each token has its own outline; the flip is boxed with its gap.</span></div>`;
}

function worstSection(d: SummaryData, top: number): string {
  const rows = notableWorst(d, top).map((s, i) => {
    const f = s.flip
      ? `@${s.flip.index} ${esc(JSON.stringify(s.flip.baselineToken))}→${esc(JSON.stringify(s.flip.candidateToken))}, gap ${s.flip.gap === null ? '?' : `${s.flip.lowerBound ? '≥ ' : ''}${formatNats(s.flip.gap)}`} (${s.flip.class})`
      : '—';
    return `<tr><td class="num">${i + 1}</td><td><span class="badge v-${s.verdict}">${s.verdict}</span>${similarBadge(s)}</td><td class="num">${formatNats(s.maxShift)}</td><td class="num">${s.shifted}/${s.comparable}</td><td class="num">${s.forced ? formatNats(s.forced.maxShift) : '—'}</td><td class="num">${s.forced ? `${s.forced.shifted}/${s.forced.comparable}` : '—'}</td><td>${f}</td><td class="prompt-cell">${promptCell(s)}</td><td><code>${esc(s.at)}</code><br><span class="muted">${esc(s.id)} ${esc(s.route)}</span></td></tr>`;
  });
  if (rows.length === 0) {
    const s = d.worst[0];
    return s
      ? `<section id="worst"><h2>Worst pairs</h2><p>None with a shift, a tokenizer mismatch or a systematic flip (largest free-running max shift ${formatNats(s.maxShift)}, <code>${esc(s.at)}</code>).</p></section>`
      : '';
  }
  return `<section id="worst"><h2>Worst pairs</h2><p class="muted">One row per prompt and verdict: ×N similar folds the pairs that asked the same and got the same verdict (the worst is shown). What each verdict means: above.</p><table class="worst"><thead><tr><th>#</th><th>verdict</th><th class="num" title="up to the divergence">free-running max shift</th><th class="num">shifted</th><th class="num" title="the baseline's sequence scored on both backends: what the verdict counts">teacher-forced max shift</th><th class="num">shifted</th><th>flip gap</th><th>prompt</th><th>record</th></tr></thead><tbody>${rows.join('')}</tbody></table></section>`;
}

/**
 * The self-contained HTML report: the verdict mix, histograms of position shift and flip gap
 * (inline SVG), the worst pairs, and token strips coloured by shift with the flip and its gap
 * marked and both sides' top-k on hover. The strips cover a bounded selection (the worst pairs
 * plus a uniform sample, said on the page), paginated client-side from an embedded JSON blob.
 * Inline CSS and script only: nothing is loaded from anywhere.
 */
export function renderHtml(d: SummaryData, ctx: HtmlContext): string {
  const perPage = Math.min(200, Math.max(1, ctx.perPage ?? 25));
  const nStrips = d.worst.length + d.sampled.length;
  const selection =
    nStrips === 0
      ? 'No pair was compared, so there is no token strip.'
      : `Token strips for ${int(nStrips)} of ${int(d.pairs)} pairs: the ${int(d.worst.length)} worst (by verdict, then max shift), plus the ${int(d.sampled.length)} others of a uniform random sample of ${int(d.sampleDrawn)} pairs (seeded, so the same input gives the same page; a prompt already shown is not shown again); ${perPage} per page. Hover a token for both sides' top-k.`;
  const alerts = alertsSection(d);
  const skipped = d.skipped
    ? `<section id="skipped"><h2>Skipped lines (${int(d.skipped)})</h2><ul>${d.skippedExamples.map((m) => `<li><code>${esc(m)}</code></li>`).join('')}</ul></section>`
    : '';
  const flips = FLIP_CLASSES.map(
    (c) =>
      `<tr data-flip-class="${c}"><th scope="row"><span class="badge c-${c}">${c}</span></th><td class="num count" data-count="${d.flips[c].n}">${int(d.flips[c].n)}</td></tr>`,
  ).join('');
  const options = ['all', ...VERDICT_ORDER]
    .map((v) => `<option value="${v}">${v === 'all' ? 'all verdicts' : v}</option>`)
    .join('');
  const blob = embedJson({ perPage, worst: d.worst, sampled: d.sampled });
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(ctx.title)}</title><link rel="icon" href="data:,"><style>${HTML_STYLE}</style></head>
<body><header><h1>${esc(ctx.title)}</h1>
<p class="muted">Inputs: ${ctx.inputs.map((f) => `<code>${esc(f)}</code>`).join(', ')}. Thresholds: ${esc(ctx.thresholds)}.</p></header>
<main>${verdictSection(d)}${modelsSection(d)}${cacheSection(d)}${ctx.health ? healthHtml(ctx.health) : ''}${alerts}${pathSection(d)}${canarySection(d)}
<section id="shift"><h2>Position shift (free-running)</h2><p>max |lp<sub>c</sub>(t) − lp<sub>b</sub>(t)| over the tokens both top-k lists hold, at every comparable free-running position (${int(d.positionShift.n)}: up to each pair's divergence; the teacher-forced positions are in each strip and the worst table).</p>${shiftChart(d.positionShift, d.noiseFloors)}</section>
<section id="flips"><h2>Flip gap</h2><p>At the first divergence, the force a flip needs: lp<sub>b</sub>(A) − lp<sub>b</sub>(B)${d.flips.lowerBound ? `; ${int(d.flips.lowerBound)} are lower bounds (the candidate's token outside the baseline's top-k)` : ''}.</p>${flipChart(d, ctx)}<table class="flips"><tbody>${flips}</tbody></table></section>${flipCurveSection(d, ctx)}
${keySection(d, ctx)}${worstSection(d, ctx.top ?? 10)}
<section id="strips"><h2>Token strips</h2><p id="strip-selection">${esc(selection)}</p>${nStrips > 0 ? legend() : ''}
<div class="controls"><label>Verdict <select id="verdict-filter">${options}</select></label> <button id="prev" type="button">← previous</button> <span id="page-info"></span> <button id="next" type="button">next →</button></div>
<div id="strip-list"></div></section>${skipped}</main>
<div id="tip" role="tooltip"></div>
<script type="application/json" id="report-data">${blob}</script>
<script>${pageScript('report')}</script>
</body></html>
`;
}

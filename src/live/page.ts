import { HTML_STYLE } from '../report/html-style.js';
import { pageScript } from '../report/scripts.js';
import { esc } from '../report/html-svg.js';

/**
 * The live page (GET /ui on the admin port): one HTML document with its style and script inline —
 * nothing from any other origin, and the Content-Security-Policy the admin server sends with it
 * (`default-src 'none'`, the script and style by nonce, `connect-src 'self'`) says so to the
 * browser. The script polls GET /ui/data (src/live/feed.ts's LiveData, relayed from the mirror's
 * worker) every {@link POLL_MS} ms and draws: every in-process alert and its state, a row per
 * model slice (worst first: its pairs, verdicts, window, CUSUM, p-value, alerts and path checks),
 * the verdict mix, the window's pooled share and CUSUM over the last minutes (inline SVG), and the last pairs
 * as the HTML report's token strips (src/browser/strip.ts; the script is src/browser/live.ts), the flip boxed and both sides'
 * top-k on hover.
 */

/** How often the page polls. */
export const POLL_MS = 1500;

const LIVE_STYLE = `
header p { margin: 2px 0; }
.grid2 { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 0 28px; }
@media (max-width: 900px) { .grid2 { grid-template-columns: minmax(0, 1fr); } }
#status.stale { color: #c0392b; }
.a-firing { background: #c0392b; } .a-resolving { background: #e67e22; } .a-pending { background: #b7950b; } .a-inactive { background: #7f8c8d; }
table.alerts { width: 100%; } table.alerts td { font-size: 13px; } table.alerts td.evidence { color: var(--muted); }
.mixbar { display: flex; height: 16px; border-radius: 4px; overflow: hidden; background: var(--line); margin: 8px 0; }
.mixbar span { display: block; height: 100%; min-width: 2px; }
table.mix td, table.mix th { padding: 2px 10px; }
.charts { display: flex; flex-wrap: wrap; gap: 8px 28px; }
.live-chart { width: 500px; max-width: 100%; height: auto; }
.live-chart .line { fill: none; stroke-width: 1.8; } .live-chart .share { stroke: #2471a3; } .live-chart .cusum { stroke: #7d3c98; }
.live-chart .limit { stroke: #c0392b; stroke-dasharray: 5 3; stroke-width: 1.2; } .live-chart .limit-label { fill: #c0392b; }
.live-chart .title { fill: var(--fg); font-size: 12px; font-weight: 600; }
.live-pair .live-prompt { margin: 2px 0 4px; font-size: 13px; overflow-wrap: anywhere; }
.live-pair .live-prompt::before { content: "prompt: "; color: var(--muted); }
.repeats { font-size: 12px; }
table.models td.verdicts .badge, table.models td.model-alerts .badge { font-size: 11px; margin: 1px 0; }
table.models td.num { white-space: nowrap; }
.pair-model { font-size: 12px; color: var(--muted); margin-left: 6px; }
.live-pair .explanation { display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2; line-clamp: 2; overflow: hidden; cursor: pointer; }
.live-pair .explanation.open { display: block; }
`;

/** The page; `nonce` matches the Content-Security-Policy the admin server sends with it. */
export function renderLivePage(nonce: string): string {
  const n = esc(nonce);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>logprobe live</title><link rel="icon" href="data:,"><style nonce="${n}">${HTML_STYLE}${LIVE_STYLE}</style></head>
<body><header><h1>logprobe live</h1><p id="settings" class="muted"></p><p id="status">connecting…</p></header>
<main>
<section id="backends"><h2>Backends</h2><table class="alerts"><thead><tr><th>backend</th><th>state</th><th>engine</th><th>last error</th></tr></thead><tbody id="backend-body"></tbody></table></section>
<section id="alerts"><h2>Alerts</h2><p class="muted">The worst model's pair alerts (the window below is its), and each backend's self-consistency alert firing in any model; every model's own are in Models.</p><table class="alerts"><thead><tr><th>alert</th><th>state</th><th>since</th><th>last transition</th></tr></thead><tbody id="alert-body"></tbody></table></section>
<section id="models"><h2>Models</h2><p class="muted">One row per model slice (the request's <code>model</code>; at most <code>slices.maxModels</code> names, the rest <code>other</code>), worst first: alerts firing, then pending, then the larger pooled share and CUSUM. Window: pooled share / comparable requests in it; p: the permutation test / pairs it had.</p><table class="alerts models"><thead><tr><th>model</th><th>pairs</th><th>verdicts</th><th>window</th><th>CUSUM</th><th>p</th><th>alerts</th><th>path check (last)</th></tr></thead><tbody id="model-body"></tbody></table><p id="no-models" class="muted">No model yet.</p></section>
<div class="grid2">
<section id="mix"><h2>Verdict mix</h2><p class="muted"><span id="pairs-total">0</span> mirrored pairs since the start</p><div id="mix-bar" class="mixbar"></div><table class="mix"><tbody id="mix-body"></tbody></table><p id="mix-notes" class="muted"></p></section>
<section id="detectors"><h2>The window</h2><p id="window-now" class="muted"></p><div class="charts"><svg id="share-chart" class="chart live-chart" viewBox="0 0 500 150" role="img" aria-label="pooled share over time"></svg><svg id="cusum-chart" class="chart live-chart" viewBox="0 0 500 150" role="img" aria-label="CUSUM over time"></svg></div></section>
</div>
<section id="pairs"><h2>Last pairs</h2><p class="muted">The newest mirrored pairs first (at most <span id="pairs-bound">50</span>), as the report draws them: each token coloured by its shift relative to the noise floor (pale green at or below it, yellow to red from 1× to 10× above), the flip boxed with its gap; hover a token for both sides' top-k, click an explanation to read it whole.</p><p id="no-pairs" class="muted">No pair yet.</p><div id="pair-list"></div></section>
</main>
<div id="tip" role="tooltip"></div>
<script nonce="${n}">${pageScript('live', { POLL_MS })}</script>
</body></html>
`;
}

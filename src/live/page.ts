import { HTML_STYLE } from '../report/html-style.js';
import { STRIP_CLIENT } from '../report/strip-client.js';
import { esc } from '../report/html-svg.js';

/**
 * The live page (GET /ui on the admin port): one HTML document with its style and script inline —
 * nothing from any other origin, and the Content-Security-Policy the admin server sends with it
 * (`default-src 'none'`, the script and style by nonce, `connect-src 'self'`) says so to the
 * browser. The script polls GET /ui/data (src/live/feed.ts's LiveData, relayed from the mirror's
 * worker) every {@link POLL_MS} ms and draws: every in-process alert and its state, the verdict
 * mix, the window's pooled share and CUSUM over the last minutes (inline SVG), and the last pairs
 * as the HTML report's token strips (src/report/strip-client.ts), the flip boxed and both sides'
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
.live-pair .explanation { display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2; line-clamp: 2; overflow: hidden; cursor: pointer; }
.live-pair .explanation.open { display: block; }
`;

const LIVE_SCRIPT = String.raw`
(function () {
  'use strict';
${STRIP_CLIENT}
  var POLL_MS = ${POLL_MS};
  var DATA = location.pathname.replace(/\/+$/, '') + '/data';
  var SVG = 'http://www.w3.org/2000/svg';
  var VERDICTS = ['global_shift', 'early_shift', 'local_shift', 'tokenizer_mismatch', 'noise', 'identical', 'incomparable'];
  var state = { since: 0, sinceT: 0, pairs: [], series: [], byN: {}, settings: null, shown: {} };
  var statusEl = document.getElementById('status');
  var list = document.getElementById('pair-list');
  var tip = document.getElementById('tip');

  function clock(ms) { return new Date(ms).toLocaleTimeString([], { hour12: false }); }
  function ago(ms, now) {
    var s = Math.max(0, Math.round((now - ms) / 1000));
    return s < 90 ? s + ' s ago' : Math.round(s / 60) + ' min ago';
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }

  function renderSettings(s, floor) {
    var parts = ['mode ' + s.mode, 'candidate ' + s.candidate, s.baseline ? 'baseline ' + s.baseline : 'baseline-free (repeats)', 'sample rate ' + s.sampleRate,
      'window ' + s.window + ' (min ' + s.minRequests + '), fire at ' + s.fireFraction + ' held ' + s.forSeconds + ' s', 'CUSUM k ' + s.cusumK + ', h ' + s.cusumH];
    if (floor !== null) parts.push('noise floor ' + nats(floor));
    document.getElementById('settings').textContent = parts.join(' \u00b7 ');
  }

  // Each backend the mirror sends to: reachable or not, its engine, the last failed copy and its cause.
  function renderBackends(backends, now) {
    var body = document.getElementById('backend-body');
    clear(body);
    (backends || []).forEach(function (b) {
      var tr = el('tr');
      tr.setAttribute('data-backend', b.backend);
      tr.setAttribute('data-state', b.state);
      var name = el('td');
      name.appendChild(el('strong', null, b.backend));
      name.appendChild(el('span', 'muted', ' ' + b.host));
      tr.appendChild(name);
      var st = el('td');
      st.appendChild(el('span', 'badge ' + (b.state === 'unreachable' ? 'a-firing' : 'a-inactive'), b.state));
      tr.appendChild(st);
      tr.appendChild(el('td', 'muted', b.engine ? b.engine + (b.version ? ' ' + b.version : '') : ''));
      tr.appendChild(el('td', 'evidence', b.lastError ? b.lastError.outcome + ': ' + b.lastError.reason + ' (' + ago(b.lastError.at, now) + '; ' + b.failures + ' failed copies since the start)' : 'no failure'));
      body.appendChild(tr);
    });
  }

  function renderAlerts(alerts, now) {
    var body = document.getElementById('alert-body');
    clear(body);
    alerts.forEach(function (a) {
      var tr = el('tr');
      tr.setAttribute('data-alert', a.alert + (a.backend ? '/' + a.backend : ''));
      tr.setAttribute('data-phase', a.phase);
      var name = el('td');
      name.appendChild(el('strong', null, a.alert));
      if (a.backend) name.appendChild(el('span', 'muted', ' ' + a.backend));
      tr.appendChild(name);
      var st = el('td');
      st.appendChild(el('span', 'badge a-' + a.phase, a.phase));
      tr.appendChild(st);
      tr.appendChild(el('td', 'muted', a.since === null ? '' : 'since ' + clock(a.since) + ' (' + ago(a.since, now) + ')'));
      var ev = '';
      if (a.last) {
        var e = a.last.evidence;
        ev = a.last.to + ' at ' + clock(a.last.at) + ': pooled share ' + e.pooledShare.toFixed(2) + ' over the last ' + e.requestsInWindow + ' compared requests, CUSUM ' + e.cusum.toFixed(1) +
          (e.medianShift !== null ? ', median per-request max shift ' + nats(e.medianShift) + ' nats (free-running and teacher-forced positions)' : '') + (e.exampleRequestId ? ', e.g. request ' + e.exampleRequestId : '');
      }
      tr.appendChild(el('td', 'evidence', ev));
      body.appendChild(tr);
    });
  }

  function renderMix(d) {
    var bar = document.getElementById('mix-bar');
    var body = document.getElementById('mix-body');
    clear(bar);
    clear(body);
    var total = VERDICTS.reduce(function (n, v) { return n + (d.verdicts[v] || 0); }, 0);
    VERDICTS.forEach(function (v) {
      var n = d.verdicts[v] || 0;
      if (n > 0) {
        var seg = el('span', 'v-' + v);
        seg.style.width = (100 * n / total) + '%';
        seg.title = v + ': ' + n;
        bar.appendChild(seg);
      }
      var tr = el('tr');
      tr.setAttribute('data-verdict', v);
      var th = el('th');
      th.appendChild(el('span', 'badge v-' + v, v));
      tr.appendChild(th);
      tr.appendChild(el('td', 'num count', n));
      tr.appendChild(el('td', 'num muted', total ? (100 * n / total).toFixed(1) + '%' : ''));
      body.appendChild(tr);
    });
    var out = Object.keys(d.outcomes).filter(function (k) { return k !== 'ok'; }).map(function (k) { return k + ' ' + d.outcomes[k]; });
    var self = ['candidate', 'baseline'].map(function (b) {
      var s = d.self[b];
      var n = Object.keys(s).reduce(function (m, k) { return m + s[k]; }, 0);
      var pr = d.probes[b];
      var off = ['not_cold', 'not_warm', 'unprobed'].filter(function (k) { return pr[k]; }).map(function (k) { return k + ' ' + pr[k]; });
      return n ? b + ' repeats: ' + Object.keys(s).filter(function (k) { return s[k]; }).map(function (k) { return k + ' ' + s[k]; }).join(', ') + (off.length ? ' (not seen by the alert: ' + off.join(', ') + ')' : '') : null;
    }).filter(Boolean);
    document.getElementById('pairs-total').textContent = String(Object.keys(d.outcomes).reduce(function (n, k) { return n + d.outcomes[k]; }, 0));
    document.getElementById('mix-notes').textContent = [total + ' compared'].concat(out.length ? ['not compared: ' + out.join(', ')] : []).concat(self).join(' \u00b7 ');
  }

  function svg(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = text;
    return e;
  }
  // A line chart of one figure over the last settings.seconds, with its firing limit dashed.
  function chart(id, title, key, limit, limitLabel, fixedMax, now) {
    var box = document.getElementById(id);
    clear(box);
    var W = 500, H = 150, L = 40, R = 10, T = 22, B = 22;
    var span = state.settings.seconds * 1000;
    var pts = state.series.filter(function (p) { return p.t >= now - span; });
    var max = fixedMax !== null ? fixedMax : Math.max(limit * 1.25, pts.reduce(function (m, p) { return Math.max(m, p[key]); }, 0) * 1.1, 1);
    var x = function (t) { return L + (W - L - R) * (1 - (now - t) / span); };
    var y = function (v) { return T + (H - T - B) * (1 - Math.min(v, max) / max); };
    box.appendChild(svg('text', { x: L, y: 14, class: 'title' }, title));
    [0, 0.5, 1].forEach(function (f) {
      box.appendChild(svg('line', { x1: L, x2: W - R, y1: y(max * f), y2: y(max * f), class: 'grid' }));
      box.appendChild(svg('text', { x: L - 4, y: y(max * f) + 4, 'text-anchor': 'end' }, String(Number((max * f).toPrecision(2)))));
    });
    [5, 4, 3, 2, 1, 0].forEach(function (m) {
      var t = now - m * span / 5;
      box.appendChild(svg('text', { x: x(t), y: H - 6, 'text-anchor': 'middle' }, m === 0 ? 'now' : '\u2212' + Math.round(m * span / 5 / 1000) + ' s'));
    });
    box.appendChild(svg('line', { x1: L, x2: W - R, y1: y(limit), y2: y(limit), class: 'limit' }));
    box.appendChild(svg('text', { x: L + 4, y: y(limit) - 4, class: 'limit-label' }, limitLabel));
    if (pts.length > 0) box.appendChild(svg('polyline', { class: 'line ' + key, points: pts.map(function (p) { return x(p.t).toFixed(1) + ',' + y(p[key]).toFixed(1); }).join(' ') }));
    var last = pts[pts.length - 1];
    box.setAttribute('data-last', last ? String(last[key]) : '');
  }

  function pairCard(p) {
    var wrap = el('div', 'live-pair');
    wrap.setAttribute('data-seq', String(p.seq));
    var card;
    if (p.strip) {
      card = renderStrip(p.strip, p.verdict === null && p.repeats.length ? 'repeat of the ' + p.repeats[0].backend + ' (baseline-free)' : null);
    } else {
      card = el('article', 'strip');
      card.setAttribute('data-pair', String(p.seq));
      var head = el('div', 'strip-head');
      head.appendChild(el('span', 'badge', p.outcome));
      head.appendChild(el('span', 'pair-id', '#' + p.seq + ' ' + p.id));
      head.appendChild(el('span', 'muted', p.ts.slice(11, 19) + 'Z ' + p.route));
      head.appendChild(el('span', 'muted', p.unbuilt ? 'no strip: it came while no page was open' : p.outcome === 'ok' ? '' : 'not compared'));
      card.appendChild(head);
    }
    if (p.prompt) card.insertBefore(el('p', 'live-prompt', p.prompt), card.children[1] || null);
    if (p.repeats.length) card.appendChild(el('p', 'repeats muted', p.repeats.map(function (r) { return r.backend + ' repeat: ' + (r.verdict || 'failed') + (r.verdict && r.probe !== 'cold_warm' ? ' (' + r.probe + ')' : ''); }).join(' \u00b7 ')));
    wrap.appendChild(card);
    return wrap;
  }

  function renderPairs() {
    // Newest first; cards already on the page stay (the pointer's tooltip survives a refresh).
    var keep = {};
    state.pairs.forEach(function (p) { keep[p.seq] = true; });
    Object.keys(state.shown).forEach(function (seq) {
      if (!keep[seq]) { list.removeChild(state.shown[seq]); delete state.shown[seq]; }
    });
    state.pairs.forEach(function (p) {
      if (state.shown[p.seq]) return;
      var card = pairCard(p);
      state.shown[p.seq] = card;
      list.insertBefore(card, list.firstChild);
    });
    var empty = document.getElementById('no-pairs');
    empty.style.display = state.pairs.length ? 'none' : 'block';
  }

  function apply(msg) {
    if (!msg || msg.worker !== 'up') {
      statusEl.className = 'stale';
      statusEl.textContent = (msg && msg.worker === 'down' ? 'the mirror\u2019s worker is not running' : msg && msg.worker === 'off' ? 'no mirror in this process' : 'the mirror\u2019s worker did not answer in time') + ': showing what was last received';
      return;
    }
    var d = msg.data;
    state.settings = d.settings;
    d.pairs.forEach(function (p) { state.pairs.push(p); if (p.strip) state.byN[p.seq] = p.strip; });
    state.pairs = state.pairs.filter(function (p) { return p.seq >= d.oldest; }).slice(-d.settings.pairs);
    Object.keys(state.byN).forEach(function (n) { if (Number(n) < d.oldest) delete state.byN[n]; });
    state.series = state.series.concat(d.series).filter(function (p) { return p.t >= d.now - d.settings.seconds * 1000; });
    state.since = d.seq;
    if (d.series.length) state.sinceT = d.series[d.series.length - 1].t;
    renderSettings(d.settings, d.noiseFloor);
    document.getElementById('pairs-bound').textContent = String(d.settings.pairs);
    renderBackends(d.backends, d.now);
    renderAlerts(d.alerts, d.now);
    renderMix(d);
    chart('share-chart', 'pooled share of shifted positions (window of ' + d.settings.window + ')', 'share', d.settings.fireFraction, 'fires at ' + d.settings.fireFraction, 1, d.now);
    chart('cusum-chart', 'CUSUM of maxShift / noise floor', 'cusum', d.settings.cusumH, 'h = ' + d.settings.cusumH, null, d.now);
    document.getElementById('window-now').textContent = 'now: pooled share ' + d.window.share.toFixed(2) + ' over ' + d.window.requests + ' requests, CUSUM ' + d.window.cusum.toFixed(1) +
      (d.window.pvalue === undefined ? '' : ', permutation test p = ' + (d.window.pvalue < 0.01 ? d.window.pvalue.toExponential(1) : d.window.pvalue.toFixed(2)) + ' over ' + d.window.pvaluePairs + ' pairs');
    renderPairs();
    statusEl.className = '';
    statusEl.textContent = 'updated ' + clock(d.now) + ' \u00b7 every ' + (POLL_MS / 1000) + ' s';
  }

  function poll() {
    fetch(DATA + '?since=' + state.since + '&t=' + state.sinceT, { cache: 'no-store' })
      .then(function (r) { return r.json(); })
      .then(apply, function () { apply(null); })
      .then(function () { setTimeout(poll, POLL_MS); }, function (err) { statusEl.textContent = 'page error: ' + err; setTimeout(poll, POLL_MS); });
  }
  attachTips(list, tip, function (n) { return state.byN[n]; });
  // An explanation shows two lines; a click shows it whole.
  list.addEventListener('click', function (ev) {
    var p = ev.target.closest && ev.target.closest('.explanation');
    if (p) p.classList.toggle('open');
  });
  poll();
})();
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
<section id="alerts"><h2>Alerts</h2><table class="alerts"><thead><tr><th>alert</th><th>state</th><th>since</th><th>last transition</th></tr></thead><tbody id="alert-body"></tbody></table></section>
<div class="grid2">
<section id="mix"><h2>Verdict mix</h2><p class="muted"><span id="pairs-total">0</span> mirrored pairs since the start</p><div id="mix-bar" class="mixbar"></div><table class="mix"><tbody id="mix-body"></tbody></table><p id="mix-notes" class="muted"></p></section>
<section id="detectors"><h2>The window</h2><p id="window-now" class="muted"></p><div class="charts"><svg id="share-chart" class="chart live-chart" viewBox="0 0 500 150" role="img" aria-label="pooled share over time"></svg><svg id="cusum-chart" class="chart live-chart" viewBox="0 0 500 150" role="img" aria-label="CUSUM over time"></svg></div></section>
</div>
<section id="pairs"><h2>Last pairs</h2><p class="muted">The newest mirrored pairs first (at most <span id="pairs-bound">50</span>), as the report draws them: each token coloured by its shift relative to the noise floor (pale green at or below it, yellow to red from 1× to 10× above), the flip boxed with its gap; hover a token for both sides' top-k, click an explanation to read it whole.</p><p id="no-pairs" class="muted">No pair yet.</p><div id="pair-list"></div></section>
</main>
<div id="tip" role="tooltip"></div>
<script nonce="${n}">${LIVE_SCRIPT}</script>
</body></html>
`;
}

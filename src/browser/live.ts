/**
 * The live page's script (src/live/page.ts): polls GET /ui/data every POLL_MS ms and draws the
 * alerts, a row per model slice (worst first), the verdict mix, the window's pooled share and CUSUM (inline SVG) and the last pairs as
 * the report's token strips (strip.ts).
 */
(function () {
  const DATA = location.pathname.replace(/\/+$/, '') + '/data';
  const SVG = 'http://www.w3.org/2000/svg';
  const VERDICTS = [
    'global_shift',
    'early_shift',
    'local_shift',
    'prompt_mismatch',
    'tokenizer_mismatch',
    'noise',
    'identical',
    'incomparable',
  ];
  // What /ui/data sends (src/live/feed.ts's LiveData), read loosely.
  const state = {
    since: 0,
    sinceT: 0,
    pairs: [] as any[],
    series: [] as any[],
    byN: {} as Record<string, any>,
    settings: null as any,
    shown: {} as Record<string, HTMLElement>,
  };
  const statusEl = byId('status');
  const list = byId('pair-list');
  const tip = byId('tip');

  function clock(ms: number) {
    return new Date(ms).toLocaleTimeString([], { hour12: false });
  }
  function ago(ms: number, now: number) {
    const s = Math.max(0, Math.round((now - ms) / 1000));
    return s < 90 ? s + ' s ago' : Math.round(s / 60) + ' min ago';
  }
  function clear(e: Element) {
    while (e.firstChild) e.removeChild(e.firstChild);
  }

  function renderSettings(s: any, floor: any) {
    const parts = [
      'mode ' + s.mode,
      'candidate ' + s.candidate,
      s.baseline ? 'baseline ' + s.baseline : 'baseline-free (repeats)',
      'sample rate ' + s.sampleRate,
      'window ' + s.window + ' (min ' + s.minRequests + '), fire at ' + s.fireFraction + ' held ' + s.forSeconds + ' s',
      'CUSUM k ' + s.cusumK + ', h ' + s.cusumH,
    ];
    if (floor !== null) parts.push('noise floor ' + nats(floor));
    byId('settings').textContent = parts.join(' \u00b7 ');
  }

  // Each backend the mirror sends to: reachable, unreachable or refusing its key, its engine, the last failed copy and its cause.
  function renderBackends(backends: any, now: number) {
    const body = byId('backend-body');
    clear(body);
    (backends || []).forEach(function (b: any) {
      const tr = el('tr');
      tr.setAttribute('data-backend', b.backend);
      tr.setAttribute('data-state', b.state);
      const name = el('td');
      name.appendChild(el('strong', null, b.backend));
      name.appendChild(el('span', 'muted', ' ' + b.host));
      tr.appendChild(name);
      const st = el('td');
      const failing = b.state === 'unreachable' || b.state === 'rejected';
      st.appendChild(
        el('span', 'badge ' + (failing ? 'a-firing' : 'a-inactive'), b.state === 'rejected' ? 'key rejected' : b.state),
      );
      tr.appendChild(st);
      tr.appendChild(el('td', 'muted', b.engine ? b.engine + (b.version ? ' ' + b.version : '') : ''));
      tr.appendChild(
        el(
          'td',
          'evidence',
          b.lastError
            ? b.lastError.outcome +
                ': ' +
                b.lastError.reason +
                ' (' +
                ago(b.lastError.at, now) +
                '; ' +
                b.failures +
                ' failed copies since the start)'
            : 'no failure',
        ),
      );
      body.appendChild(tr);
    });
  }

  function renderAlerts(alerts: any, now: number) {
    const body = byId('alert-body');
    clear(body);
    alerts.forEach(function (a: any) {
      const tr = el('tr');
      tr.setAttribute('data-alert', a.alert + (a.backend ? '/' + a.backend : ''));
      tr.setAttribute('data-phase', a.phase);
      const name = el('td');
      name.appendChild(el('strong', null, a.alert));
      if (a.backend) name.appendChild(el('span', 'muted', ' ' + a.backend));
      tr.appendChild(name);
      const st = el('td');
      st.appendChild(el('span', 'badge a-' + a.phase, a.phase));
      tr.appendChild(st);
      tr.appendChild(
        el('td', 'muted', a.since === null ? '' : 'since ' + clock(a.since) + ' (' + ago(a.since, now) + ')'),
      );
      let ev = '';
      if (a.last) {
        const e = a.last.evidence;
        ev =
          a.last.to +
          ' at ' +
          clock(a.last.at) +
          ': pooled share ' +
          e.pooledShare.toFixed(2) +
          ' over the last ' +
          e.requestsInWindow +
          ' compared requests, CUSUM ' +
          e.cusum.toFixed(1) +
          (e.medianShift !== null
            ? ', median per-request max shift ' +
              nats(e.medianShift) +
              ' nats (free-running and teacher-forced positions)'
            : '') +
          (e.exampleRequestId ? ', e.g. request ' + e.exampleRequestId : '');
      }
      tr.appendChild(el('td', 'evidence', ev));
      body.appendChild(tr);
    });
  }

  // The short name of one of a model's alerts, as its badge shows it.
  const ALERT_SHORT: Record<string, string> = {
    LogprobGlobalShift: 'global',
    LogprobSustainedShift: 'sustained',
    LogprobSelfInconsistency: 'self',
    LogprobPathInconsistency: 'path',
    LogprobPromptMismatch: 'prompt',
    LogprobCanaryShift: 'canary',
  };

  function pvalueText(p: number): string {
    return p < 0.01 ? p.toExponential(1) : p.toFixed(2);
  }

  // A model's verdict counts: the non-zero ones, worst first, as badges.
  function modelVerdicts(m: any): HTMLElement {
    const td = el('td', 'verdicts');
    VERDICTS.forEach(function (v) {
      const n = m.verdicts[v] || 0;
      if (!n) return;
      const b = el('span', 'badge v-' + v, v + ' ' + n);
      b.setAttribute('data-verdict', v);
      td.appendChild(b);
      td.appendChild(document.createTextNode(' '));
    });
    return td;
  }

  // A model's alerts: one badge each, coloured by its phase; the title says since when and the last transition.
  function modelAlerts(m: any, now: number): HTMLElement {
    const td = el('td', 'model-alerts');
    m.alerts.forEach(function (a: any) {
      const b = el(
        'span',
        'badge a-' + a.phase,
        ALERT_SHORT[a.alert] + (a.backend ? ' ' + a.backend : '') + (a.phase === 'inactive' ? '' : ' ' + a.phase),
      );
      b.setAttribute('data-alert', a.alert + (a.backend ? '/' + a.backend : ''));
      b.setAttribute('data-phase', a.phase);
      b.title =
        a.alert +
        (a.backend ? ' ' + a.backend : '') +
        ': ' +
        a.phase +
        (a.since === null ? '' : ' since ' + clock(a.since) + ' (' + ago(a.since, now) + ')') +
        (a.last ? '; last ' + a.last.to + ' at ' + clock(a.last.at) : '');
      td.appendChild(b);
      td.appendChild(document.createTextNode(' '));
    });
    return td;
  }

  // Each backend's last path check in a model: its verdict and figures, and the path detector's window.
  function modelPath(m: any): HTMLElement {
    const td = el('td', 'evidence model-path');
    const parts = ['candidate', 'baseline']
      .filter(function (b) {
        return m.path[b];
      })
      .map(function (b) {
        const p = m.path[b];
        const last =
          p.outcome === 'ok'
            ? p.verdict + ', max shift ' + nats(p.maxShift) + ', shifted ' + p.shifted + '/' + p.comparable
            : p.outcome + (p.reason ? ' (' + p.reason + ')' : '');
        return (
          b +
          ': ' +
          last +
          ' \u00b7 ' +
          p.checks +
          ' checks, ' +
          p.inconsistent +
          ' inconsistent \u00b7 window ' +
          p.share.toFixed(2) +
          ' over ' +
          p.requests +
          ', CUSUM ' +
          p.cusum.toFixed(1)
        );
      });
    td.textContent = parts.length ? parts.join('; ') : 'no path check';
    return td;
  }

  // One row per model slice, worst first (the feed orders them): pairs, verdicts, window, CUSUM, p-value, alerts, path checks.
  function renderModels(models: any, now: number) {
    const body = byId('model-body');
    clear(body);
    (models || []).forEach(function (m: any) {
      const tr = el('tr');
      tr.setAttribute('data-model', m.model);
      tr.setAttribute('data-firing', String(m.firing));
      const name = el('td');
      name.appendChild(el('strong', null, m.model));
      tr.appendChild(name);
      tr.appendChild(el('td', 'num pairs', m.pairs));
      tr.appendChild(modelVerdicts(m));
      tr.appendChild(el('td', 'num share', m.share.toFixed(2) + ' / ' + m.requests));
      tr.appendChild(el('td', 'num cusum', m.cusum.toFixed(1)));
      tr.appendChild(
        el('td', 'num pvalue', m.pvalue === undefined ? '' : pvalueText(m.pvalue) + ' / ' + m.pvaluePairs),
      );
      tr.appendChild(modelAlerts(m, now));
      tr.appendChild(modelPath(m));
      body.appendChild(tr);
    });
    byId('no-models').style.display = models && models.length ? 'none' : 'block';
  }

  // Each backend's repeats by self verdict, and the probes the alert did not see.
  function repeatNotes(d: any): string[] {
    return ['candidate', 'baseline']
      .map(function (b) {
        const s = d.self[b];
        const n = Object.keys(s).reduce(function (m, k) {
          return m + s[k];
        }, 0);
        const pr = d.probes[b];
        const off = ['not_cold', 'not_warm', 'unprobed']
          .filter(function (k) {
            return pr[k];
          })
          .map(function (k) {
            return k + ' ' + pr[k];
          });
        return n
          ? b +
              ' repeats: ' +
              Object.keys(s)
                .filter(function (k) {
                  return s[k];
                })
                .map(function (k) {
                  return k + ' ' + s[k];
                })
                .join(', ') +
              (off.length ? ' (not seen by the alert: ' + off.join(', ') + ')' : '')
          : null;
      })
      .filter(Boolean) as string[];
  }

  function renderMix(d: any) {
    const bar = byId('mix-bar');
    const body = byId('mix-body');
    clear(bar);
    clear(body);
    const total = VERDICTS.reduce(function (n, v) {
      return n + (d.verdicts[v] || 0);
    }, 0);
    VERDICTS.forEach(function (v) {
      const n = d.verdicts[v] || 0;
      if (n > 0) {
        const seg = el('span', 'v-' + v);
        seg.style.width = (100 * n) / total + '%';
        seg.title = v + ': ' + n;
        bar.appendChild(seg);
      }
      const tr = el('tr');
      tr.setAttribute('data-verdict', v);
      const th = el('th');
      th.appendChild(el('span', 'badge v-' + v, v));
      tr.appendChild(th);
      tr.appendChild(el('td', 'num count', n));
      tr.appendChild(el('td', 'num muted', total ? ((100 * n) / total).toFixed(1) + '%' : ''));
      body.appendChild(tr);
    });
    const out = Object.keys(d.outcomes)
      .filter(function (k) {
        return k !== 'ok';
      })
      .map(function (k) {
        return k + ' ' + d.outcomes[k];
      });
    const self = repeatNotes(d);
    byId('pairs-total').textContent = String(
      Object.keys(d.outcomes).reduce(function (n, k) {
        return n + d.outcomes[k];
      }, 0),
    );
    byId('mix-notes').textContent = [total + ' compared']
      .concat(out.length ? ['not compared: ' + out.join(', ')] : [])
      .concat(self)
      .join(' \u00b7 ');
  }

  function svg(tag: string, attrs: Record<string, string | number>, text?: string): Element {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = text;
    return e;
  }
  /** The top of a chart's scale: `fixedMax`, else room above the limit and the highest point. */
  function chartMax(pts: any[], key: string, limit: number, fixedMax: number | null): number {
    return fixedMax !== null
      ? fixedMax
      : Math.max(
          limit * 1.25,
          pts.reduce(function (m, p) {
            return Math.max(m, p[key]);
          }, 0) * 1.1,
          1,
        );
  }
  /** The time axis's labels at `y`: six ticks from `span` ago to now. */
  function timeLabels(box: HTMLElement, x: (t: number) => number, y: number, now: number, span: number) {
    [5, 4, 3, 2, 1, 0].forEach(function (m) {
      const t = now - (m * span) / 5;
      box.appendChild(
        svg(
          'text',
          { x: x(t), y: y, 'text-anchor': 'middle' },
          m === 0 ? 'now' : '\u2212' + Math.round((m * span) / 5 / 1000) + ' s',
        ),
      );
    });
  }
  // A line chart of one figure over the last settings.seconds, with its firing limit dashed.
  function chart(
    id: string,
    title: string,
    key: string,
    limit: number,
    limitLabel: string,
    fixedMax: number | null,
    now: number,
  ) {
    const box = byId(id);
    clear(box);
    const W = 500,
      H = 150,
      L = 40,
      R = 10,
      T = 22,
      B = 22;
    const span = state.settings.seconds * 1000;
    const pts = state.series.filter(function (p) {
      return p.t >= now - span;
    });
    const max = chartMax(pts, key, limit, fixedMax);
    const x = function (t: number) {
      return L + (W - L - R) * (1 - (now - t) / span);
    };
    const y = function (v: number) {
      return T + (H - T - B) * (1 - Math.min(v, max) / max);
    };
    box.appendChild(svg('text', { x: L, y: 14, class: 'title' }, title));
    [0, 0.5, 1].forEach(function (f) {
      box.appendChild(svg('line', { x1: L, x2: W - R, y1: y(max * f), y2: y(max * f), class: 'grid' }));
      box.appendChild(
        svg('text', { x: L - 4, y: y(max * f) + 4, 'text-anchor': 'end' }, String(Number((max * f).toPrecision(2)))),
      );
    });
    timeLabels(box, x, H - 6, now, span);
    box.appendChild(svg('line', { x1: L, x2: W - R, y1: y(limit), y2: y(limit), class: 'limit' }));
    box.appendChild(svg('text', { x: L + 4, y: y(limit) - 4, class: 'limit-label' }, limitLabel));
    if (pts.length > 0)
      box.appendChild(
        svg('polyline', {
          class: 'line ' + key,
          points: pts
            .map(function (p) {
              return x(p.t).toFixed(1) + ',' + y(p[key]).toFixed(1);
            })
            .join(' '),
        }),
      );
    const last = pts[pts.length - 1];
    box.setAttribute('data-last', last ? String(last[key]) : '');
  }

  // A pair's card when its strip was not built or nothing was compared.
  function cardWithoutStrip(p: any) {
    const card = el('article', 'strip');
    card.setAttribute('data-pair', String(p.seq));
    const head = el('div', 'strip-head');
    // Without its strip a card still says what the comparison found: its verdict and figures
    // (the feed keeps them for every pair); the outcome's badge only when nothing was compared.
    const c = p.compared;
    head.appendChild(c ? el('span', 'badge v-' + c.verdict, c.verdict) : el('span', 'badge', p.outcome));
    head.appendChild(el('span', 'pair-id', '#' + p.seq + ' ' + p.id));
    head.appendChild(el('span', 'muted', p.ts.slice(11, 19) + 'Z ' + p.route));
    if (c)
      head.appendChild(
        el(
          'span',
          'figures-free',
          (c.kind === 'repeat' ? c.backend + ' repeat: ' : '') +
            'free-running max shift ' +
            nats(c.maxShift) +
            ' \u00b7 shifted ' +
            c.shifted +
            '/' +
            c.comparable,
        ),
      );
    head.appendChild(
      el(
        'span',
        'muted',
        p.unbuilt ? 'no token strip: it came while no page was open' : c || p.outcome === 'ok' ? '' : 'not compared',
      ),
    );
    card.appendChild(head);
    return card;
  }

  function pairCard(p: any) {
    const wrap = el('div', 'live-pair');
    wrap.setAttribute('data-seq', String(p.seq));
    let card;
    if (p.strip) {
      card = renderStrip(
        p.strip,
        p.verdict === null && p.repeats.length ? 'repeat of the ' + p.repeats[0].backend + ' (baseline-free)' : null,
      );
    } else {
      card = cardWithoutStrip(p);
    }
    if (p.model !== undefined) {
      // Its model slice and the candidate's prefix cache, in the card's head.
      const head = card.querySelector('.strip-head') || card;
      const tag = el(
        'span',
        'pair-model',
        (p.canary ? 'canary ' + p.canary.probe + ' (round ' + p.canary.round + ') \u00b7 ' : '') +
          'model ' +
          p.model +
          (p.cache && !p.canary ? ' \u00b7 cache ' + p.cache : ''),
      );
      tag.setAttribute('data-model', p.model);
      head.appendChild(tag);
    }
    if (p.prompt) card.insertBefore(el('p', 'live-prompt', p.prompt), card.children[1] || null);
    if (p.repeats.length)
      card.appendChild(
        el(
          'p',
          'repeats muted',
          p.repeats
            .map(function (r: any) {
              return (
                r.backend +
                ' repeat: ' +
                (r.verdict || 'failed') +
                (r.verdict && r.probe !== 'cold_warm' ? ' (' + r.probe + ')' : '')
              );
            })
            .join(' \u00b7 '),
        ),
      );
    wrap.appendChild(card);
    return wrap;
  }

  function renderPairs() {
    // Newest first; cards already on the page stay (the pointer's tooltip survives a refresh).
    const keep: Record<string, boolean> = {};
    state.pairs.forEach(function (p) {
      keep[p.seq] = true;
    });
    Object.keys(state.shown).forEach(function (seq) {
      if (!keep[seq]) {
        list.removeChild(state.shown[seq]);
        delete state.shown[seq];
      }
    });
    state.pairs.forEach(function (p) {
      if (state.shown[p.seq]) return;
      const card = pairCard(p);
      state.shown[p.seq] = card;
      list.insertBefore(card, list.firstChild);
    });
    const empty = byId('no-pairs');
    empty.style.display = state.pairs.length ? 'none' : 'block';
  }

  /** Marks the status stale, saying why the worker sent no data. */
  function showStale(msg: any) {
    statusEl.className = 'stale';
    statusEl.textContent =
      (msg && msg.worker === 'down'
        ? 'the mirror\u2019s worker is not running'
        : msg && msg.worker === 'off'
          ? 'no mirror in this process'
          : 'the mirror\u2019s worker did not answer in time') + ': showing what was last received';
  }

  /** The line under the charts: the window's pooled share, CUSUM and permutation p-value now. */
  function windowNow(w: any): string {
    return (
      'now: pooled share ' +
      w.share.toFixed(2) +
      ' over ' +
      w.requests +
      ' requests, CUSUM ' +
      w.cusum.toFixed(1) +
      (w.pvalue === undefined
        ? ''
        : ', permutation test p = ' + pvalueText(w.pvalue) + ' over ' + w.pvaluePairs + ' pairs')
    );
  }

  function apply(msg: any) {
    if (!msg || msg.worker !== 'up') {
      showStale(msg);
      return;
    }
    const d = msg.data;
    state.settings = d.settings;
    d.pairs.forEach(function (p: any) {
      state.pairs.push(p);
      if (p.strip) state.byN[p.seq] = p.strip;
    });
    state.pairs = state.pairs
      .filter(function (p) {
        return p.seq >= d.oldest;
      })
      .slice(-d.settings.pairs);
    Object.keys(state.byN).forEach(function (n) {
      if (Number(n) < d.oldest) delete state.byN[n];
    });
    state.series = state.series.concat(d.series).filter(function (p) {
      return p.t >= d.now - d.settings.seconds * 1000;
    });
    state.since = d.seq;
    if (d.series.length) state.sinceT = d.series[d.series.length - 1].t;
    renderSettings(d.settings, d.noiseFloor);
    byId('pairs-bound').textContent = String(d.settings.pairs);
    renderBackends(d.backends, d.now);
    renderAlerts(d.alerts, d.now);
    renderModels(d.models, d.now);
    renderMix(d);
    chart(
      'share-chart',
      'pooled share of shifted positions (window of ' + d.settings.window + ')',
      'share',
      d.settings.fireFraction,
      'fires at ' + d.settings.fireFraction,
      1,
      d.now,
    );
    chart(
      'cusum-chart',
      'CUSUM of maxShift / noise floor',
      'cusum',
      d.settings.cusumH,
      'h = ' + d.settings.cusumH,
      null,
      d.now,
    );
    byId('window-now').textContent = windowNow(d.window);
    renderPairs();
    statusEl.className = '';
    statusEl.textContent = 'updated ' + clock(d.now) + ' \u00b7 every ' + POLL_MS / 1000 + ' s';
  }

  function poll() {
    fetch(DATA + '?since=' + state.since + '&t=' + state.sinceT, { cache: 'no-store' })
      .then(function (r) {
        return r.json();
      })
      .then(apply, function () {
        apply(null);
      })
      .then(
        function () {
          setTimeout(poll, POLL_MS);
        },
        function (err) {
          statusEl.textContent = 'page error: ' + err;
          setTimeout(poll, POLL_MS);
        },
      );
  }
  attachTips(list, tip, function (n: number) {
    return state.byN[n];
  });
  // An explanation shows two lines; a click shows it whole.
  list.addEventListener('click', function (ev) {
    const target = ev.target as Element;
    const p = target.closest && target.closest('.explanation');
    if (p) p.classList.toggle('open');
  });
  poll();
})();

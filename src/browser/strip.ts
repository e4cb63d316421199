/**
 * The browser side of a token strip (src/report/strips.ts `Strip`), shared by the HTML report's
 * script (report.ts) and the admin port's live page (live.ts): a script (no module), whose
 * functions the page's script calls. src/report/scripts.ts compiles it and the page's own into
 * one function scope, after `nats` (core/explain.ts's formatNats). It defines `el`, `lp`, `show`,
 * `colour`, `renderStrip(s, note)` and `attachTips(container, tip, lookup)`. Every datum reaches
 * the page through textContent, never innerHTML.
 */
// The page's element of that id (the page's markup has every one the scripts name).
function byId(id: string): HTMLElement {
  const e = document.getElementById(id);
  if (!e) throw new Error(`no #${id} on the page`);
  return e;
}
function el(tag: string, cls?: string | null, text?: unknown): HTMLElement {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function lp(x: number | null) {
  return x === null ? '-inf' : x.toFixed(4);
}
function show(t: string) {
  return t.replace(/\n/g, '\u21b5').replace(/\t/g, '\u21e5').replace(/\r/g, '\u240d') || '\u2205';
}
// Shift relative to the pair's noise floor: pale green below it (opaque, so dark text reads in
// either colour scheme), yellow to red from 1x to 10x above.
function colour(s: number | null, floor: number) {
  if (s === null) return 'var(--unknown)';
  if (s <= floor) {
    const a = s <= 0 ? 0 : Math.max(0, Math.min(1, 1 + Math.log10(s / floor) / 4));
    return 'hsl(146, 40%, ' + (95 - 15 * a).toFixed(0) + '%)';
  }
  const r = Math.max(0, Math.min(1, Math.log10(s / floor)));
  const hue = 50 - 50 * r;
  return 'hsl(' + hue.toFixed(0) + ', 95%, ' + (70 - 18 * r).toFixed(0) + '%)';
}

// One pair's card: its figures, the flip, the explanation and the tokens. note: a word for the
// head (the report's "among the worst"), or null.
function renderStrip(s: any, note: string | null) {
  const box = el('article', 'strip');
  box.setAttribute('data-pair', String(s.n));
  box.appendChild(stripHead(s, note));
  // The prompt the pair answered (bounded; the whole of it on hover), or that it was hashed.
  if (s.input) {
    const prompt = el('p', 'prompt', s.input.hashed ? null : s.input.text);
    if (s.input.hashed) prompt.appendChild(el('span', 'muted', 'prompt hashed (capture.includePrompts: false)'));
    else {
      prompt.title = s.input.text;
      if (s.input.cut > 0) prompt.appendChild(el('span', 'muted', ' \u2026 ' + s.input.cut + ' more characters'));
    }
    box.appendChild(prompt);
  }
  // The explanation in full, folded: its verdict's meaning is said once on the page, the card's figures are in its head.
  if (s.explanation) {
    const why = el('details', 'explanation');
    why.appendChild(el('summary', null, 'explanation'));
    why.appendChild(el('p', null, s.explanation));
    box.appendChild(why);
  }
  if (s.locus || s.prompt) {
    const where: string[] = [];
    if (s.prompt)
      where.push(
        'prompt: ' +
          s.prompt.shifted +
          ' of ' +
          s.prompt.comparable +
          ' positions shifted (prompt max shift ' +
          nats(s.prompt.maxShift) +
          ')',
      );
    if (s.locus) where.push('locus: ' + s.locus.replace('_', ' '));
    box.appendChild(el('p', 'muted', where.join(' \u00b7 ')));
  }
  box.appendChild(stripTokens(s));
  return box;
}

// A card's head: verdict, id, both runs' figures, the floor, the flip, similar pairs, the note.
function stripHead(s: any, note: string | null) {
  const head = el('div', 'strip-head');
  head.appendChild(el('span', 'badge v-' + s.verdict, s.verdict));
  head.appendChild(el('span', 'pair-id', '#' + s.n + ' ' + s.id));
  head.appendChild(el('span', 'muted', s.at + ' ' + s.route));
  head.appendChild(
    el(
      'span',
      'figures-free',
      'free-running max shift ' + nats(s.maxShift) + ' \u00b7 shifted ' + s.shifted + '/' + s.comparable,
    ),
  );
  if (s.forced)
    head.appendChild(
      el(
        'span',
        'figures-forced',
        'teacher-forced max shift ' +
          nats(s.forced.maxShift) +
          ' \u00b7 shifted ' +
          s.forced.shifted +
          '/' +
          s.forced.comparable,
      ),
    );
  head.appendChild(el('span', 'muted', 'floor ' + nats(s.noiseFloor)));
  if (s.flip) {
    const g = s.flip.gap === null ? '?' : (s.flip.lowerBound ? '\u2265 ' : '') + nats(s.flip.gap);
    head.appendChild(
      el(
        'span',
        'flip-info c-' + s.flip.class,
        'flip @' + s.flip.index + ': flip gap ' + g + ' (' + s.flip.class + ')',
      ),
    );
  }
  if (s.similar) {
    const similar = el('span', 'similar', '\u00d7' + (s.similar + 1) + ' similar');
    similar.title = s.similar + 1 + ' pairs with this prompt and verdict; the worst of them is shown';
    head.appendChild(similar);
  }
  if (note) head.appendChild(el('span', 'muted', note));
  return head;
}

// A card's tokens: the compared positions coloured by shift (the flip marked), then the scored ones.
function stripTokens(s: any) {
  const toks = el('div', 'tokens');
  s.tokens.forEach(function (t: any, i: number) {
    const span = el('span', 'tok' + (t.c !== undefined ? ' flip' : ''));
    span.style.background = colour(t.s, s.noiseFloor);
    span.setAttribute('data-i', String(i));
    if (t.c !== undefined) {
      span.appendChild(el('span', 'flip-b', show(t.t)));
      span.appendChild(el('span', 'flip-arrow', '\u2192'));
      span.appendChild(el('span', 'flip-c', show(t.c)));
      if (s.flip)
        span.appendChild(
          el(
            'sup',
            'gap',
            'gap ' + (s.flip.gap === null ? '?' : (s.flip.lowerBound ? '\u2265 ' : '') + nats(s.flip.gap)),
          ),
        );
    } else {
      span.textContent = show(t.t);
    }
    toks.appendChild(span);
  });
  if (s.cut > 0) toks.appendChild(el('span', 'muted', ' \u2026 ' + s.cut + ' more compared positions not shown'));
  (s.scored || []).forEach(function (t: any) {
    const span = el('span', 'tok scored', show(t.t));
    span.style.background = colour(t.s, s.noiseFloor);
    span.title = 'teacher-forced: the baseline\u2019s token scored on both backends; shift ' + nats(t.s);
    toks.appendChild(span);
  });
  const rest = s.after - (s.scored ? s.scored.length : 0);
  if (rest > 0) toks.appendChild(el('span', 'muted', ' +' + rest + ' tokens after the divergence (not compared)'));
  return toks;
}

function topTable(title: string, rows: any[], mark: unknown) {
  const t = el('table');
  const cap = el('caption', null, title);
  t.appendChild(cap);
  rows.forEach(function (r: any) {
    const tr = el('tr', r[0] === mark ? 'chosen' : null);
    tr.appendChild(el('td', 'tt', JSON.stringify(r[0])));
    tr.appendChild(el('td', 'num', lp(r[1])));
    t.appendChild(tr);
  });
  if (rows.length === 0) t.appendChild(el('tr', null, 'no top-k'));
  return t;
}

// Both sides' top-k when the pointer is on a token of a strip in container; lookup(n) gives the
// strip whose card says data-pair="n".
function attachTips(container: HTMLElement, tip: HTMLElement, lookup: (n: number) => any) {
  function showTip(span: Element, ev: MouseEvent) {
    const box = span.closest('.strip');
    const s = box && lookup(Number(box.getAttribute('data-pair')));
    const t = s && s.tokens[Number(span.getAttribute('data-i'))];
    if (!t) return;
    while (tip.firstChild) tip.removeChild(tip.firstChild);
    tip.appendChild(
      el(
        'div',
        'tip-head',
        'position ' +
          span.getAttribute('data-i') +
          ' \u00b7 shift ' +
          nats(t.s) +
          (t.d !== null ? ' \u00b7 diff ' + (t.d > 0 ? '+' : '') + nats(t.d) : ''),
      ),
    );
    // The two sides' names: a pair's, or a repeat's (the second run against the first).
    const sides = s.sides || ['candidate', 'baseline'];
    const row = el('div', 'tip-tables');
    row.appendChild(topTable(sides[0], t.tc, t.c !== undefined ? t.c : t.t));
    row.appendChild(topTable(sides[1], t.tb, t.t));
    tip.appendChild(row);
    tip.style.display = 'block';
    const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    let y = ev.clientY + 16;
    if (y + tip.offsetHeight > window.innerHeight) y = Math.max(4, ev.clientY - tip.offsetHeight - 12);
    tip.style.left = Math.max(4, x) + 'px';
    tip.style.top = y + 'px';
  }
  container.addEventListener('mouseover', function (ev: MouseEvent) {
    const target = ev.target as Element;
    const span = target.closest && target.closest('.tok');
    if (span) showTip(span, ev);
  });
  container.addEventListener('mouseout', function (ev: MouseEvent) {
    const target = ev.target as Element;
    if (target.closest && target.closest('.tok')) tip.style.display = 'none';
  });
}

import { STRIP_CLIENT } from './strip-client.js';

/**
 * The report's only script: paginates the token strips over the embedded JSON blob and shows
 * both sides' top-k on hover (the strip itself is drawn by strip-client.ts, which the live page
 * shares). Plain browser JavaScript in a string (no build step, nothing loaded); every datum
 * reaches the page through textContent, never innerHTML.
 */
export const CLIENT_SCRIPT = String.raw`
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var strips = data.worst.map(function (s) { s.kind = 'worst'; return s; })
    .concat(data.sampled.map(function (s) { s.kind = 'sample'; return s; }));
  var PER_PAGE = data.perPage;
  var page = 0;
  var filter = 'all';
  var list = document.getElementById('strip-list');
  var info = document.getElementById('page-info');
  var prev = document.getElementById('prev');
  var next = document.getElementById('next');
  var select = document.getElementById('verdict-filter');
  var tip = document.getElementById('tip');

${STRIP_CLIENT}
  function filtered() {
    if (filter === 'all') return strips;
    return strips.filter(function (s) { return s.verdict === filter; });
  }

  function render() {
    var items = filtered();
    var pages = Math.max(1, Math.ceil(items.length / PER_PAGE));
    if (page >= pages) page = pages - 1;
    while (list.firstChild) list.removeChild(list.firstChild);
    items.slice(page * PER_PAGE, (page + 1) * PER_PAGE).forEach(function (s) { list.appendChild(renderStrip(s, s.kind === 'worst' ? 'among the worst' : null)); });
    if (items.length === 0) list.appendChild(el('p', 'muted', 'No strip for this verdict in the selection.'));
    info.textContent = 'page ' + (page + 1) + ' of ' + pages + ' \u00b7 ' + items.length + ' strips';
    prev.disabled = page === 0;
    next.disabled = page >= pages - 1;
  }

  attachTips(list, tip, function (n) { return strips.filter(function (x) { return x.n === n; })[0]; });
  prev.addEventListener('click', function () { page--; render(); });
  next.addEventListener('click', function () { page++; render(); });
  select.addEventListener('change', function () { filter = select.value; page = 0; render(); });
  render();
})();
`;

/**
 * The report's only script: paginates the token strips over the embedded JSON blob and shows
 * both sides' top-k on hover (the strip itself is drawn by strip.ts, which the live page shares).
 * Every datum reaches the page through textContent, never innerHTML.
 */
(function () {
  const data = JSON.parse(byId('report-data').textContent);
  const strips = data.worst
    .map(function (s: any) {
      s.kind = 'worst';
      return s;
    })
    .concat(
      data.sampled.map(function (s: any) {
        s.kind = 'sample';
        return s;
      }),
    );
  const PER_PAGE = data.perPage;
  let page = 0;
  let filter = 'all';
  const list = byId('strip-list');
  const info = byId('page-info');
  const prev = byId('prev') as HTMLButtonElement;
  const next = byId('next') as HTMLButtonElement;
  const select = byId('verdict-filter') as HTMLSelectElement;
  const tip = byId('tip');

  function filtered() {
    if (filter === 'all') return strips;
    return strips.filter(function (s: any) {
      return s.verdict === filter;
    });
  }

  function render() {
    const items = filtered();
    const pages = Math.max(1, Math.ceil(items.length / PER_PAGE));
    if (page >= pages) page = pages - 1;
    while (list.firstChild) list.removeChild(list.firstChild);
    items.slice(page * PER_PAGE, (page + 1) * PER_PAGE).forEach(function (s: any) {
      list.appendChild(renderStrip(s, s.kind === 'worst' ? 'among the worst' : null));
    });
    if (items.length === 0) list.appendChild(el('p', 'muted', 'No strip for this verdict in the selection.'));
    info.textContent = 'page ' + (page + 1) + ' of ' + pages + ' \u00b7 ' + items.length + ' strips';
    prev.disabled = page === 0;
    next.disabled = page >= pages - 1;
  }

  attachTips(list, tip, function (n: number) {
    return strips.filter(function (x: any) {
      return x.n === n;
    })[0];
  });
  prev.addEventListener('click', function () {
    page--;
    render();
  });
  next.addEventListener('click', function () {
    page++;
    render();
  });
  select.addEventListener('change', function () {
    filter = select.value;
    page = 0;
    render();
  });
  render();
})();

/** Inline SVG charts for the HTML report: pure string building, every text escaped. */

/** Escapes text for HTML and SVG content and attribute values. */
export function esc(s: string | number): string {
  return String(s).replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );
}

/** One bar of a histogram, stacked from segments (each with a CSS class for its colour). */
export interface Bar {
  label: string;
  segments: Array<{ count: number; cls: string; name: string }>;
}

/** A vertical marker (a threshold) at a fractional bar position. */
export interface Marker {
  at: number;
  label: string;
}

/** Width of a marker label's character (11 px system-ui, a generous average), for laying labels out. */
const LABEL_CHAR_PX = 6.6;
/** Height of a row of marker labels. */
const LABEL_ROW_PX = 14;

/** A marker label laid out above the plot: its row (0 nearest the plot), its anchor and the x span it covers. */
export interface PlacedLabel {
  row: number;
  x: number;
  anchor: 'start' | 'end';
  from: number;
  to: number;
}

/**
 * Lays marker labels out in rows above the plot so that no two overlap: each goes to the lowest
 * row where its text (right of its line, or left of it near the right edge) keeps clear of the
 * labels already there. Above the plot no label can cover a bar either.
 */
export function layoutMarkerLabels(
  markers: ReadonlyArray<{ x: number; label: string }>,
  minX: number,
  maxX: number,
): PlacedLabel[] {
  const rows: Array<Array<[number, number]>> = [];
  const order = markers.map((m, i) => ({ ...m, i })).sort((a, b) => a.x - b.x);
  const out: PlacedLabel[] = new Array(markers.length);
  for (const m of order) {
    const w = m.label.length * LABEL_CHAR_PX;
    const anchor: 'start' | 'end' = m.x + 3 + w <= maxX || m.x - 3 - w < minX ? 'start' : 'end';
    const [from, to] = anchor === 'start' ? [m.x + 3, m.x + 3 + w] : [m.x - 3 - w, m.x - 3];
    let row = rows.findIndex((r) => r.every(([a, b]) => to + 6 <= a || from >= b + 6));
    if (row < 0) row = rows.push([]) - 1;
    rows[row]!.push([from, to]);
    out[m.i] = { row, x: m.x, anchor, from, to };
  }
  return out;
}

/**
 * A bar chart with equal-width bars, tick labels under chosen bars, marker lines and a title for
 * screen readers. Each bar has a `<title>` with its label and counts (the browser shows it on hover).
 * Marker labels sit in rows above the plot (never on a bar, never on each other), each on a halo
 * of the page's background so that another marker's line passing behind it does not cross it.
 */
export function svgHistogram(o: {
  id: string;
  title: string;
  bars: Bar[];
  ticks: Array<{ index: number; text: string }>;
  markers?: Marker[];
  xLabel: string;
  width?: number;
  height?: number;
}): string {
  const width = o.width ?? 720;
  const left = 48;
  const right = 12;
  const n0 = Math.max(1, o.bars.length);
  const labels = layoutMarkerLabels(
    (o.markers ?? []).map((m) => ({ x: left + (m.at * (width - left - right)) / n0, label: m.label })),
    left,
    width - right,
  );
  const labelRows = labels.reduce((r, l) => Math.max(r, l.row + 1), 0);
  const top = 14 + labelRows * LABEL_ROW_PX;
  const height = (o.height ?? 220) + labelRows * LABEL_ROW_PX;
  const bottom = 42;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const n = Math.max(1, o.bars.length);
  const bw = plotW / n;
  const max = Math.max(1, ...o.bars.map((b) => b.segments.reduce((s, x) => s + x.count, 0)));
  const y = (v: number) => top + plotH - (plotH * v) / max;
  const g: Plot = { left, top, plotH, bw, y };
  const parts: string[] = [];
  parts.push(
    `<svg id="${esc(o.id)}" class="chart" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-labelledby="${esc(o.id)}-t">`,
  );
  parts.push(`<title id="${esc(o.id)}-t">${esc(o.title)}</title>`);
  for (const frac of [0, 0.5, 1]) {
    const v = Math.round(max * frac);
    parts.push(
      `<line class="grid" x1="${left}" x2="${width - right}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}"/><text class="axis" x="${left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${esc(v.toLocaleString('en-US'))}</text>`,
    );
  }
  o.bars.forEach((b, i) => parts.push(svgBar(b, i, g)));
  parts.push(`<line class="axisline" x1="${left}" x2="${width - right}" y1="${top + plotH}" y2="${top + plotH}"/>`);
  for (const t of o.ticks) {
    const x = left + t.index * bw;
    parts.push(
      `<line class="tick" x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${top + plotH}" y2="${top + plotH + 4}"/><text class="axis" x="${x.toFixed(1)}" y="${top + plotH + 16}" text-anchor="middle">${esc(t.text)}</text>`,
    );
  }
  parts.push(svgMarkers(o.markers ?? [], labels, g));
  parts.push(
    `<text class="axis" x="${left + plotW / 2}" y="${height - 6}" text-anchor="middle">${esc(o.xLabel)}</text>`,
  );
  parts.push('</svg>');
  return parts.join('');
}

/** Where a histogram's plot sits: its left edge, top, height, bar width and the count → y scale. */
interface Plot {
  left: number;
  top: number;
  plotH: number;
  bw: number;
  y: (v: number) => number;
}

/** One bar: its segments stacked, its `<title>` (label, total, segments), a full-height hover target. */
function svgBar(b: Bar, i: number, g: Plot): string {
  const { left, top, plotH, bw, y } = g;
  const parts: string[] = [];
  let acc = 0;
  const total = b.segments.reduce((s, x) => s + x.count, 0);
  const detail = b.segments
    .filter((s) => s.count > 0)
    .map((s) => `${s.name} ${s.count.toLocaleString('en-US')}`)
    .join(', ');
  parts.push(
    `<g class="bar"><title>${esc(b.label)}: ${esc(total.toLocaleString('en-US'))}${detail && b.segments.length > 1 ? ` (${esc(detail)})` : ''}</title>`,
  );
  for (const s of b.segments) {
    if (s.count <= 0) continue;
    const y1 = y(acc + s.count);
    const h = y(acc) - y1;
    parts.push(
      `<rect class="${esc(s.cls)}" x="${(left + i * bw + 0.5).toFixed(1)}" y="${y1.toFixed(1)}" width="${Math.max(1, bw - 1).toFixed(1)}" height="${Math.max(0.5, h).toFixed(1)}"/>`,
    );
    acc += s.count;
  }
  // An invisible full-height target, so that short bars are easy to hover.
  parts.push(
    `<rect class="hit" x="${(left + i * bw).toFixed(1)}" y="${top}" width="${bw.toFixed(1)}" height="${plotH}"/></g>`,
  );
  return parts.join('');
}

/** The markers: lines first, from each label's row down through the plot; then the labels over them. */
function svgMarkers(markers: Marker[], labels: ReturnType<typeof layoutMarkerLabels>, g: Plot): string {
  const { left, top, plotH, bw } = g;
  const parts: string[] = [];
  const rowY = (row: number) => top - 4 - row * LABEL_ROW_PX;
  markers.forEach((m, i) => {
    const x = left + m.at * bw;
    parts.push(
      `<line class="marker" x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${(rowY(labels[i]!.row) - 9).toFixed(1)}" y2="${top + plotH}"/>`,
    );
  });
  markers.forEach((m, i) => {
    const l = labels[i]!;
    parts.push(
      `<text class="marker-label" x="${(l.anchor === 'start' ? l.x + 3 : l.x - 3).toFixed(1)}" y="${rowY(l.row).toFixed(1)}" text-anchor="${l.anchor}">${esc(m.label)}</text>`,
    );
  });
  return parts.join('');
}

/** A single horizontal bar split by share (the verdict mix at a glance). */
export function svgStackedBar(o: {
  id: string;
  title: string;
  parts: Array<{ name: string; count: number; cls: string }>;
  width?: number;
}): string {
  const width = o.width ?? 720;
  const height = 28;
  const total = o.parts.reduce((s, p) => s + p.count, 0);
  const out: string[] = [
    `<svg id="${esc(o.id)}" class="chart" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-labelledby="${esc(o.id)}-t"><title id="${esc(o.id)}-t">${esc(o.title)}</title>`,
  ];
  let x = 0;
  for (const p of o.parts) {
    if (p.count <= 0 || total === 0) continue;
    const w = (width * p.count) / total;
    out.push(
      `<rect class="${esc(p.cls)}" x="${x.toFixed(1)}" y="0" width="${Math.max(1, w).toFixed(1)}" height="${height}"><title>${esc(p.name)}: ${esc(p.count.toLocaleString('en-US'))} (${((100 * p.count) / total).toFixed(1)}%)</title></rect>`,
    );
    x += w;
  }
  if (total === 0) out.push(`<rect class="empty" x="0" y="0" width="${width}" height="${height}"/>`);
  out.push('</svg>');
  return out.join('');
}

/**
 * Shares (0..1) as equal-width bars joined by a line — a curve over ordered buckets — with the
 * count behind each share in its `<title>`, the bucket labels under the bars and an optional marker.
 */
export function svgShareChart(o: {
  id: string;
  title: string;
  points: Array<{ label: string; share: number; detail: string }>;
  marker?: Marker;
  xLabel: string;
  width?: number;
  height?: number;
}): string {
  const width = o.width ?? 720;
  const height = o.height ?? 200;
  const [left, right, top, bottom] = [48, 12, 28, 42];
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const bw = plotW / Math.max(1, o.points.length);
  const y = (share: number) => top + plotH - plotH * Math.max(0, Math.min(1, share));
  const parts: string[] = [
    `<svg id="${esc(o.id)}" class="chart" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-labelledby="${esc(o.id)}-t"><title id="${esc(o.id)}-t">${esc(o.title)}</title>`,
  ];
  for (const frac of [0, 0.5, 1]) {
    parts.push(
      `<line class="grid" x1="${left}" x2="${width - right}" y1="${y(frac).toFixed(1)}" y2="${y(frac).toFixed(1)}"/><text class="axis" x="${left - 6}" y="${(y(frac) + 4).toFixed(1)}" text-anchor="end">${frac * 100}%</text>`,
    );
  }
  const line: string[] = [];
  o.points.forEach((p, i) => {
    const x = left + i * bw;
    parts.push(
      `<g class="bar"><title>${esc(`${p.label}: ${p.detail}`)}</title><rect class="s-shift" x="${(x + 1).toFixed(1)}" y="${y(p.share).toFixed(1)}" width="${Math.max(1, bw - 2).toFixed(1)}" height="${(top + plotH - y(p.share)).toFixed(1)}"/></g>`,
    );
    parts.push(
      `<text class="axis" x="${(x + bw / 2).toFixed(1)}" y="${top + plotH + 16}" text-anchor="middle">${esc(p.label)}</text>`,
    );
    line.push(`${(x + bw / 2).toFixed(1)},${y(p.share).toFixed(1)}`);
  });
  if (line.length > 1)
    parts.push(
      `<polyline class="curve" fill="none" stroke="currentColor" stroke-width="1.5" points="${line.join(' ')}"/>`,
    );
  if (o.marker) {
    const x = left + o.marker.at * bw;
    // Right of the line where it fits inside the viewBox, else left of it (a stop near the last bucket).
    const end = x + 3 + o.marker.label.length * LABEL_CHAR_PX > width - 2;
    parts.push(
      `<line class="marker" x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${top - 12}" y2="${top + plotH}"/><text class="marker-label" x="${(end ? x - 3 : x + 3).toFixed(1)}" y="${top - 14}" text-anchor="${end ? 'end' : 'start'}">${esc(o.marker.label)}</text>`,
    );
  }
  parts.push(
    `<text class="axis" x="${left + plotW / 2}" y="${height - 6}" text-anchor="middle">${esc(o.xLabel)}</text></svg>`,
  );
  return parts.join('');
}

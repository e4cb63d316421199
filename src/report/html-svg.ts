/** Inline SVG charts for the HTML report: pure string building, every text escaped. */

/** Escapes text for HTML and SVG content and attribute values. */
export function esc(s: string | number): string {
  return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
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

/**
 * A bar chart with equal-width bars, tick labels under chosen bars, marker lines and a title for
 * screen readers. Each bar has a `<title>` with its label and counts (the browser shows it on hover).
 */
export function svgHistogram(o: { id: string; title: string; bars: Bar[]; ticks: Array<{ index: number; text: string }>; markers?: Marker[]; xLabel: string; width?: number; height?: number }): string {
  const width = o.width ?? 720;
  const height = o.height ?? 220;
  const left = 48;
  const right = 12;
  const top = 14;
  const bottom = 42;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const n = Math.max(1, o.bars.length);
  const bw = plotW / n;
  const max = Math.max(1, ...o.bars.map((b) => b.segments.reduce((s, x) => s + x.count, 0)));
  const y = (v: number) => top + plotH - (plotH * v) / max;
  const parts: string[] = [];
  parts.push(`<svg id="${esc(o.id)}" class="chart" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-labelledby="${esc(o.id)}-t">`);
  parts.push(`<title id="${esc(o.id)}-t">${esc(o.title)}</title>`);
  for (const frac of [0, 0.5, 1]) {
    const v = Math.round(max * frac);
    parts.push(`<line class="grid" x1="${left}" x2="${width - right}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}"/><text class="axis" x="${left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${esc(v.toLocaleString('en-US'))}</text>`);
  }
  o.bars.forEach((b, i) => {
    let acc = 0;
    const total = b.segments.reduce((s, x) => s + x.count, 0);
    const detail = b.segments.filter((s) => s.count > 0).map((s) => `${s.name} ${s.count.toLocaleString('en-US')}`).join(', ');
    parts.push(`<g class="bar"><title>${esc(b.label)}: ${esc(total.toLocaleString('en-US'))}${detail && b.segments.length > 1 ? ` (${esc(detail)})` : ''}</title>`);
    for (const s of b.segments) {
      if (s.count <= 0) continue;
      const y1 = y(acc + s.count);
      const h = y(acc) - y1;
      parts.push(`<rect class="${esc(s.cls)}" x="${(left + i * bw + 0.5).toFixed(1)}" y="${y1.toFixed(1)}" width="${Math.max(1, bw - 1).toFixed(1)}" height="${Math.max(0.5, h).toFixed(1)}"/>`);
      acc += s.count;
    }
    // An invisible full-height target, so that short bars are easy to hover.
    parts.push(`<rect class="hit" x="${(left + i * bw).toFixed(1)}" y="${top}" width="${bw.toFixed(1)}" height="${plotH}"/></g>`);
  });
  parts.push(`<line class="axisline" x1="${left}" x2="${width - right}" y1="${top + plotH}" y2="${top + plotH}"/>`);
  for (const t of o.ticks) {
    const x = left + t.index * bw;
    parts.push(`<line class="tick" x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${top + plotH}" y2="${top + plotH + 4}"/><text class="axis" x="${x.toFixed(1)}" y="${top + plotH + 16}" text-anchor="middle">${esc(t.text)}</text>`);
  }
  for (const m of o.markers ?? []) {
    const x = left + m.at * bw;
    parts.push(`<line class="marker" x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${top}" y2="${top + plotH}"/><text class="marker-label" x="${(x + 3).toFixed(1)}" y="${top + 10}">${esc(m.label)}</text>`);
  }
  parts.push(`<text class="axis" x="${left + plotW / 2}" y="${height - 6}" text-anchor="middle">${esc(o.xLabel)}</text>`);
  parts.push('</svg>');
  return parts.join('');
}

/** A single horizontal bar split by share (the verdict mix at a glance). */
export function svgStackedBar(o: { id: string; title: string; parts: Array<{ name: string; count: number; cls: string }>; width?: number }): string {
  const width = o.width ?? 720;
  const height = 28;
  const total = o.parts.reduce((s, p) => s + p.count, 0);
  const out: string[] = [`<svg id="${esc(o.id)}" class="chart" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-labelledby="${esc(o.id)}-t"><title id="${esc(o.id)}-t">${esc(o.title)}</title>`];
  let x = 0;
  for (const p of o.parts) {
    if (p.count <= 0 || total === 0) continue;
    const w = (width * p.count) / total;
    out.push(`<rect class="${esc(p.cls)}" x="${x.toFixed(1)}" y="0" width="${Math.max(1, w).toFixed(1)}" height="${height}"><title>${esc(p.name)}: ${esc(p.count.toLocaleString('en-US'))} (${((100 * p.count) / total).toFixed(1)}%)</title></rect>`);
    x += w;
  }
  if (total === 0) out.push(`<rect class="empty" x="0" y="0" width="${width}" height="${height}"/>`);
  out.push('</svg>');
  return out.join('');
}

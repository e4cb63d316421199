import { CAPABILITY_LABELS, type Capability, type ProbeReport } from './probe.js';

const mark = (c: Capability): string => (c.ok === true ? 'yes' : c.ok === false ? 'no' : '—');

/** The probe as a table: the engine, one line per capability (works, what the server answered, what enables it), what the config misses. */
export function probeTable(r: ProbeReport): string {
  const rows = r.capabilities.map((c) => [
    CAPABILITY_LABELS[c.name] + (r.required.includes(c.name) ? ' *' : ''),
    mark(c),
    c.detail,
    c.ok === true ? '' : (c.enable ?? ''),
  ]);
  const head = ['capability', 'works', 'what the server answered', 'to enable'];
  const widths = [0, 1].map((i) => Math.max(head[i]!.length, ...rows.map((row) => row[i]!.length)));
  const line = (row: string[]) =>
    `${row[0]!.padEnd(widths[0]!)}  ${row[1]!.padEnd(widths[1]!)}  ${row[2]}${row[3] ? `  → ${row[3]}` : ''}`;
  const out = [
    `${r.url}: ${r.engine}${r.version ? ` ${r.version}` : ''} (${r.evidence})${r.model ? `, model ${r.model}` : ''}`,
    '',
    line(head.slice(0, 3).concat([''])),
    ...rows.map(line),
    '',
    `logprobs: ${r.meaning.mode ?? 'logprobs (raw or processed: not told)'} — ${r.meaning.detail}`,
    `* needed by the configuration's features`,
    r.missing.length === 0
      ? 'every feature the configuration uses works'
      : `missing: ${r.missing.map((n) => missingText(r, n)).join('; ')}`,
  ];
  return `${out.join('\n')}\n`;
}

/** One missing capability with what enables it. */
export function missingText(r: ProbeReport, name: Capability['name']): string {
  const c = r.capabilities.find((x) => x.name === name);
  return `${CAPABILITY_LABELS[name]}${c?.enable ? ` (${c.enable})` : ''}`;
}

/** The probe's `--json` object (docs/engines.md). */
export function probeJson(r: ProbeReport): string {
  return `${JSON.stringify(r, null, 2)}\n`;
}

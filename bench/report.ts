import { writeSection } from './lib/sections.js';
import { fmt, ratio } from './lib/stats.js';
import type { Machine } from './lib/machine.js';
import type { MirrorAB, Plan } from './measure.js';
import type { Summary, Verdict } from './figures.js';
import { RSS_CEILING_MB } from './figures.js';
import type { CoreFigure } from './core.js';
import type { Unavailable } from './proxies/types.js';

const ORDER = [
  'direct',
  'nginx',
  'haproxy',
  'logprobe-off',
  'logprobe-off-info',
  'logprobe-0.1',
  'logprobe-1.0',
  'portkey',
];
const ordered = (s: Map<string, Summary>) => ORDER.map((k) => s.get(k)).filter((x): x is Summary => x !== undefined);
const x = (r: number) => (Number.isFinite(r) ? `${r.toFixed(2)}×` : '–');
const msu = (us: number) => (Number.isFinite(us) ? (us / 1000).toFixed(2) : '–');
const added = (us: number, base: number) =>
  Number.isFinite(us) && Number.isFinite(base) ? `${us - base >= 0 ? '+' : ''}${((us - base) / 1000).toFixed(2)}` : '–';

/** One line per figure: the quick run's output, and the summary at the end of a full run. */
export function quickLines(
  s: Map<string, Summary>,
  engine: Map<string, Summary> | null,
  core: CoreFigure[],
  checks: Verdict[],
  ab: { shared: MirrorAB; remote: MirrorAB } | null = null,
): string[] {
  const d = s.get('direct');
  const n = s.get('nginx');
  const lp = s.get('logprobe-off');
  const on = s.get('logprobe-1.0');
  const pk = s.get('portkey');
  const rel = (v: number, k: keyof Summary) =>
    `${x(ratio(v, d?.[k] as number))} direct, ${x(ratio(v, n?.[k] as number))} nginx${pk ? `, ${x(ratio(v, pk[k] as number))} portkey` : ''}`;
  const lines: string[] = [];
  if (lp) {
    lines.push(`throughput json  c=32    logprobe ${fmt(lp.json, 0)} req/s = ${rel(lp.json, 'json')}`);
    lines.push(`throughput sse   c=32    logprobe ${fmt(lp.sse, 0)} req/s = ${rel(lp.sse, 'sse')}`);
    lines.push(
      `latency json     p50/p99 logprobe ${msu(lp.p50)}/${msu(lp.p99)} ms, added vs direct ${added(lp.p50, d?.p50 ?? NaN)}/${added(lp.p99, d?.p99 ?? NaN)} ms (nginx ${added(n?.p50 ?? NaN, d?.p50 ?? NaN)}/${added(n?.p99 ?? NaN, d?.p99 ?? NaN)})`,
    );
    lines.push(
      `sse ttfb         p50/p99 logprobe ${msu(lp.ttfb50)}/${msu(lp.ttfb99)} ms, added vs direct ${added(lp.ttfb50, d?.ttfb50 ?? NaN)}/${added(lp.ttfb99, d?.ttfb99 ?? NaN)} ms (nginx ${added(n?.ttfb50 ?? NaN, d?.ttfb50 ?? NaN)}/${added(n?.ttfb99 ?? NaN, d?.ttfb99 ?? NaN)})`,
    );
    lines.push(
      `sse inter-chunk  p50/p99 logprobe ${msu(lp.gap50)}/${msu(lp.gap99)} ms, added vs direct ${added(lp.gap50, d?.gap50 ?? NaN)}/${added(lp.gap99, d?.gap99 ?? NaN)} ms (nginx ${added(n?.gap50 ?? NaN, d?.gap50 ?? NaN)}/${added(n?.gap99 ?? NaN, d?.gap99 ?? NaN)})`,
    );
    lines.push(
      `rss peak                 logprobe ${fmt(lp.peakMB, 0)} MB, sampleRate 1.0 ${fmt(on?.peakMB ?? NaN, 0)} MB, nginx ${fmt(n?.peakMB ?? NaN, 0)} MB${pk ? `, portkey ${fmt(pk.peakMB, 0)} MB` : ''}`,
    );
  }
  if (on && lp)
    lines.push(
      `mirror client p99        sampleRate 1.0 ${msu(on.p99)} ms vs 0: ${msu(lp.p99)} ms (${x(ratio(on.p99, lp.p99))})${ab ? `, paired and pooled ${x(ratio(ab.remote.pooled[1], ab.remote.pooled[0]))} (baseline stand-in sharing the CPUs ${x(ratio(ab.shared.pooled[1], ab.shared.pooled[0]))})` : ''}; mirror ${fmt(on.pairsPerSec, 0)} pairs compared/s, ${on.dropped} dropped`,
    );
  if (engine) {
    const ed = engine.get('direct');
    const en = engine.get('nginx');
    const el = engine.get('logprobe-off');
    if (el)
      lines.push(
        `engine json      c=32    logprobe ${fmt(el.json, 0)} req/s = ${x(ratio(el.json, ed?.json ?? NaN))} direct, ${x(ratio(el.json, en?.json ?? NaN))} nginx (simulated engine upstream)`,
      );
  }
  const top5 = core.filter((c) => c.k === 5);
  if (top5.length > 0)
    lines.push(
      `core compare     top-5   ${top5.map((c) => `${c.tokens} tok ${c.mtps.toFixed(2)} M aligned tok/s`).join(', ')}`,
    );
  const errs = [...s.values()].filter((v) => v.errors > 0).map((v) => `${v.key} ${v.errors}/${v.requests}`);
  lines.push(`errors                   ${errs.length === 0 ? 'none' : errs.join(', ')}`);
  for (const c of checks)
    lines.push(`target ${c.met === null ? 'n/a ' : c.met ? 'MET ' : 'MISS'}  ${c.target}: ${c.detail}`);
  return lines;
}

export function table(head: string[], rows: string[][]): string {
  return [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => ' --- ').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

export interface ReportInput {
  info: Machine;
  plan: Plan;
  engine: Plan;
  fixed: Map<string, Summary>;
  unavailable: Unavailable[];
  engineSums: Map<string, Summary> | null;
  core: { header: string; rows: CoreFigure[]; error?: string };
  checks: Verdict[];
  elapsed: number;
  queueSize: number;
  ab?: { shared: MirrorAB; remote: MirrorAB } | null;
}

/** What every section of the report reads: the input, the fixed-upstream summaries, direct's and nginx's, the rows in order. */
interface Sections {
  r: ReportInput;
  s: Map<string, Summary>;
  d: Summary | undefined;
  n: Summary | undefined;
  rows: ReturnType<typeof ordered>;
}

/** Renders the generated part of bench/RESULTS.md. */
export function renderResults(r: ReportInput): string {
  const s = r.fixed;
  const sec: Sections = { r, s, d: s.get('direct'), n: s.get('nginx'), rows: ordered(s) };
  return [
    ...machineSection(sec),
    ...throughputSection(sec),
    ...latencySection(sec),
    ...sseSection(sec),
    ...memorySection(sec),
    ...mirrorSection(sec),
    ...engineSection(sec),
    ...coreSection(sec),
  ].join('\n');
}

/** The run's date, machine, versions and what was not measured. */
function machineSection({ r }: Sections): string[] {
  const v = r.info.versions;
  const out: string[] = [];
  out.push(`## Run of ${r.info.date.slice(0, 16).replace('T', ' ')} UTC`);
  out.push('');
  out.push(
    `Machine: ${r.info.nproc} CPUs (${r.info.cpu}), ${r.info.memoryGB} GB, ${r.info.kernel}; load average at the start ${r.info.load} (shared machine). Versions: node ${v.node}, logprobe ${v.logprobe}, undici ${v.undici}, autocannon ${v.autocannon}, nginx ${v.nginx}, haproxy ${v.haproxy}, @portkey-ai/gateway ${v['@portkey-ai/gateway']}. The run took ${r.elapsed.toFixed(0)} s.`,
  );
  out.push('');
  if (r.unavailable.length > 0)
    out.push(`Not measured: ${r.unavailable.map((u) => `${u.label} (${u.reason})`).join('; ')}.\n`);
  return out;
}

/** Throughput against the fixed-response upstream, against direct and nginx. */
function throughputSection({ r, d, n, rows }: Sections): string[] {
  const out: string[] = [];
  out.push(
    `### Throughput, ${r.plan.connections} connections (median of ${r.plan.rounds} rounds × ${r.plan.seconds} s, fixed-response upstream)`,
  );
  out.push('');
  out.push(
    table(
      ['target', 'JSON req/s', '÷ direct', '÷ nginx', 'SSE req/s', '÷ direct', '÷ nginx', 'errors'],
      rows.map((t) => [
        t.label,
        fmt(t.json, 0),
        x(ratio(t.json, d?.json ?? NaN)),
        x(ratio(t.json, n?.json ?? NaN)),
        fmt(t.sse, 0),
        x(ratio(t.sse, d?.sse ?? NaN)),
        x(ratio(t.sse, n?.sse ?? NaN)),
        `${t.errors}/${t.requests}`,
      ]),
    ),
  );
  out.push('');
  return out;
}

/** Latency at a moderate open-loop rate, and what each target adds to direct. */
function latencySection({ r, d, n, rows }: Sections): string[] {
  const out: string[] = [];
  out.push(
    `### Latency at a moderate rate (${r.plan.rate} req/s open loop over 16 connections, median of ${r.plan.probeRounds} rounds × ${r.plan.probeSeconds} s)`,
  );
  out.push('');
  out.push(
    table(
      ['target', 'p50 ms', 'added p50 ms', 'p99 ms', 'added p99 ms', 'p99 ÷ direct', 'p99 ÷ nginx'],
      rows.map((t) => [
        t.label,
        msu(t.p50),
        added(t.p50, d?.p50 ?? NaN),
        msu(t.p99),
        added(t.p99, d?.p99 ?? NaN),
        x(ratio(t.p99, d?.p99 ?? NaN)),
        x(ratio(t.p99, n?.p99 ?? NaN)),
      ]),
    ),
  );
  out.push('');
  return out;
}

/** SSE time to first byte and inter-chunk delay. */
function sseSection({ r, d, n, rows }: Sections): string[] {
  const out: string[] = [];
  out.push(
    `### SSE: time to first byte and inter-chunk delay (${r.plan.sseRate} streams/s, 9 events 2 ms apart, median of ${r.plan.probeRounds} rounds)`,
  );
  out.push('');
  out.push(
    table(
      [
        'target',
        'TTFB p50 ms',
        'added',
        'TTFB p99 ms',
        'added',
        'gap p50 ms',
        'added',
        'gap p99 ms',
        'added',
        'TTFB p99 ÷ nginx',
      ],
      rows.map((t) => [
        t.label,
        msu(t.ttfb50),
        added(t.ttfb50, d?.ttfb50 ?? NaN),
        msu(t.ttfb99),
        added(t.ttfb99, d?.ttfb99 ?? NaN),
        msu(t.gap50),
        added(t.gap50, d?.gap50 ?? NaN),
        msu(t.gap99),
        added(t.gap99, d?.gap99 ?? NaN),
        x(ratio(t.ttfb99, n?.ttfb99 ?? NaN)),
      ]),
    ),
  );
  out.push('');
  return out;
}

/** Peak RSS of each target. */
function memorySection({ n, rows }: Sections): string[] {
  const out: string[] = [];
  out.push('### Memory (peak RSS over the whole run, VmHWM; nginx: master + worker; "direct": the upstream process)');
  out.push('');
  out.push(
    table(
      ['target', 'peak RSS MB', '÷ nginx'],
      rows.map((t) => [t.label, fmt(t.peakMB, 0), x(ratio(t.peakMB, n?.peakMB ?? NaN))]),
    ),
  );
  out.push('');
  return out;
}

/** The mirror's cost to the client at sampleRate 1.0, its throughput, queue and RSS. */
function mirrorSection({ r, s }: Sections): string[] {
  const out: string[] = [];
  const on = s.get('logprobe-1.0');
  const off = s.get('logprobe-off');
  if (on && off) {
    out.push('### Mirror');
    out.push('');
    out.push(
      table(
        ['figure', 'value'],
        [
          [
            'client p99 at sampleRate 1.0 vs 0 (medians of the rounds above)',
            `${msu(on.p99)} vs ${msu(off.p99)} ms (${x(ratio(on.p99, off.p99))})`,
          ],
          ...(r.ab
            ? (
                [
                  ['remote', r.ab.remote, "baseline stand-in at nice 19, as on its own machine; the target's figure"],
                  ['shared', r.ab.shared, 'baseline stand-in at normal priority, sharing the 2 CPUs'],
                ] as const
              ).map(([, a, what]) => [
                `client p99 at sampleRate 1.0 vs 0, ${a.pairs.length} back-to-back pairs pooled (${r.plan.rate} req/s, ${r.plan.probeSeconds} s each; ${what})`,
                `${msu(a.pooled[1])} vs ${msu(a.pooled[0])} ms (${x(ratio(a.pooled[1], a.pooled[0]))}); per pair 1.0/0: ${a.pairs.map(([p, q]) => `${msu(q)}/${msu(p)}`).join(', ')} ms, median ratio ${x(a.medianRatio)}`,
              ])
            : []),
          [
            'client JSON throughput at sampleRate 1.0 vs 0',
            `${fmt(on.json, 0)} vs ${fmt(off.json, 0)} req/s (${x(ratio(on.json, off.json))})`,
          ],
          ['mirror throughput (pairs compared per second, queue saturated)', fmt(on.pairsPerSec, 0)],
          [
            `queue (size ${r.queueSize}) during the throughput rounds`,
            `max depth seen ${on.queueDepthMax}, ${on.dropped} copies dropped`,
          ],
          ['peak RSS with the queue full', `${fmt(on.peakMB, 0)} MB (ceiling ${RSS_CEILING_MB} MB)`],
        ],
      ),
    );
    out.push('');
  }
  return out;
}

/** Throughput in front of the simulated engine, when it was measured. */
function engineSection({ r }: Sections): string[] {
  const out: string[] = [];
  if (r.engineSums) {
    const e = r.engineSums;
    const ed = e.get('direct');
    const en = e.get('nginx');
    out.push(
      `### Throughput in front of the simulated engine (\`logprobe engine --sim\`, ${r.engine.connections} connections, median of ${r.engine.rounds} rounds × ${r.engine.seconds} s)`,
    );
    out.push('');
    out.push(
      table(
        ['target', 'JSON req/s', '÷ direct', '÷ nginx', 'errors'],
        ordered(e).map((t) => [
          t.label,
          fmt(t.json, 0),
          x(ratio(t.json, ed?.json ?? NaN)),
          x(ratio(t.json, en?.json ?? NaN)),
          `${t.errors}/${t.requests}`,
        ]),
      ),
    );
    out.push('');
  }
  return out;
}

/** The comparison core's figures (copied) and the targets' verdicts. */
function coreSection({ r }: Sections): string[] {
  const out: string[] = [];
  out.push('### Comparison core (`npm run bench:compare`, copied)');
  out.push('');
  out.push(
    r.core.error
      ? `bench:compare failed: ${r.core.error}`
      : ['```', r.core.header, ...r.core.rows.map((c) => c.line), '```'].join('\n'),
  );
  out.push('');
  out.push('### Targets');
  out.push('');
  out.push(
    table(
      ['target', 'result', 'measured'],
      r.checks.map((c) => [c.target, c.met === null ? 'not measured' : c.met ? 'met' : '**missed**', c.detail]),
    ),
  );
  out.push('');
  return out;
}

const BEGIN = '<!-- bench:generated:begin -->';
const END = '<!-- bench:generated:end -->';

/** Replaces the generated section of RESULTS.md, keeping the hand-written analysis around it. */
export function writeResults(path: string, r: ReportInput): void {
  writeSection(
    path,
    BEGIN,
    END,
    renderResults(r),
    '# logprobe benchmark results (issue #8)\n\nGenerated by `npm run bench`; the analysis below the figures is written by hand.\n\n',
  );
}

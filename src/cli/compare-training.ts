import { open, readFile, stat } from 'node:fs/promises';
import {
  trainingPair,
  formatNats,
  HEALTH_LIMITS,
  healthMarks,
  HealthAccumulator,
  pairSequences,
  RATIO_BOUNDS,
  readSequences,
  type SequenceFile,
  type ParsedResponse,
  type Thresholds,
  type TrainingComparison,
  type RunHealth,
} from '../core/index.js';
import { errnoReason, noInput, unreadableFile } from '../errors/index.js';

/**
 * `compare` and `analyze` of token-logprob files (docs/training.md): a trainer's per-token
 * logprobs against an engine's response or another such file, lined up and compared position by
 * position, with the health figures (KL, relative error, largest logits difference, each
 * against its threshold) and the importance ratio.
 */

/** A file read as scored sequences. */
export interface SequenceInput {
  file: string;
  sequences: SequenceFile;
}

/** Reads a file as scored sequences (a token-logprob file, or engine responses). */
export async function readSequenceFile(file: string): Promise<SequenceInput> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw unreadableFile(file, errnoReason(err, 'read'), err);
  }
  return { file, sequences: readSequences(text) };
}

/**
 * Whether a file is a token-logprob file, cheaply: its first line is a token-logprob object (or a
 * list of them), or — a file that does not start with a JSON line, such as pretty-printed JSON,
 * up to 64 MB — its whole text holds one. A capture file is never read past its first line.
 */
export async function isTokenFile(file: string): Promise<boolean> {
  let size = 0;
  try {
    size = (await stat(file)).size;
  } catch {
    return false;
  }
  const h = await open(file, 'r').catch(() => null);
  if (!h) return false;
  let head: string;
  try {
    const buf = Buffer.alloc(Math.min(size, 1024 * 1024));
    const { bytesRead } = await h.read(buf, 0, buf.length, 0);
    head = buf.subarray(0, bytesRead).toString('utf8');
  } finally {
    await h.close();
  }
  if (head.charCodeAt(0) === 0x1f) return false; // gzip: a capture
  const first = head.split('\n').find((l) => l.trim() !== '') ?? '';
  try {
    const v = JSON.parse(first) as unknown;
    if (typeof v === 'object' && v !== null && 'v' in v && 'route' in v) return false;
    return readSequences(first).kind === 'tokens';
  } catch {
    if (size > 64 * 1024 * 1024) return false;
  }
  return (await readSequenceFile(file)).sequences.kind === 'tokens';
}

/** Which input is the trainer: the token-logprob file when only one is, else the first (the candidate). */
export function trainerFirst(
  a: SequenceInput,
  b: SequenceInput,
): { train: SequenceInput; infer: SequenceInput; swapped: boolean } {
  const swapped = a.sequences.kind !== 'tokens' && b.sequences.kind === 'tokens';
  return swapped ? { train: b, infer: a, swapped } : { train: a, infer: b, swapped };
}

/** Every sequence pair compared; a pair that cannot be lined up is an input error (exit 2) naming it. */
export function compareFiles(train: SequenceInput, infer: SequenceInput, t: Thresholds): TrainingComparison[] {
  return comparePairs(train, infer, t).map((p) => p.comparison);
}

/** {@link compareFiles} with each pair's lined-up steps (analyze's report draws them). */
export function comparePairs(
  train: SequenceInput,
  infer: SequenceInput,
  t: Thresholds,
): Array<{ comparison: TrainingComparison; candidate: ParsedResponse; baseline: ParsedResponse }> {
  for (const s of [train, infer]) {
    if (s.sequences.sequences.length === 0)
      throw noInput(`${s.file}: no scored sequence (${s.sequences.problems[0] ?? 'empty'})`);
  }
  const pairs = pairSequences(train.sequences.sequences, infer.sequences.sequences);
  if ('error' in pairs) throw noInput(`${train.file} vs ${infer.file}: ${pairs.error}`);
  return pairs.map(([a, b], k) => {
    const r = trainingPair(a, b, t);
    if ('error' in r) throw noInput(`${train.file} vs ${infer.file}, sequence ${a.id ?? b.id ?? k + 1}: ${r.error}`);
    return r;
  });
}

const f = (x: number | null, digits = 4) =>
  x === null ? '—' : Math.abs(x) >= 1e-3 || x === 0 ? x.toFixed(digits) : x.toExponential(1);
const mark = (ok: boolean | null) => (ok === null ? 'n/a' : ok ? 'ok' : 'ABOVE');

/** The text report of a training comparison: the per-token table (one sequence) or a line per sequence, then the summary. */
export function renderTraining(
  results: readonly TrainingComparison[],
  files: { train: string; infer: string; swapped: boolean },
  t: Thresholds,
): string {
  const out: string[] = [];
  out.push(
    `train (candidate): ${files.train}`,
    `infer (baseline):  ${files.infer}${files.swapped ? '  (the token-logprob file is the trainer: sides swapped from the command line)' : ''}`,
    '',
  );
  out.push(...(results.length === 1 ? tokenTable(results[0]!) : sequenceLines(results)));
  const acc = new HealthAccumulator();
  for (const r of results) acc.add(r, r.id ?? '', r.id ?? '');
  out.push(...healthLines(results, acc.health()), ...worstLines(results));
  for (const d of acc.definition())
    out.push(
      `definition: ${d.check} (${d.side === 'candidate' ? 'train' : d.side === 'baseline' ? 'infer' : 'both'}) on ${d.pairs} sequence${d.pairs === 1 ? '' : 's'}: ${d.example}`,
    );
  const notes = [...new Set(results.flatMap((r) => r.notes.filter((n) => n !== 'tokens matched by id')))];
  for (const n of notes.slice(0, 5)) out.push(`note: ${n}`);
  if (results.length === 1) {
    out.push(`alignment: ${results[0]!.training.alignment}`);
    out.push(`verdict: ${results[0]!.verdict}`, results[0]!.explanation);
  } else {
    const mix = new Map<string, number>();
    for (const r of results) mix.set(r.verdict, (mix.get(r.verdict) ?? 0) + 1);
    out.push(
      `verdicts: ${[...mix].map(([v, c]) => `${v} ${c}`).join(', ')} (noise floor ${formatNats(t.noiseFloor)} nats)`,
    );
  }
  return `${out.join('\n')}\n`;
}

/** One sequence: its per-token table, ratios outside the bounds starred. */
function tokenTable(r: TrainingComparison): string[] {
  const [lo, hi] = RATIO_BOUNDS;
  const rows = r.positions.map((p) => {
    const d = p.candidate !== null && p.baseline !== null ? p.candidate - p.baseline : null;
    const ratio = d === null ? null : Math.exp(d);
    const out = ratio !== null && (ratio < lo || ratio > hi);
    return [
      String(p.i),
      show(p.token),
      f(p.candidate),
      f(p.baseline),
      d === null ? '—' : `${d > 0 ? '+' : ''}${f(d)}`,
      ratio === null ? '—' : `${ratio.toFixed(4)}${out ? '*' : ''}`,
      f(d === null ? null : Math.abs(Math.expm1(d))),
      f(p.kl),
    ];
  });
  const header = ['pos', 'token', 'train', 'infer', 'diff', 'ratio', 'rel err', 'KL'];
  const widths = header.map((h, k) => Math.max(h.length, ...rows.map((row) => row[k]!.length)));
  const fit = (cells: string[]) =>
    cells.map((c, k) => (k === 1 ? c.padEnd(widths[k]!) : c.padStart(widths[k]!))).join('  ');
  return [fit(header), ...rows.map(fit), `(* ratio exp(lp_train − lp_infer) outside [${lo}, ${hi}])`, ''];
}

/** Several sequences: a line each. */
function sequenceLines(results: readonly TrainingComparison[]): string[] {
  const out = [`${results.length} sequences`];
  for (const r of results) {
    const h = r.health!;
    out.push(
      `  ${(r.id ?? '').padEnd(12)} ${String(r.training.positions).padStart(5)} positions  KL ${f(h.kl.mean)}  rel err mean ${f(h.relErr.mean)} max ${f(h.relErr.max)}  ratio mean ${f(r.training.ratio.mean)} outside ${pct(r.training.ratio.outsideShare)}  ${r.verdict}`,
    );
  }
  out.push('');
  return out;
}

/** The pooled health figures against their thresholds, then the importance ratio over every sequence. */
function healthLines(results: readonly TrainingComparison[], h: RunHealth): string[] {
  const [lo, hi] = RATIO_BOUNDS;
  let n = 0;
  let sum = 0;
  let outside = 0;
  let min = Infinity;
  let max = -Infinity;
  let k3 = 0;
  for (const r of results) {
    const q = r.training.ratio;
    if (q.n === 0) continue;
    n += q.n;
    sum += q.mean! * q.n;
    outside += q.outside;
    min = Math.min(min, q.min!);
    max = Math.max(max, q.max!);
    k3 += (r.training.klSampled ?? 0) * q.n;
  }
  const marks = healthMarks(h);
  return [
    `health (over ${h.kl.n} positions${results.length > 1 ? ` of ${results.length} sequences` : ''})`,
    `  KL mean               ${f(h.kl.mean).padStart(10)}  ${mark(marks.kl).padEnd(5)} (< ${HEALTH_LIMITS.kl})`,
    `  relative error mean   ${f(h.relErr.mean).padStart(10)}  ${mark(marks.relErrMean).padEnd(5)} (< ${HEALTH_LIMITS.relErrMean})`,
    `  relative error max    ${f(h.relErr.max).padStart(10)}  ${mark(marks.relErrMax).padEnd(5)} (< ${HEALTH_LIMITS.relErrMax})`,
    `importance ratio exp(lp_train − lp_infer) over ${n} positions: mean ${f(n ? sum / n : null)}, min ${f(n ? min : null)}, max ${f(n ? max : null)}; ${outside} (${pct(n ? outside / n : null)}) outside [${lo}, ${hi}]`,
    `KL(infer ‖ train) from the sampled tokens, mean(r − 1 − log r): ${f(n ? k3 / n : null)}${h.logits.max !== null ? `; largest |Δ logprob| over the top lists ${formatNats(h.logits.max)}` : ''}`,
  ];
}

/** The ten positions with the largest |lp_train − lp_infer| over every sequence. */
function worstLines(results: readonly TrainingComparison[]): string[] {
  const worst = results
    .flatMap((r) => r.training.worst.map((w) => ({ ...w, id: r.id })))
    .sort((x, y) => Math.abs(Math.log(y.ratio!)) - Math.abs(Math.log(x.ratio!)))
    .slice(0, 10);
  if (worst.length === 0) return [];
  return [
    'worst positions (largest |lp_train − lp_infer|)',
    ...worst.map(
      (w) =>
        `  ${results.length > 1 ? `${w.id ?? ''} ` : ''}@${w.i} ${show(w.token)}  train ${f(w.train)}  infer ${f(w.infer)}  ratio ${w.ratio!.toFixed(4)}`,
    ),
  ];
}

function pct(x: number | null): string {
  return x === null ? '—' : `${(100 * x).toFixed(1)}%`;
}

function show(token: string): string {
  const s = JSON.stringify(token);
  return s.length > 22 ? `${s.slice(0, 20)}…"` : s;
}

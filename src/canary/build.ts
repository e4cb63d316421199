import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { Backends, type BackendClient, type ScoringOptions } from '../backend/client.js';
import { failureReason } from '../backend/failure.js';
import { createUpstreamPool, type UpstreamOptions } from '../backend/pool.js';
import { rewriteForMirror, type RewriteOptions } from '../backend/rewrite.js';
import { parseResponse } from '../core/index.js';
import { probeFile, readJsonLines } from '../capture/reader.js';
import { goldenKey } from '../replay/golden.js';
import { toReplayItem } from '../replay/input.js';
import { DEFAULT_PROBES, type CanaryProbe } from './probes.js';
import { promptBytes } from './runner.js';

/**
 * `logprobe canary build`: probes chosen by worth. Each candidate prompt is sent once to the
 * trusted backend, greedy, one token with its top-k logprobs; the top-1/top-2 gap at that first
 * token says how near the argmax is to flipping. A small gap is a border input (B3IT): any change
 * of the logits moves it, and a flip shows at the first token. Below `minGap` (~1e-3 nats) the
 * argmax flips on run-to-run noise alone, so those are skipped. The kept ones are spread over
 * the (route, model) slices round-robin, each slice smallest gap first.
 */

/** Under this gap (nats) the first token's argmax flips on run-to-run noise alone: not a probe. */
export const FLIP_NOISE_GAP = 1e-3;

/** A prompt that may become a probe, and where it was read. */
export interface BuildCandidate {
  id: string;
  route: CanaryProbe['route'];
  body: Record<string, unknown>;
  model: string | null;
}

/** What reading the inputs came to: the candidates and the lines skipped, by reason. */
export interface BuildInput {
  lines: number;
  candidates: BuildCandidate[];
  skipped: Record<string, number>;
  /** The first skipped line of each reason, as `file:line: reason`. */
  firstSkip: Record<string, string>;
}

const ROUTES = new Set(['/v1/completions', '/v1/chat/completions']);

function skip(input: BuildInput, reason: string, at: string): void {
  input.skipped[reason] = (input.skipped[reason] ?? 0) + 1;
  input.firstSkip[reason] ??= at;
}

/** One parsed input value as a candidate (a capture record or a prompt-set line); duplicates and other routes skipped. */
function addValue(input: BuildInput, seen: Set<string>, value: unknown, at: { file: string; line: number }): void {
  const place = `${at.file}:${at.line}`;
  const item = toReplayItem(value);
  if ('error' in item) return skip(input, 'not a prompt', `${place}: ${item.error}`);
  if (!ROUTES.has(item.route))
    return skip(
      input,
      'not a probe route',
      `${place}: ${item.route} (probes are /v1/completions or /v1/chat/completions)`,
    );
  const key = goldenKey(item.route, item.body);
  if (seen.has(key)) return skip(input, 'duplicate', place);
  seen.add(key);
  const model = typeof item.body.model === 'string' ? item.body.model : null;
  input.candidates.push({
    id: `${basename(at.file)}:${at.line}`,
    route: item.route as CanaryProbe['route'],
    body: item.body,
    model,
  });
}

function emptyInput(): BuildInput {
  return { lines: 0, candidates: [], skipped: {}, firstSkip: {} };
}

/** Captures (or prompt sets), every line's mirrored request a candidate. */
export async function readCaptures(files: readonly string[]): Promise<BuildInput> {
  const input = emptyInput();
  const seen = new Set<string>();
  for (const file of files) {
    for await (const line of readJsonLines(file)) {
      input.lines++;
      if (line.error !== undefined) skip(input, 'not a prompt', `${line.file}:${line.line}: ${line.error}`);
      else addValue(input, seen, line.value, line);
    }
  }
  return input;
}

/**
 * The generated set, for a server with no captures and no prompts of its own: the built-in
 * probes, every printable one-character prompt (B3IT's one-token inputs) and every two-letter
 * lowercase prompt — 783 short completions prompts, some of which are near-ties on any model;
 * the measurement finds which, and short prompts cost little a probe.
 */
export function generatedInput(): BuildInput {
  const input = emptyInput();
  const seen = new Set<string>();
  const add = (id: string, route: CanaryProbe['route'], body: Record<string, unknown>) => {
    input.lines++;
    const before = input.candidates.length;
    addValue(input, seen, { route, body }, { file: 'generated', line: input.lines });
    if (input.candidates.length > before) input.candidates[before]!.id = id;
  };
  for (const p of DEFAULT_PROBES) add(p.id, p.route, p.body);
  for (let c = 32; c < 127; c++) add(`char-${c}`, '/v1/completions', { prompt: String.fromCharCode(c) });
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  for (const a of letters) for (const b of letters) add(a + b, '/v1/completions', { prompt: a + b });
  return input;
}

/**
 * A prompt file: prompt-set lines (`{"route", "body"}` or `{"route", …body fields}`, as replay
 * and record read them) or plain text, one completions prompt per line; both may mix (a line
 * that starts with `{` is JSON). Plain or gzip.
 */
export async function readPrompts(file: string): Promise<BuildInput> {
  const { gzip } = await probeFile(file);
  const raw = await readFile(file);
  const text = (gzip ? gunzipSync(raw) : raw).toString('utf8');
  const input = emptyInput();
  const seen = new Set<string>();
  text.split(/\r?\n/).forEach((l, i) => {
    const at = { file, line: i + 1 };
    const s = l.trim();
    if (s === '') return;
    input.lines++;
    if (!s.startsWith('{')) return addValue(input, seen, { route: '/v1/completions', prompt: l }, at);
    let value: unknown;
    try {
      value = JSON.parse(s);
    } catch (err) {
      return skip(input, 'not a prompt', `${file}:${at.line}: not JSON (${(err as Error).message})`);
    }
    addValue(input, seen, value, at);
  });
  return input;
}

/** A candidate measured: its first token's top-1/top-2 gap, or why it has none. */
export type Measured =
  | {
      candidate: BuildCandidate;
      gap: number;
      /** The prompt tokens the backend read (`usage.prompt_tokens`); null when it did not say. */
      promptTokens: number | null;
    }
  | { candidate: BuildCandidate; error: string };

/** What measuring needs: the trusted backend, the rewrite (one token, top-k), pacing. */
export interface MeasureOptions {
  backend: UpstreamOptions & { apiKey: string | null };
  tlsInsecure: boolean;
  rewrite: RewriteOptions;
  scoring: ScoringOptions;
  concurrency: number;
  onMeasured?: (done: number) => void;
}

/** Sends every candidate once to the trusted backend, `concurrency` at a time; in input order. */
export async function measureGaps(candidates: readonly BuildCandidate[], o: MeasureOptions): Promise<Measured[]> {
  const pool = createUpstreamPool(o.backend, {
    tlsInsecure: o.tlsInsecure,
    connections: o.concurrency,
    maxHeaderSize: 64 * 1024,
  });
  const client = Backends.alone(
    'baseline',
    {
      ...o.backend,
      pool,
      ownsPool: true,
      headers: { role: 'baseline', apiKey: o.backend.apiKey, forwardAuth: false },
      secrets: o.backend.apiKey ? [o.backend.apiKey] : [],
    },
    o.scoring,
  );
  const out: Measured[] = new Array(candidates.length);
  let next = 0;
  let done = 0;
  const worker = async () => {
    while (next < candidates.length) {
      const i = next++;
      out[i] = await measureOne(client, candidates[i]!, o.rewrite);
      o.onMeasured?.(++done);
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(o.concurrency, candidates.length) }, worker));
  } finally {
    await client.close();
  }
  return out;
}

/** One candidate's first-token gap on the backend: greedy, one token, its top-k. */
async function measureOne(client: BackendClient, c: BuildCandidate, rewrite: RewriteOptions): Promise<Measured> {
  const kind = c.route === '/v1/chat/completions' ? 'chat' : 'completions';
  const body = rewriteForMirror(kind, c.body, { ...rewrite, maxTokens: 1 });
  const sent = await client.send({ path: c.route, body });
  const r = sent.result;
  if (r.error !== null || r.status >= 400) return { candidate: c, error: failureReason(r) };
  const parsed = parseResponse(r.body);
  const top = parsed.steps[0]?.top.filter(([, lp]) => Number.isFinite(lp)) ?? [];
  if (parsed.steps.length === 0) return { candidate: c, error: parsed.error ?? 'no logprobs in the answer' };
  if (top.length < 2) return { candidate: c, error: 'fewer than two alternatives at the first token' };
  const usage = (r.body as { usage?: { prompt_tokens?: unknown } } | null)?.usage;
  const promptTokens = typeof usage?.prompt_tokens === 'number' ? usage.prompt_tokens : null;
  return { candidate: c, gap: Math.max(0, top[0]![1] - top[1]![1]), promptTokens };
}

/** How the measured candidates are chosen: how many, at most how many per slice, the flip-noise floor, the order. */
export interface ChooseOptions {
  count: number;
  perSlice: number | null;
  minGap: number;
  /**
   * `gap`: the smallest first-token gap first. `cost` (with `floor`, the noise floor the probes
   * are judged at, and `maxTokens`, the tokens each probe generates): the most worth per token
   * first — a probe fires when its first token moves by min(floor, gap), so the smallest
   * min(floor, gap) × (prompt tokens + maxTokens) first, ties by gap.
   */
  rank?: { by: 'gap' } | { by: 'cost'; floor: number; maxTokens: number };
}

/** The chosen probes and what was left out, by reason. */
export interface Chosen {
  probes: CanaryProbe[];
  /** Slices (route, model) the probes were spread over. */
  slices: number;
  skipped: Record<string, number>;
  firstError: string | null;
}

/**
 * The probes by worth: the measured candidates above `minGap`, each (route, model) slice sorted
 * by `rank` (the smallest gap, or the most worth per token, first), taken round-robin over the
 * slices — every slice gets probes — until `count` (at most `perSlice` a slice).
 */
export function chooseProbes(measured: readonly Measured[], o: ChooseOptions): Chosen {
  const skipped: Record<string, number> = {};
  let firstError: string | null = null;
  const slices = new Map<string, Array<{ c: BuildCandidate; gap: number; key: number }>>();
  const rank = o.rank ?? { by: 'gap' };
  for (const m of measured) {
    if ('error' in m) {
      skipped['failed'] = (skipped['failed'] ?? 0) + 1;
      firstError ??= `${m.candidate.id}: ${m.error}`;
      continue;
    }
    if (m.gap < o.minGap) {
      skipped['below the flip-noise floor'] = (skipped['below the flip-noise floor'] ?? 0) + 1;
      continue;
    }
    const key = `${m.candidate.route} ${m.candidate.model ?? ''}`;
    if (!slices.has(key)) slices.set(key, []);
    // A backend that did not say its prompt tokens: about four bytes a token.
    const cost =
      rank.by === 'cost' ? (m.promptTokens ?? Math.ceil(promptBytes(m.candidate.body) / 4)) + rank.maxTokens : 1;
    const worth = rank.by === 'cost' ? Math.min(rank.floor, m.gap) * cost : m.gap;
    slices.get(key)!.push({ c: m.candidate, gap: m.gap, key: worth });
  }
  const queues = [...slices.values()].map((q) => q.sort((a, b) => a.key - b.key || a.gap - b.gap));
  const cap = o.perSlice ?? Infinity;
  const probes: CanaryProbe[] = [];
  for (let round = 0; round < cap && probes.length < o.count; round++) {
    const before = probes.length;
    for (const q of queues) {
      const e = q[round];
      if (e === undefined || probes.length >= o.count) continue;
      probes.push(asProbe(e.c, e.gap));
    }
    if (probes.length === before) break;
  }
  const kept = probes.length;
  const eligible = queues.reduce((n, q) => n + q.length, 0);
  if (eligible > kept) skipped['over --count or --per-route'] = eligible - kept;
  return { probes, slices: queues.length, skipped, firstError };
}

function asProbe(c: BuildCandidate, gap: number): CanaryProbe {
  return { id: c.id, route: c.route, body: c.body, gap, ...(c.model !== null ? { model: c.model } : {}) };
}

/** The probe file's lines: `{"id", "route", "body", "gap", "model"?}` (a prompt-set line too). */
export function probeLines(probes: readonly CanaryProbe[]): string {
  return probes
    .map((p) =>
      JSON.stringify({
        id: p.id,
        route: p.route,
        body: p.body,
        gap: p.gap,
        ...(p.model !== undefined ? { model: p.model } : {}),
      }),
    )
    .join('\n')
    .concat(probes.length > 0 ? '\n' : '');
}

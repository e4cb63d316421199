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
import { DEFAULT_PROBES, withLength, type CanaryProbe } from './probes.js';
import { promptBytes } from './runner.js';

/**
 * `logprobe canary build`: probes chosen by worth. Each candidate prompt is sent once to the
 * trusted backend, greedy, two tokens with their top-k logprobs; the top-1/top-2 gap at the first
 * token says how near the argmax is to flipping. A small gap is a border input (B3IT): any change
 * of the logits moves it, and a flip shows at the first token. Below `minGap` (~1e-3 nats) the
 * argmax flips on run-to-run noise alone, so those are skipped. The second token's gap ranks the
 * decode probes (a decode-path bug leaves the first token clean). The kept ones are spread over
 * the (route, model) slices round-robin, each slice by worth.
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

/** A candidate measured: its first and second tokens' top-1/top-2 gaps, or why it has none. */
export type Measured =
  | {
      candidate: BuildCandidate;
      gap: number;
      /** The second token's gap (the first decode step); null when the answer stopped after one token. */
      decodeGap: number | null;
      /** The prompt tokens the backend read (`usage.prompt_tokens`); null when it did not say. */
      promptTokens: number | null;
    }
  | { candidate: BuildCandidate; error: string };

/** What measuring needs: the trusted backend, the rewrite (two tokens, top-k), pacing. */
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

/** A step's top-1/top-2 gap, or null with fewer than two finite alternatives. */
function stepGap(step: { top: ReadonlyArray<readonly [string, number]> } | undefined): number | null {
  const top = step?.top.filter(([, lp]) => Number.isFinite(lp)) ?? [];
  return top.length < 2 ? null : Math.max(0, top[0]![1] - top[1]![1]);
}

/** One candidate's gaps on the backend: greedy, two tokens (the first, and the first decode step), their top-k. */
async function measureOne(client: BackendClient, c: BuildCandidate, rewrite: RewriteOptions): Promise<Measured> {
  const kind = c.route === '/v1/chat/completions' ? 'chat' : 'completions';
  const body = rewriteForMirror(kind, withLength(c.body, 2), { ...rewrite, maxTokens: 2 });
  const sent = await client.send({ path: c.route, body });
  const r = sent.result;
  if (r.error !== null || r.status >= 400) return { candidate: c, error: failureReason(r) };
  const parsed = parseResponse(r.body);
  if (parsed.steps.length === 0) return { candidate: c, error: parsed.error ?? 'no logprobs in the answer' };
  const gap = stepGap(parsed.steps[0]);
  if (gap === null) return { candidate: c, error: 'fewer than two alternatives at the first token' };
  const usage = (r.body as { usage?: { prompt_tokens?: unknown } } | null)?.usage;
  const promptTokens = typeof usage?.prompt_tokens === 'number' ? usage.prompt_tokens : null;
  return { candidate: c, gap, decodeGap: stepGap(parsed.steps[1]), promptTokens };
}

/** How the measured candidates are chosen: how many, how many decode probes, at most how many per slice, the flip-noise floor, the order. */
export interface ChooseOptions {
  count: number;
  /**
   * Of `count`, the decode probes: generated `canary.maxTokens` long, chosen by their second
   * token's gap (the first decode step), for a bug of the decode path that leaves the first token
   * clean. The others are first-token probes, one token each.
   */
  decode: number;
  perSlice: number | null;
  minGap: number;
  /**
   * `gap`: the smallest gap first. `cost` (with `floor`, the noise floor the probes are judged at,
   * and `maxTokens`, the tokens a decode probe generates): the most worth per token first — a
   * probe fires when its token moves by min(floor, gap), so the smallest min(floor, gap) ×
   * (prompt tokens + tokens generated) first, ties by gap.
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

/** A measured candidate kept, with its worth at each length (smaller first; null: not a decode probe). */
interface Entry {
  c: BuildCandidate;
  gap: number;
  first: number;
  decode: number | null;
}

/**
 * The probes by worth: the measured candidates above `minGap`, spread round-robin over the
 * (route, model) slices — every slice gets probes — at most `perSlice` a slice. First the
 * `decode` decode probes (each slice by its second-token worth), then first-token probes (by
 * first-token worth) up to `count`; the decode probes are placed among the others evenly, the
 * first second in line, so that a short run (or one cut by the budget) sees both kinds.
 */
export function chooseProbes(measured: readonly Measured[], o: ChooseOptions): Chosen {
  const skipped: Record<string, number> = {};
  let firstError: string | null = null;
  const slices = new Map<string, Entry[]>();
  const rank = o.rank ?? { by: 'gap' };
  // A backend that did not say its prompt tokens: about four bytes a token.
  const prompt = (m: Extract<Measured, { gap: number }>) =>
    m.promptTokens ?? Math.ceil(promptBytes(m.candidate.body) / 4);
  // Worth per token of a probe moved by `gap`, generating one token or (a decode probe) maxTokens.
  const worth = (m: Extract<Measured, { gap: number }>, gap: number, decode: boolean): number =>
    rank.by === 'cost' ? Math.min(rank.floor, gap) * (prompt(m) + (decode ? rank.maxTokens : 1)) : gap;
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
    const decodes = m.decodeGap !== null && m.decodeGap >= o.minGap;
    slices.get(key)!.push({
      c: m.candidate,
      gap: m.gap,
      first: worth(m, m.gap, false),
      decode: decodes ? worth(m, m.decodeGap!, true) : null,
    });
  }
  const entries = [...slices.values()];
  const taken = new Map<BuildCandidate, 'first' | 'decode'>();
  const perSlice = entries.map(() => 0);
  const pick = (kind: 'first' | 'decode', upTo: number) => {
    const queues = entries.map((q) =>
      q.filter((e) => e[kind] !== null).sort((a, b) => a[kind]! - b[kind]! || a.gap - b.gap),
    );
    roundRobin(queues, perSlice, o.perSlice ?? Infinity, (e) => {
      if (taken.size >= upTo) return 'full';
      if (taken.has(e.c)) return 'skip';
      taken.set(e.c, kind);
      return 'taken';
    });
  };
  pick('decode', Math.min(o.decode, o.count));
  pick('first', o.count);
  const probes = interleave(entries.flat(), taken);
  const eligible = entries.reduce((n, q) => n + q.length, 0);
  if (eligible > probes.length) skipped['over --count or --per-route'] = eligible - probes.length;
  return { probes, slices: entries.length, skipped, firstError };
}

/**
 * Takes from each queue in turn — the queues' i-th entries, then their (i+1)-th — at most `cap`
 * a queue (counted in `perQueue` across calls), until `take` says the choice is full.
 */
function roundRobin<E>(
  queues: readonly E[][],
  perQueue: number[],
  cap: number,
  take: (e: E) => 'taken' | 'skip' | 'full',
): void {
  const at = queues.map(() => 0);
  for (let live = true; live;) {
    live = false;
    for (const [i, q] of queues.entries()) {
      if (perQueue[i]! >= cap) continue;
      while (at[i]! < q.length) {
        const e = q[at[i]!]!;
        at[i] = at[i]! + 1;
        const got = take(e);
        if (got === 'full') return;
        if (got === 'taken') {
          perQueue[i] = perQueue[i]! + 1;
          live = true;
          break;
        }
      }
    }
  }
}

/** The chosen probes in file order: the first-token ones by worth, each decode probe placed evenly among them (the first at index 1). */
function interleave(entries: readonly Entry[], taken: ReadonlyMap<BuildCandidate, 'first' | 'decode'>): CanaryProbe[] {
  const byWorth = (kind: 'first' | 'decode') =>
    entries
      .filter((e) => taken.get(e.c) === kind)
      .sort((a, b) => a[kind]! - b[kind]! || a.gap - b.gap)
      .map((e) => asProbe(e.c, e.gap, kind === 'first' ? 1 : null));
  const first = byWorth('first');
  const decode = byWorth('decode');
  const n = first.length + decode.length;
  const out: CanaryProbe[] = [];
  for (let j = 0; j < decode.length; j++) {
    const at = Math.min(n - 1, 1 + Math.floor((j * n) / decode.length));
    while (out.length < at && first.length > 0) out.push(first.shift()!);
    out.push(decode[j]!);
  }
  return [...out, ...first];
}

function asProbe(c: BuildCandidate, gap: number, maxTokens: 1 | null): CanaryProbe {
  return {
    id: c.id,
    route: c.route,
    body: withLength(c.body, maxTokens),
    gap,
    ...(c.model !== null ? { model: c.model } : {}),
  };
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

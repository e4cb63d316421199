import { createHash } from 'node:crypto';
import { readJsonLines } from '../capture/reader.js';
import {
  buildRecord,
  recordSecrets,
  redactionFor,
  type CaptureRecord,
  type CaptureSide,
  type RecordOptions,
} from '../capture/record.js';
import type { Comparison, Thresholds, TokenStep } from '../core/types.js';
import { LOGITS_TOP } from '../core/health.js';
import {
  notScored,
  scoredBlocks,
  type PromptBlock,
  type ScoredBlock,
  type ScoredPair,
  type ScoringMode,
  type ScoringOutcome,
} from '../core/scored.js';
import type { BackendResult } from '../backend/dispatch.js';
import { requestedLogprobs } from '../backend/limits.js';
import type { MirroredPair } from '../pair/types.js';
import { forcedStep } from '../backend/engines/steps.js';
import { ScoringError, UnsupportedError, type ScoringTarget } from '../backend/http.js';
import type { EngineName } from '../metrics/labels.js';
import { modelOf, type EngineProfile, type ProfileScore, type PromptSource } from '../backend/engines/profile.js';
import { pairOf } from '../pair/score.js';
import { PROMPT_POSITIONS, type BackendClient, type ScoringOptions } from '../backend/client.js';
import type { ReplayItem } from './input.js';

/**
 * Golden files (docs/format.md, "Golden records"): capture records with only the baseline side —
 * `"golden": true`, `"candidate": null` — written by `logprobe record`, and the backend's own
 * teacher-forced scoring of its tokens in `scored`, so that `replay --baseline-from` compares a
 * candidate against them, free-running and teacher-forced, without a live baseline.
 */

/** The backend's scoring of its own answer, as a golden record stores it. */
export interface GoldenScoring {
  outcome: ScoringOutcome;
  /** Why not `ok`. */
  reason?: string;
  profile?: EngineName;
  method?: string;
  mode?: ScoringMode;
  /** Alternatives asked per position. */
  topK?: number;
  /** The prompt's token ids as the backend tokenised it (a candidate must tokenise it the same). */
  promptIds?: number[];
  /** The forced continuation's ids (the golden answer's tokens, at most `analysis.scoring.maxPositions`). */
  continuationIds?: number[];
  /** Index of the prompt token `prompt[0]` predicts. */
  promptStart?: number;
  /** Compact steps: `[id, text, logprob, [[id, text, logprob], …]]` (a logprob `null` when unknown or -inf). */
  prompt?: CompactStep[];
  continuation?: CompactStep[];
}

export type CompactStep = [
  id: number,
  text: string,
  logprob: number | null,
  top: Array<[id: number | null, text: string, logprob: number | null]>,
];

/** A golden record: a capture record (v2) with the baseline side only. */
export type GoldenRecord = Omit<CaptureRecord, 'candidate'> & {
  golden: true;
  candidate: null;
  key: string;
  scored: GoldenScoring | null;
};

/** True for a parsed line that is a golden record. */
export function isGoldenRecord(value: unknown): value is GoldenRecord {
  return typeof value === 'object' && value !== null && (value as { golden?: unknown }).golden === true;
}

/** Fields the mirror's rewrite and the engine profiles set: the same prompt keys the same whatever they say. */
const REWRITTEN = new Set([
  'temperature',
  'top_p',
  'n',
  'stream',
  'stream_options',
  'logit_bias',
  'best_of',
  'echo',
  'presence_penalty',
  'frequency_penalty',
  'repetition_penalty',
  'seed',
  'logprobs',
  'top_logprobs',
  'max_tokens',
  'max_completion_tokens',
  'return_token_ids',
]);

function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (v !== null && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v as object).sort()) out[k] = canonical((v as Record<string, unknown>)[k]);
    return out;
  }
  return v;
}

/**
 * The key a prompt is found by in a golden file: the SHA-256 of the route and the request body
 * without the fields the mirror's rewrite sets (sampling, lengths, logprobs, seed), keys sorted
 * — so a prompt-set line, the capture it came from and the golden record of either key the same.
 */
export function goldenKey(route: string, body: Readonly<Record<string, unknown>>): string {
  const kept: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(body)) if (!REWRITTEN.has(k)) kept[k] = v;
  return `sha256:${createHash('sha256')
    .update(JSON.stringify(canonical({ route, body: kept })))
    .digest('hex')}`;
}

/** The key of a replay input: a golden record's own, else computed from its request. */
export function itemKey(item: ReplayItem, value: unknown): string {
  if (isGoldenRecord(value) && typeof value.key === 'string') return value.key;
  return goldenKey(item.route, item.body);
}

const finiteOrNull = (x: number | null): number | null => (x !== null && Number.isFinite(x) ? x : null);

export function encodeSteps(steps: readonly TokenStep[]): CompactStep[] {
  return steps.map((s) => [
    s.id ?? -1,
    s.token,
    finiteOrNull(s.logprob),
    s.top.map((e, j) => [s.topIds?.[j] ?? null, e[0], finiteOrNull(e[1])]),
  ]);
}

export function decodeSteps(steps: readonly CompactStep[]): TokenStep[] {
  return steps.map(([id, text, lp, top]) =>
    forcedStep(
      id,
      text,
      lp,
      top.map(([tid, t, v]) => ({ id: tid ?? undefined, text: t, logprob: v })),
    ),
  );
}

/** A golden scoring as one side's {@link ProfileScore}. */
export function goldenScore(g: GoldenScoring): ProfileScore {
  return {
    promptStart: g.promptStart ?? 0,
    prompt: decodeSteps(g.prompt ?? []),
    continuation: decodeSteps(g.continuation ?? []),
  };
}

/**
 * The golden record of one answer: the capture record's fields (redacted as a capture is), the
 * candidate side null, the key, and the scoring — its reason and token texts scrubbed of the same
 * secrets by value (a scoring call's error may quote what the backend was sent).
 */
export function buildGoldenRecord(
  pair: Omit<MirroredPair, 'candidate' | 'analysis'> & { baseline: BackendResult },
  key: string,
  scored: GoldenScoring | null,
  options: RecordOptions,
): GoldenRecord {
  // The candidate slot is filled for the shared builder and emptied after: a golden record has one side.
  const full = { ...pair, candidate: pair.baseline, analysis: null } as MirroredPair;
  const record = buildRecord(full, options);
  const { v, candidate: _c, analysis: _a, ...rest } = record;
  const clean = redactionFor(options).scrub(scored, recordSecrets(full, options), {
    byName: false,
  }) as GoldenScoring | null;
  return { v, golden: true, ...rest, key, candidate: null, analysis: null, scored: clean };
}

/** A golden file loaded for lookups. */
export interface GoldenIndex {
  file: string;
  records: number;
  byKey: Map<string, GoldenRecord & { line: number }>;
  /** Bad lines, as `file:line: reason`. */
  problems: string[];
  /** The smallest top-k the golden requests asked for (null: none asked). */
  minTopK: number | null;
  /** The smallest top-k the golden records' scoring was done with (null: none scored). */
  minScoredTopK: number | null;
  /** The smallest `max_tokens` among them (null: none named). */
  minMaxTokens: number | null;
}

/** The `max_tokens` (or `max_completion_tokens`) a body asks for. */
export function maxTokensOf(body: Readonly<Record<string, unknown>>): number | null {
  const v = body.max_completion_tokens ?? body.max_tokens;
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

/** Reads a golden file (plain or gzip): every golden record by key (the first of a key wins). */
export async function loadGolden(file: string): Promise<GoldenIndex> {
  const index: GoldenIndex = {
    file,
    records: 0,
    byKey: new Map(),
    problems: [],
    minTopK: null,
    minScoredTopK: null,
    minMaxTokens: null,
  };
  for await (const line of readJsonLines(file)) {
    if (line.error !== undefined) {
      index.problems.push(`${line.file}:${line.line}: ${line.error}`);
      continue;
    }
    if (!isGoldenRecord(line.value)) {
      index.problems.push(
        `${line.file}:${line.line}: not a golden record (no "golden": true; write golden files with logprobe record)`,
      );
      continue;
    }
    const r = line.value;
    if (
      typeof r.key !== 'string' ||
      typeof r.baseline !== 'object' ||
      r.baseline === null ||
      typeof r.request !== 'object' ||
      r.request === null
    ) {
      index.problems.push(`${line.file}:${line.line}: a golden record without key, request or baseline`);
      continue;
    }
    index.records++;
    if (!index.byKey.has(r.key)) index.byKey.set(r.key, { ...r, line: line.line });
    const k = requestedLogprobs(r.request)?.k ?? null;
    if (k !== null) index.minTopK = Math.min(index.minTopK ?? k, k);
    const sk = r.scored?.outcome === 'ok' ? scoredTopK(r.scored) : null;
    if (sk !== null) index.minScoredTopK = Math.min(index.minScoredTopK ?? sk, sk);
    const m = maxTokensOf(r.request);
    if (m !== null) index.minMaxTokens = Math.min(index.minMaxTokens ?? m, m);
  }
  return index;
}

/**
 * The k a golden record's scoring was done with: its `topK`, or for a record without one the
 * longest top list it holds (what a candidate can be compared with at most).
 */
export function scoredTopK(g: GoldenScoring): number | null {
  if (typeof g.topK === 'number') return g.topK;
  let k: number | null = null;
  for (const step of [...(g.prompt ?? []), ...(g.continuation ?? [])]) k = Math.max(k ?? 0, step[3].length);
  return k;
}

/** A golden record's baseline side as a backend answer. */
export function goldenSide(r: GoldenRecord): BackendResult {
  const s: CaptureSide | null = r.baseline;
  if (!s)
    return { status: 0, latencyMs: 0, body: null, serverHeaders: {}, error: 'the golden record has no baseline side' };
  return {
    status: s.status,
    latencyMs: s.latencyMs ?? 0,
    body: s.body,
    serverHeaders: s.serverHeaders ?? {},
    error: s.error ?? null,
  };
}

/** What scoring a candidate against a golden record needs. */
export interface GoldenScoringInput {
  when: ScoringOptions['when'];
  source: PromptSource;
  free: Comparison;
  golden: GoldenRecord;
  target: ScoringTarget;
  thresholds: Thresholds;
}

/**
 * The candidate scores the golden answer's tokens (the ids the golden record holds, the prompt
 * as the candidate's engine tokenises it — it must be the golden backend's ids) and the two
 * sides make the pair's `scored`/`prompt` blocks, as a live pair's would. The same rules as live
 * scoring decide whether it is needed (`analysis.scoring.when`, settled verdicts). Never throws.
 */
export async function scoreAgainstGolden(
  candidate: BackendClient,
  o: GoldenScoringInput,
): Promise<{ scored: ScoredBlock; prompt: PromptBlock | null; pair: ScoredPair | null }> {
  const free = o.free;
  const settled =
    free.verdict === 'incomparable' ||
    free.verdict === 'prompt_mismatch' ||
    free.verdict === 'tokenizer_mismatch' ||
    free.verdict === 'identical';
  const none = (outcome: Exclude<ScoringOutcome, 'ok'>, why: string) => ({
    scored: notScored(outcome, why),
    prompt: null,
    pair: null,
  });
  if (o.when === 'never') return none('skipped', 'scoring is off (analysis.scoring.when: never)');
  if (settled) return none('skipped', `not needed: the pair is ${free.verdict}`);
  if (o.when === 'diverged' && free.firstDivergence === null)
    return none('skipped', 'not needed: no divergence, every position is comparable (analysis.scoring.when: diverged)');
  const g = o.golden.scored;
  if (!g || g.outcome !== 'ok' || !g.promptIds || !g.continuationIds) {
    const why = `the golden record carries no scoring of its answer${g?.reason ? ` (${g.reason})` : ''}`;
    return none(g?.outcome === 'unsupported' ? 'unsupported' : g?.outcome === 'failed' ? 'failed' : 'skipped', why);
  }
  try {
    const profile: EngineProfile = await candidate.profile(o.target);
    const prompt = await profile.promptIds(o.target, o.source);
    if (!sameIds(prompt, g.promptIds)) {
      throw new ScoringError(
        `the candidate tokenizes the prompt differently from the golden's backend (${prompt.length} and ${g.promptIds.length} tokens): tokenizers or chat templates differ`,
      );
    }
    const spec = {
      model: modelOf(o.source.body),
      prompt,
      continuation: g.continuationIds,
      topK: scoredTopK(g) ?? LOGITS_TOP,
      promptPositions: PROMPT_POSITIONS,
    };
    const c = await candidate.score(o.target, profile, spec);
    const pair = pairOf(c, goldenScore(g), profile, {
      name: g.profile ?? profile.name,
      method: g.method ?? 'golden',
      mode: g.mode ?? 'prefill',
    });
    return { ...scoredBlocks(pair, o.thresholds), pair };
  } catch (err) {
    const e = err as { message?: string; code?: string };
    const msg = e?.message ?? String(err);
    return none(
      err instanceof UnsupportedError ? 'unsupported' : 'failed',
      e?.code && !msg.includes(e.code) ? `${e.code}: ${msg}` : msg,
    );
  }
}

function sameIds(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

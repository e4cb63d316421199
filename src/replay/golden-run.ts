import { readJsonLines } from '../capture/reader.js';
import { scoringSource } from '../backend/rewrite.js';
import type { CaptureWriter } from '../capture/writer.js';
import { withScoredHealth, withScoring, type Thresholds } from '../core/index.js';
import { analyzePair, type PairResult } from '../pair/analyze.js';
import { PairPipeline } from '../pair/pipeline.js';
import type { Summary } from '../report/summary.js';
import type { ScoringTarget } from '../backend/http.js';
import { Backends, type BackendClient, type ScoringOptions } from '../backend/client.js';
import { createUpstreamPool, type UpstreamOptions } from '../backend/pool.js';
import { goldenSide, itemKey, scoreAgainstGolden, type GoldenIndex } from './golden.js';
import { forEachItem, replayedPair, toReplayItem, type ReplayItem } from './input.js';

/** One analysed pair as a replay saw it (the gates read these). */
export interface AnalysedPair {
  /** The pair's id: `file:line` of the input (its basename). */
  at: string;
  file: string;
  line: number;
  route: string;
  /** The request as the candidate got it. */
  request: Record<string, unknown>;
  result: PairResult;
}

/** What a replay against a golden file needs (replay's options, with the golden file instead of a baseline). */
export interface GoldenReplayOptions {
  inputs: readonly string[];
  candidate: UpstreamOptions;
  golden: GoldenIndex;
  tlsInsecure: boolean;
  /** Shorten every golden request to this many tokens (never longer: the golden holds no more). */
  maxTokens?: number;
  concurrency: number;
  rps: number | null;
  thresholds: Thresholds;
  scoring: ScoringOptions;
  writer: CaptureWriter;
  summary: Summary;
  onSkip?: (message: string) => void;
  onPair?: (done: number) => void;
  onAnalysed?: (p: AnalysedPair) => void;
  signal?: AbortSignal;
}

/** The golden request, shortened to `maxTokens` when asked. */
export function goldenBody(
  request: Readonly<Record<string, unknown>>,
  maxTokens: number | undefined,
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...request };
  if (maxTokens === undefined) return out;
  let named = false;
  for (const k of ['max_tokens', 'max_completion_tokens']) {
    if (typeof out[k] !== 'number') continue;
    named = true;
    if ((out[k] as number) > maxTokens) out[k] = maxTokens;
  }
  if (!named) out.max_tokens = maxTokens;
  return out;
}

/**
 * Replays inputs against a candidate alone, each compared with its golden record's answer
 * (`replay --baseline-from`): the golden request is sent to the candidate (within its logprobs
 * cap), the answers are compared as a live pair, and where the golden record carries its
 * backend's scoring the candidate scores the same tokens. Every input must have a golden record
 * ({@link missingFromGolden} is checked first). Input is streamed; at most `concurrency` pairs run.
 */
export async function runGoldenReplay(o: GoldenReplayOptions): Promise<{ pairs: number }> {
  const pool = createUpstreamPool(o.candidate, {
    tlsInsecure: o.tlsInsecure,
    connections: o.concurrency,
    maxHeaderSize: 64 * 1024,
  });
  // The candidate alone: the golden record is the other side.
  const backends = new Backends(
    { candidate: { ...o.candidate, pool, ownsPool: true, headers: { role: 'candidate' } }, baseline: null },
    o.scoring,
  );
  const pipeline = new PairPipeline(backends);
  const candidate = backends.candidate;
  const target = candidate.target();
  let done = 0;

  const replayOne = async (
    id: string,
    item: ReplayItem,
    at: { file: string; line: number },
    key: string,
  ): Promise<void> => {
    const golden = o.golden.byKey.get(key)!;
    const sent = await pipeline.send({ path: item.route, body: goldenBody(golden.request, o.maxTokens) });
    const [request, cand, base] = [sent.request, sent.candidate, goldenSide(golden)];
    const result = analyzePair(cand, base, o.thresholds);
    await scoreWithGolden(o, { candidate, target }, { item, request, golden, result });
    const pair = replayedPair(id, item, {
      request,
      candidate: cand,
      baseline: base,
      outcome: result.outcome,
      analysis: result.comparison,
      noiseFloor: o.thresholds.noiseFloor,
    });
    o.writer.write(pair);
    o.onAnalysed?.({ at: id, file: at.file, line: at.line, route: item.route, request, result });
    o.summary.add({
      file: at.file,
      line: at.line,
      id,
      route: item.route,
      ...(item.model !== undefined ? { model: item.model } : {}),
      result,
      noiseFloor: o.thresholds.noiseFloor,
      request,
    });
    o.onPair?.(++done);
  };

  try {
    const missing = (item: ReplayItem, value: unknown) =>
      o.golden.byKey.has(itemKey(item, value)) ? null : `no golden record for this prompt in ${o.golden.file}`;
    return {
      pairs: await forEachItem(o, (id, item, at, value) => replayOne(id, item, at, itemKey(item, value)), missing),
    };
  } finally {
    await backends.close();
  }
}

/** Where a compared pair's free-running comparison gains the candidate's scoring of the golden tokens (in place). */
async function scoreWithGolden(
  o: GoldenReplayOptions,
  on: { candidate: BackendClient; target: ScoringTarget },
  p: {
    item: ReplayItem;
    request: Record<string, unknown>;
    golden: Parameters<typeof goldenSide>[0];
    result: PairResult;
  },
): Promise<void> {
  const { result } = p;
  if (result.outcome !== 'ok' || !result.comparison || !result.baseline) return;
  const free = result.comparison;
  const r = await scoreAgainstGolden(on.candidate, {
    when: o.scoring.when,
    source: scoringSource(p.item.kind, p.request),
    free,
    golden: p.golden,
    target: on.target,
    thresholds: o.thresholds,
  });
  result.comparison = withScoredHealth(withScoring(free, r.scored, r.prompt, o.thresholds), r.pair, o.thresholds);
}

/** A short description of a prompt for messages: its route and the start of its text. */
export function describePrompt(item: ReplayItem): string {
  const b = item.body;
  const text =
    typeof b.prompt === 'string'
      ? b.prompt
      : Array.isArray(b.messages)
        ? JSON.stringify((b.messages.at(-1) as { content?: unknown } | undefined)?.content ?? '')
        : JSON.stringify(b.prompt ?? '');
  const t = typeof text === 'string' ? text : String(text);
  return `${item.route} ${JSON.stringify(t.length > 40 ? `${t.slice(0, 40)}…` : t)}`;
}

/**
 * The inputs that have no golden record (before anything is sent: a golden gate missing a prompt
 * is misconfigured), as `file:line (route "prompt…")`; and how many inputs have one.
 */
export async function missingFromGolden(
  inputs: readonly string[],
  golden: GoldenIndex,
): Promise<{ missing: string[]; found: number }> {
  const missing: string[] = [];
  let found = 0;
  for (const file of inputs) {
    for await (const line of readJsonLines(file)) {
      if (line.error !== undefined) continue;
      const item = toReplayItem(line.value);
      if ('error' in item) continue;
      if (golden.byKey.has(itemKey(item, line.value))) found++;
      else missing.push(`${line.file}:${line.line} (${describePrompt(item)})`);
    }
  }
  return { missing, found };
}

import type { CaptureWriter } from '../capture/writer.js';
import type { Thresholds } from '../core/index.js';
import { rewriteForMirror, type RewriteOptions } from '../backend/rewrite.js';
import { Backends, type BackendOptions, type ScoringOptions } from '../backend/client.js';
import { createUpstreamPool, type UpstreamOptions } from '../backend/pool.js';
import { PairPipeline, type PairRun } from '../pair/pipeline.js';
import type { PairResult } from '../pair/analyze.js';
import type { Summary } from '../report/summary.js';
import { forEachItem, replayedPair, type InputPlace, type ReplayItem } from './input.js';

/** What a replay needs: inputs, the two backends, pacing, thresholds, and where results go. */
export interface ReplayOptions {
  inputs: readonly string[];
  /** `model`: `candidate.model`, the name every copy to it carries (null: the input's). */
  candidate: UpstreamOptions & { model?: string | null };
  /** The trusted build; null: baseline-free, each input probes the candidate against itself (cold → warm). */
  baseline: (UpstreamOptions & { apiKey: string | null; model?: string | null }) | null;
  tlsInsecure: boolean;
  /** The mirror's rewrite options (`mirror.*`). */
  rewrite: RewriteOptions;
  /** Generate this many tokens per request instead of what the input asked for (capped by it otherwise). */
  maxTokens?: number;
  /** Pairs in flight at once. */
  concurrency: number;
  /** Pairs started per second at most; null: as fast as `concurrency` allows. */
  rps: number | null;
  thresholds: Thresholds;
  /** Teacher-forced scoring of diverged pairs, as the live mirror does (`analysis.scoring`, the engine profiles). */
  scoring: ScoringOptions;
  writer: CaptureWriter;
  summary: Summary;
  /** Each input line that cannot be replayed, as `file:line: reason`. */
  onSkip?: (message: string) => void;
  /** After each finished pair. */
  onPair?: (done: number) => void;
  signal?: AbortSignal;
}

/** The body to send: the item's, with `maxTokens` imposed when asked, through the mirror's rewrite. */
function mirroredBody(item: ReplayItem, o: ReplayOptions): Record<string, unknown> {
  let body = item.body;
  let rewrite = o.rewrite;
  if (o.maxTokens !== undefined) {
    body = {
      ...body,
      [item.kind === 'chat' && body.max_completion_tokens !== undefined ? 'max_completion_tokens' : 'max_tokens']:
        o.maxTokens,
    };
    rewrite = { ...rewrite, maxTokens: o.maxTokens };
  }
  return rewriteForMirror(item.kind, body, rewrite);
}

/** The response-head limit of replay's pools: the default of `limits.maxHeaderKB`. */
const REPLAY_MAX_HEADER = 64 * 1024;

/**
 * Replays captured requests or a prompt set against two backends: each line goes through the
 * mirror's rewrite and the pair pipeline (src/pair/pipeline.ts: send within the logprobs caps,
 * classify, score; baseline-free, the candidate cold then warm), the pair is compared like a live
 * one, written to the capture and added to the summary. Input is streamed; at most `concurrency`
 * pairs are in flight.
 */
export async function runReplay(o: ReplayOptions): Promise<{ pairs: number }> {
  const r = new PairReplay(o);
  try {
    return { pairs: await forEachItem(o, (id, item, at) => r.replayItem(id, item, at)) };
  } finally {
    await r.close();
  }
}

/** A replay's backends and pipeline, and how many pairs are done. */
class PairReplay {
  private readonly backends: Backends;
  private readonly pipeline: PairPipeline;
  private done = 0;

  constructor(private readonly o: ReplayOptions) {
    const side = (
      u: UpstreamOptions & { model?: string | null },
      rest: Pick<BackendOptions, 'headers' | 'secrets'>,
    ) => ({
      ...u,
      pool: createUpstreamPool(u, {
        tlsInsecure: o.tlsInsecure,
        connections: o.concurrency,
        maxHeaderSize: REPLAY_MAX_HEADER,
      }),
      ownsPool: true,
      model: u.model ?? null,
      ...rest,
    });
    const b = o.baseline;
    this.backends = new Backends(
      {
        candidate: side(o.candidate, { headers: { role: 'candidate' } }),
        baseline:
          b === null
            ? null
            : side(b, {
                headers: { role: 'baseline', apiKey: b.apiKey, forwardAuth: false },
                secrets: b.apiKey ? [b.apiKey] : [],
              }),
      },
      o.scoring,
    );
    // Scored health: the offline report's figures are taken over the teacher-forced positions.
    this.pipeline = new PairPipeline(this.backends, { scoredHealth: true });
  }

  close(): Promise<unknown> {
    return this.backends.close();
  }

  /** One input through the pipeline (baseline-free: the candidate twice, cold then warm), written and summed. */
  async replayItem(id: string, item: ReplayItem, at: InputPlace): Promise<void> {
    const { o } = this;
    const alone = this.backends.baseline === null;
    const run = await this.pipeline.run(
      { path: item.route, kind: item.kind, body: mirroredBody(item, o) },
      { thresholds: o.thresholds, busy: false, repeat: alone ? { backends: ['candidate'], flush: false } : null },
    );
    o.writer.write(
      replayedPair(id, item, {
        request: run.request,
        candidate: run.candidate,
        baseline: run.baseline,
        outcome: run.result.outcome,
        analysis: alone ? null : run.result.comparison,
        noiseFloor: o.thresholds.noiseFloor,
        ...(alone ? { repeats: run.repeats } : {}),
      }),
    );
    o.summary.add({
      file: at.file,
      line: at.line,
      id,
      route: item.route,
      ...(item.model !== undefined ? { model: item.model } : {}),
      result: alone ? aloneResult(run) : run.result,
      noiseFloor: o.thresholds.noiseFloor,
      ...(alone ? { repeats: repeatsOf(run) } : { request: run.request }),
    });
    o.onPair?.(++this.done);
  }
}

/** A baseline-free pair's result: nothing compared but its repeat. */
function aloneResult(run: PairRun): PairResult {
  return { outcome: run.result.outcome, comparison: null, candidate: null, baseline: null, baselineFree: true };
}

/** A baseline-free pair's repeat as the summary counts it. */
function repeatsOf(run: PairRun) {
  return run.repeats.map((rp) => ({
    backend: rp.backend,
    flushed: false,
    probe: rp.probe,
    comparison: rp.analysis,
    verdict: rp.verdict,
  }));
}

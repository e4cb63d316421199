import type { Pool } from 'undici';
import type { CaptureWriter } from '../capture/writer.js';
import { withScoredHealth, withScoring, type Thresholds } from '../core/index.js';
import { callBackend, mirrorHeaders } from '../backend/dispatch.js';
import { LogprobLimits, sendOneWithinLimits, sendWithinLimits } from '../backend/limits.js';
import { rewriteForMirror, type RewriteOptions } from '../backend/rewrite.js';
import { Scorer, withCopyParams, type ScoringOptions } from '../pair/score.js';
import type { ScoringTarget } from '../backend/http.js';
import { analyzePair, type PairResult } from '../report/pair.js';
import { classifyPair } from '../core/pair.js';
import { repeatOnce } from '../pair/repeat.js';
import { CacheCounts } from '../core/self.js';
import type { Summary } from '../report/summary.js';
import { createUpstreamPool, type UpstreamOptions } from '../backend/pool.js';
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
 * mirror's rewrite and dispatch (`rewriteForMirror`, `mirrorHeaders`, `callBackend`, the
 * logprobs-cap retry of `sendWithinLimits`), the pair is
 * compared like a live one, written to the capture and added to the summary. Input is streamed;
 * at most `concurrency` pairs are in flight.
 */
export async function runReplay(o: ReplayOptions): Promise<{ pairs: number }> {
  const r = new PairReplay(o);
  try {
    return {
      pairs: await forEachItem(o, (id, item, at) =>
        o.baseline === null ? r.alone(id, item, at) : r.paired(id, item, at),
      ),
    };
  } finally {
    await r.close();
  }
}

/** A replay's backends (pools, headers, scoring targets) and what it learns of them as it goes (logprobs caps, cache counts). */
class PairReplay {
  private readonly candidatePool: Pool;
  private readonly baselinePool: Pool | null;
  private readonly baseline: UpstreamOptions & { apiKey: string | null; model?: string | null };
  private readonly limits = new LogprobLimits();
  private readonly cHeaders = mirrorHeaders({}, { role: 'candidate' });
  private readonly bHeaders: Record<string, string>;
  private readonly scorer: Scorer;
  private readonly counts = new CacheCounts();
  private readonly targets: Record<'candidate' | 'baseline', ScoringTarget>;
  private done = 0;

  constructor(private readonly o: ReplayOptions) {
    const pool = (u: UpstreamOptions) =>
      createUpstreamPool(u, {
        tlsInsecure: o.tlsInsecure,
        connections: o.concurrency,
        maxHeaderSize: REPLAY_MAX_HEADER,
      });
    this.candidatePool = pool(o.candidate);
    this.baselinePool = o.baseline === null ? null : pool(o.baseline);
    const baseline = (this.baseline = o.baseline ?? { ...o.candidate, apiKey: null });
    this.bHeaders = mirrorHeaders({}, { role: 'baseline', apiKey: baseline.apiKey, forwardAuth: false });
    this.scorer = new Scorer(o.scoring);
    this.targets = {
      candidate: {
        pool: this.candidatePool,
        url: o.candidate.url,
        headers: this.cHeaders,
        timeoutMs: o.candidate.timeoutMs,
        model: o.candidate.model ?? null,
      },
      baseline: {
        pool: this.baselinePool ?? this.candidatePool,
        url: baseline.url,
        headers: this.bHeaders,
        timeoutMs: baseline.timeoutMs,
        model: baseline.model ?? null,
        secrets: baseline.apiKey ? [baseline.apiKey] : [],
      },
    };
  }

  close(): Promise<unknown> {
    return Promise.all([this.candidatePool, this.baselinePool].map((p) => p?.close()));
  }

  /** Baseline-free: the candidate twice (cold, then warm from its cache), compared with itself. */
  async alone(id: string, item: ReplayItem, at: InputPlace): Promise<void> {
    const { o, targets } = this;
    const cExtra = await this.scorer.copyParams('candidate', targets.candidate);
    const sendIt = async (body: Record<string, unknown>) =>
      sendOneWithinLimits(
        {
          body,
          limits: this.limits,
          send: (_b, p) =>
            callBackend(this.candidatePool, o.candidate, item.route, this.cHeaders, withCopyParams(p, cExtra)),
        },
        'candidate',
      );
    const first = await sendIt(mirroredBody(item, o));
    const request = first.body;
    const rp = await repeatOnce({
      backend: 'candidate',
      first: first.result,
      send: async () => (await sendIt(request)).result,
      flushed: false,
      thresholds: o.thresholds,
      scorer: this.scorer,
      target: targets.candidate,
      source: { kind: item.kind, body: request },
      busy: false,
      when: o.scoring.when,
      counts: this.counts,
    });
    const cand = first.result;
    const { outcome } = classifyPair(cand, null, o.thresholds);
    o.writer.write(
      replayedPair(id, item, {
        request,
        candidate: cand,
        baseline: null,
        outcome,
        analysis: null,
        noiseFloor: o.thresholds.noiseFloor,
        repeats: [rp],
      }),
    );
    const result: PairResult = { outcome, comparison: null, candidate: null, baseline: null, baselineFree: true };
    const repeats = [
      { backend: 'candidate' as const, flushed: false, probe: rp.probe, comparison: rp.analysis, verdict: rp.verdict },
    ];
    o.summary.add({
      file: at.file,
      line: at.line,
      id,
      route: item.route,
      result,
      noiseFloor: o.thresholds.noiseFloor,
      repeats,
    });
    o.onPair?.(++this.done);
  }

  /** Both backends at once, within the logprobs caps they told us about (like the live mirror: limits.ts); compared, scored. */
  async paired(id: string, item: ReplayItem, at: InputPlace): Promise<void> {
    const { o, targets, scorer } = this;
    const [cExtra, bExtra] = await Promise.all([
      scorer.copyParams('candidate', targets.candidate),
      scorer.copyParams('baseline', targets.baseline),
    ]);
    const sent = await sendWithinLimits({
      body: mirroredBody(item, o),
      limits: this.limits,
      send: (backend, p) =>
        backend === 'candidate'
          ? callBackend(this.candidatePool, o.candidate, item.route, this.cHeaders, withCopyParams(p, cExtra))
          : callBackend(targets.baseline.pool, this.baseline, item.route, this.bHeaders, withCopyParams(p, bExtra)),
    });
    const request = sent.body;
    const [cand, base] = [sent.candidate, sent.baseline];
    const result = analyzePair(cand, base, o.thresholds);
    if (result.outcome === 'ok' && result.comparison && result.baseline) {
      const free = result.comparison;
      const r = await scorer.score({
        source: { kind: item.kind, body: request },
        free,
        baseline: { parsed: result.baseline, body: base.body },
        targets,
        thresholds: o.thresholds,
        busy: false,
      });
      // The health of a scored pair is taken over its teacher-forced positions (docs/format.md, `health`).
      result.comparison = withScoredHealth(withScoring(free, r.scored, r.prompt, o.thresholds), r.pair, o.thresholds);
    }
    o.writer.write(
      replayedPair(id, item, {
        request,
        candidate: cand,
        baseline: base,
        outcome: result.outcome,
        analysis: result.comparison,
        noiseFloor: o.thresholds.noiseFloor,
      }),
    );
    o.summary.add({
      file: at.file,
      line: at.line,
      id,
      route: item.route,
      result,
      noiseFloor: o.thresholds.noiseFloor,
      request,
    });
    o.onPair?.(++this.done);
  }
}

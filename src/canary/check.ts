import { Backends, type ScoringOptions } from '../backend/client.js';
import { requestJson } from '../backend/http.js';
import { createUpstreamPool, type UpstreamOptions } from '../backend/pool.js';
import type { RewriteOptions } from '../backend/rewrite.js';
import type { Thresholds } from '../core/index.js';
import { PairPipeline } from '../pair/pipeline.js';
import { goldenKey, type GoldenIndex } from '../replay/golden.js';
import type { CanaryProbe } from './probes.js';
import { CanaryRunner, judgeRound, type CanaryJudgement, type CanaryPair, type JudgeOptions } from './runner.js';

/**
 * `logprobe canary check`: one round of the probe set per model, sent through the pair pipeline
 * to the candidate and a live baseline, or to the candidate alone against a golden reference,
 * and judged with {@link judgeRound} — the judgement `serve`'s canaries make every interval.
 */

/** What a check needs: the sides, the probes, how copies are made and rounds judged. */
export interface CheckOptions {
  candidate: UpstreamOptions & { model: string | null };
  /** The live trusted build; null with a reference. */
  baseline: (UpstreamOptions & { apiKey: string | null; model: string | null }) | null;
  reference: GoldenIndex | null;
  tlsInsecure: boolean;
  probes: readonly CanaryProbe[];
  /** The rewrite of a probe copy: `canary.maxTokens` long, `canary.topLogprobs` wide, `mirror.seed`/`extraParams`. */
  copy: RewriteOptions;
  thresholds: Thresholds;
  scoring: ScoringOptions;
  judge: JudgeOptions;
  /** One round per model; null: the probes as they are (no model named unless a probe names one). */
  models: readonly (string | null)[];
  onPair?: (done: number) => void;
}

/** One model's round: the pairs and their judgement. */
export interface CheckRound {
  model: string | null;
  pairs: CanaryPair[];
  judgement: CanaryJudgement;
}

/** The probes of a model's round: those that name no model, or this one. */
export function probesFor(probes: readonly CanaryProbe[], model: string | null): CanaryProbe[] {
  return probes.filter((p) => p.model === undefined || model === null || p.model === model);
}

/** The probes a reference holds no answer for (a reference must answer every probe). */
export function missingFromReference(probes: readonly CanaryProbe[], ref: GoldenIndex): CanaryProbe[] {
  return probes.filter((p) => !ref.byKey.has(goldenKey(p.route, p.body)));
}

/** Runs one round per model, the probes one after another (a canary is a trickle, not a load). */
export async function runCheck(o: CheckOptions): Promise<CheckRound[]> {
  const backends = checkBackends(o);
  // Each probe twice to the trusted side (the candidate against a reference): the spread test's null.
  const runner = new CanaryRunner({
    pipeline: new PairPipeline(backends),
    reference: o.reference,
    copy: o.copy,
    self: true,
  });
  const rounds: CheckRound[] = [];
  let done = 0;
  try {
    for (const model of o.models) {
      const pairs: CanaryPair[] = [];
      for (const probe of probesFor(o.probes, model)) {
        pairs.push(await runner.one(probe, model, o.thresholds));
        o.onPair?.(++done);
      }
      rounds.push({ model, pairs, judgement: judgeRound(pairs, o.judge) });
    }
  } finally {
    await backends.close();
  }
  return rounds;
}

/** The candidate's client and the live baseline's (none against a reference), one connection each. */
function checkBackends(o: CheckOptions): Backends {
  const pool = (u: UpstreamOptions) =>
    createUpstreamPool(u, { tlsInsecure: o.tlsInsecure, connections: 2, maxHeaderSize: 64 * 1024 });
  const b = o.baseline;
  return new Backends(
    {
      candidate: { ...o.candidate, pool: pool(o.candidate), ownsPool: true, headers: { role: 'candidate' } },
      baseline:
        b === null || o.reference !== null
          ? null
          : {
              ...b,
              pool: pool(b),
              ownsPool: true,
              headers: { role: 'baseline', apiKey: b.apiKey, forwardAuth: false },
              secrets: b.apiKey ? [b.apiKey] : [],
            },
    },
    o.scoring,
  );
}

/**
 * The models a server lists in `GET /v1/models` (each `data[].id`), or why it listed none: an
 * unreachable server, an HTTP error, an answer without models.
 */
export async function listModels(
  u: UpstreamOptions,
  o: { tlsInsecure: boolean; apiKey?: string | null },
): Promise<{ models: string[] } | { error: string; unreachable: boolean }> {
  const pool = createUpstreamPool(u, { tlsInsecure: o.tlsInsecure, connections: 1, maxHeaderSize: 64 * 1024 });
  try {
    const answer = await requestJson(
      {
        pool,
        url: u.url,
        headers: o.apiKey ? { authorization: `Bearer ${o.apiKey}` } : {},
        timeoutMs: Math.min(u.timeoutMs, 30_000),
        model: null,
        adminApiKey: null,
        secrets: o.apiKey ? [o.apiKey] : [],
      },
      'GET',
      '/v1/models',
    );
    if (answer.status >= 400) return { error: `GET /v1/models answered HTTP ${answer.status}`, unreachable: false };
    const data = (answer.body as { data?: unknown } | null)?.data;
    const ids = Array.isArray(data)
      ? data.map((m) => (m as { id?: unknown } | null)?.id).filter((id): id is string => typeof id === 'string')
      : [];
    return ids.length > 0
      ? { models: [...new Set(ids)] }
      : { error: 'GET /v1/models listed no model', unreachable: false };
  } catch (err) {
    const e = err as { code?: string; message?: string };
    return { error: `GET /v1/models failed: ${e.code ?? e.message ?? String(err)}`, unreachable: true };
  } finally {
    await pool.close();
  }
}

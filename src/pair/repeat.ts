import {
  compare,
  forcedStats,
  notScored,
  parseResponse,
  withScoring,
  type Comparison,
  type ParsedResponse,
  type ScoredBlock,
  type Thresholds,
} from '../core/index.js';
import {
  probeShape,
  repeatCache,
  selfVerdict,
  type CacheCounts,
  type ProbeShape,
  type RepeatCache,
  type RepeatSides,
  type SelfVerdict,
} from '../core/self.js';
import type { ScoringTarget } from '../backend/http.js';
import type { EngineProfile, PromptSource } from '../backend/engines/profile.js';
import { withTopless } from './score.js';
import type { BackendClient } from '../backend/client.js';
import type { Backend } from '../core/types.js';
import type { BackendResult } from '../backend/dispatch.js';

/**
 * One repeat probe of the cache path: the same mirrored copy sent to one backend a second time,
 * right after the first run (which the pair already has), so that the second is normally served
 * from the prefix cache; optionally the cache is emptied before the first run (`flush`: the first
 * run is then cold for sure). The two runs are compared with the same core as a pair (second as
 * the candidate, first as the baseline), teacher-forced where scoring is on and reads the cache
 * (llama-server): the first run's tokens scored again on the same backend, against the first
 * run's own logprobs. Where the engine's scoring does not read the cache (vLLM, SGLang) it is not
 * made: a fresh prefill says nothing of the warm path, and the warm run's own positions (up to
 * the divergence, the flip and its gap) are the evidence.
 */
export interface RepeatPair {
  backend: Backend;
  /** The cache was emptied before the first run (cold for sure), else cold or warm by chance. */
  flushed: boolean;
  /** Why the flush could not be made, when it was asked for. */
  flushError?: string;
  /** The second run. */
  second: BackendResult;
  /**
   * The prompt tokens each run took from the cache, as the engine reports them (null: it does
   * not): what the pair really probed (core/self.ts `probeShape`). A first run that reused a
   * prefix or a second run that found none is no cold→warm probe, and the self alert skips it.
   */
  cached: RepeatCache;
  /** The counts as known: a missing one read as 0 on a backend that has reported counts (core/self.ts `CacheCounts`). */
  counts: RepeatCache;
  /** The flush before the first run is confirmed: it succeeded on an engine whose answer proves it (not vLLM's). */
  confirmedFlush: boolean;
  /** What the pair probed (`probeShape` of the known counts and the confirmed flush): only `cold_warm` feeds the self alert. */
  probe: ProbeShape;
  /** How each side of the comparison was obtained and whether that read the cache. */
  sides: RepeatSides;
  /** The comparison of the two runs (second vs first), or null when a run failed. */
  analysis: Comparison | null;
  verdict: SelfVerdict | null;
}

/** What a repeat needs: how to send the copy again, the first run, and what scoring needs. */
export interface RepeatInput {
  /** The backend probed (its profile read, the first run scored again on it). */
  client: BackendClient;
  first: BackendResult;
  /** Sends the mirrored copy again (within the logprobs caps), to this backend. */
  send: () => Promise<BackendResult>;
  flushed: boolean;
  flushError?: string;
  thresholds: Thresholds;
  target: ScoringTarget;
  source: PromptSource;
  /** The mirror is behind: expensive scoring is skipped. */
  busy: boolean;
  /** `analysis.scoring.when`. */
  when: 'diverged' | 'always' | 'never';
  /** Which backends report their cache hits, learned from their answers (the mirror's one memory). */
  counts: CacheCounts;
}

function failed(r: BackendResult): boolean {
  return r.error !== null || r.status >= 400;
}

/** Runs the second request and compares it with the first. Never throws. */
export async function repeatOnce(o: RepeatInput): Promise<RepeatPair> {
  const base = { backend: o.client.side, flushed: o.flushed, ...(o.flushError ? { flushError: o.flushError } : {}) };
  const second = await o.send();
  const profile = await o.client.profile(o.target).catch(() => null);
  const confirmedFlush = o.flushed && profile?.flushConfirms === true;
  const bad = failed(o.first) || failed(second);
  const cached = bad ? { first: null, second: null } : repeatCache(o.first.body, second.body);
  const counts = bad ? cached : o.counts.read(o.client.side, cached);
  const judged = { cached, counts, confirmedFlush, probe: probeShape(counts, confirmedFlush) };
  const sides: RepeatSides = {
    first: { by: 'generation', readCache: confirmedFlush ? false : readCache(counts.first) },
    second: { by: 'generation', readCache: readCache(counts.second) },
  };
  if (bad) return { ...base, second, ...judged, sides, analysis: null, verdict: null };
  const p1 = parseResponse(o.first.body);
  const p2 = parseResponse(second.body);
  const free = compare(p2, p1, o.thresholds);
  const analysis = free.verdict === 'incomparable' ? free : await scoredSelf(o, profile, free, p1);
  const s = analysis.scored;
  if (s && s.method !== undefined && s.outcome !== 'skipped')
    sides.scored = {
      by: s.method,
      readCache: s.readsCache ?? null,
      counted: s.outcome === 'ok' && s.readsCache !== false,
    };
  else if (s?.readsCache === false) sides.scored = { by: s.method ?? 'scoring', readCache: false, counted: false };
  return { ...base, second, ...judged, sides, analysis, verdict: selfVerdict(analysis) };
}

/** A run's cache use from its known count: some prompt tokens reused, none, or not reported. */
function readCache(n: number | null): boolean | null {
  return n === null ? null : n > 0;
}

/**
 * Teacher-forced self comparison: the first run's tokens scored on the same backend (its cache now
 * warm with them), against the first run's own logprobs — every position comparable. No prompt
 * block: one backend's prompt positions have nothing to be compared with. Only where the scoring
 * reads the cache: elsewhere the free-running comparison stands, with the reason.
 */
async function scoredSelf(
  o: RepeatInput,
  profile: EngineProfile | null,
  free: Comparison,
  first: ParsedResponse,
): Promise<Comparison> {
  const settled =
    free.verdict === 'identical' || free.verdict === 'tokenizer_mismatch' || free.verdict === 'prompt_mismatch';
  if (o.when === 'never' || settled || (o.when === 'diverged' && free.firstDivergence === null)) return free;
  let scored: ScoredBlock;
  if (profile !== null && !profile.readsCache) {
    scored = {
      ...notScored(
        'skipped',
        `${profile.method} does not read the prefix cache: it would score a cold prefill, no evidence of the warm path; the warm run's own positions stand`,
      ),
      method: profile.method,
      readsCache: false,
    };
  } else if (o.busy)
    scored = notScored('skipped', 'the mirror is behind (its queue is half full): scoring skipped to keep up');
  else {
    try {
      const { profile: p, spec } = await o.client.prepare(o.target, o.source, { parsed: first, body: o.first.body });
      const forced = await o.client.score(o.target, p, spec);
      const stats = forcedStats(forced.continuation, first.steps.slice(0, forced.continuation.length), o.thresholds);
      scored = {
        outcome: 'ok',
        method: `${withTopless(p.method, forced.topless === true)}, the first run's tokens again`,
        mode: p.mode,
        readsCache: p.readsCache,
        ...stats,
      };
    } catch (err) {
      scored = notScored((err as Error).name === 'UnsupportedError' ? 'unsupported' : 'failed', (err as Error).message);
    }
  }
  return withScoring(free, scored, null, o.thresholds);
}

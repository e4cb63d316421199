import { compare, forcedStats, notScored, parseResponse, withScoring, type Comparison, type ParsedResponse, type ScoredBlock, type Thresholds } from '../core/index.js';
import { repeatCache, selfVerdict, type RepeatCache, type SelfVerdict } from '../core/self.js';
import type { ScoringTarget } from '../scoring/http.js';
import type { PromptSource } from '../scoring/profile.js';
import type { Backend, Scorer } from '../scoring/score.js';
import type { BackendResult } from './dispatch.js';

/**
 * One repeat probe of the cache path: the same mirrored copy sent to one backend a second time,
 * right after the first run (which the pair already has), so that the second is normally served
 * from the prefix cache; optionally the cache is emptied before the first run (`flush`: the first
 * run is then cold for sure). The two runs are compared with the same core as a pair (second as
 * the candidate, first as the baseline), teacher-forced where scoring is on: the first run's
 * tokens scored again on the same backend, against the first run's own logprobs.
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
  /** The comparison of the two runs (second vs first), or null when a run failed. */
  analysis: Comparison | null;
  verdict: SelfVerdict | null;
}

/** What a repeat needs: how to send the copy again, the first run, and what scoring needs. */
export interface RepeatInput {
  backend: Backend;
  first: BackendResult;
  /** Sends the mirrored copy again (within the logprobs caps), to this backend. */
  send: () => Promise<BackendResult>;
  flushed: boolean;
  flushError?: string;
  thresholds: Thresholds;
  scorer: Scorer;
  target: ScoringTarget;
  source: PromptSource;
  /** The mirror is behind: expensive scoring is skipped. */
  busy: boolean;
  /** `analysis.scoring.when`. */
  when: 'diverged' | 'always' | 'never';
}

function failed(r: BackendResult): boolean {
  return r.error !== null || r.status >= 400;
}

/** Runs the second request and compares it with the first. Never throws. */
export async function repeatOnce(o: RepeatInput): Promise<RepeatPair> {
  const base = { backend: o.backend, flushed: o.flushed, ...(o.flushError ? { flushError: o.flushError } : {}) };
  const second = await o.send();
  if (failed(o.first) || failed(second)) return { ...base, second, cached: { first: null, second: null }, analysis: null, verdict: null };
  const p1 = parseResponse(o.first.body);
  const p2 = parseResponse(second.body);
  const free = compare(p2, p1, o.thresholds);
  const analysis = free.verdict === 'incomparable' ? free : await scoredSelf(o, free, p1);
  return { ...base, second, cached: repeatCache(o.first.body, second.body), analysis, verdict: selfVerdict(analysis) };
}

/**
 * Teacher-forced self comparison: the first run's tokens scored on the same backend (its cache now
 * warm with them), against the first run's own logprobs — every position comparable. No prompt
 * block: one backend's prompt positions have nothing to be compared with.
 */
async function scoredSelf(o: RepeatInput, free: Comparison, first: ParsedResponse): Promise<Comparison> {
  const settled = free.verdict === 'identical' || free.verdict === 'tokenizer_mismatch';
  if (o.when === 'never' || settled || (o.when === 'diverged' && free.firstDivergence === null)) return free;
  let scored: ScoredBlock;
  if (o.busy) scored = notScored('skipped', 'the mirror is behind (its queue is half full): scoring skipped to keep up');
  else {
    try {
      const { profile, spec } = await o.scorer.prepare(o.backend, o.target, o.source, { parsed: first, body: o.first.body });
      const forced = await o.scorer.scoreSide(o.backend, o.target, profile, spec);
      const stats = forcedStats(forced.continuation, first.steps.slice(0, forced.continuation.length), o.thresholds);
      scored = { outcome: 'ok', method: `${profile.method}, the first run's tokens again`, mode: profile.mode, ...stats };
    } catch (err) {
      scored = notScored((err as Error).name === 'UnsupportedError' ? 'unsupported' : 'failed', (err as Error).message);
    }
  }
  return withScoring(free, scored, null, o.thresholds);
}

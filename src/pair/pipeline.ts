import type { Backend, Thresholds } from '../core/types.js';
import { parseResponse, withScoredHealth, withScoring } from '../core/index.js';
import { CacheCounts } from '../core/self.js';
import { comparePaths, type PathPair } from '../core/path.js';
import { cacheSplit, type CacheSplit } from '../core/slice.js';
import type { Comparison, ParsedResponse, TokenStep } from '../core/types.js';
import { asPromptMismatch } from '../core/pair.js';
import type { Backends, Copy } from '../backend/client.js';
import type { BackendResult } from '../backend/dispatch.js';
import { UnsupportedError } from '../backend/http.js';
import { responsesAsChat, scoringSource, type RequestKind, type RewriteOptions } from '../backend/rewrite.js';
import { analyzePair, type PairResult } from './analyze.js';
import { repeatOnce, type RepeatPair } from './repeat.js';
import { scorePair, type ScoringResult } from './score.js';

/** One copy through the pipeline: where it goes, its body, the client request it came from, and its API. */
export interface PairCopy extends Copy {
  kind: RequestKind;
}

/** Which backends a pair probes with a repeat (cold → warm), and whether their caches are emptied first. */
export interface RepeatPlan {
  backends: Backend[];
  flush: boolean;
}

/** Which backends a pair's path check covers (decode vs prefill on one server), and the floor it is counted against. */
export interface PathPlan {
  backends: Backend[];
  thresholds: Thresholds;
}

/** How one pair runs: the thresholds in force, whether the caller is behind, its repeat probes and its path check. */
export interface PairRunOptions {
  thresholds: Thresholds;
  /** The caller is behind: scoring is skipped to keep up. */
  busy: boolean;
  repeat: RepeatPlan | null;
  /** The path check of this pair; null or absent: none. */
  path?: PathPlan | null;
}

/** What a scoring attempt came to: its outcome, whether `logprobe_scoring_total` counts it, and why it failed. */
export interface ScoringOutcome {
  outcome: ScoringResult['scored']['outcome'];
  counted: boolean;
  reason: string | undefined;
}

/** One pair, run: what was sent, what each side answered, the pair classified and scored, and its repeats. */
export interface PairRun {
  /** The body the backends finally got (lowered to a logprobs cap one of them stated, if any). */
  request: Record<string, unknown>;
  candidate: BackendResult;
  /** The baseline's answer; null in baseline-free mode. */
  baseline: BackendResult | null;
  /** The pair classified ({@link analyzePair}), its comparison with the scoring folded in. */
  result: PairResult;
  /** The scoring's outcome, where scoring was asked for (a compared pair). */
  scoring: ScoringOutcome | null;
  repeats: RepeatPair[];
  /** Each checked backend's decode path against its prefill of the same tokens. */
  paths: PathPair[];
  /** Whether the candidate's copy read from its prefix cache, as its engine reported. */
  cache: CacheSplit;
  /** The backends whose cache flush before a repeat failed, with the error (their first run may be warm). */
  flushErrors: ReadonlyMap<Backend, string>;
  /** The copy went to another route than the client's (a Responses request as chat: no logprobs on that route). */
  translated?: { from: string; to: string };
}

/**
 * The one way a pair is made, for the online mirror and `replay` alike: the caches emptied first
 * (a repeat with `flush`), send (both backends at once, within their logprobs caps; the candidate
 * alone baseline-free), classify ({@link analyzePair}, as `analyze` does offline), score (teacher
 * forcing past the divergence), repeat (the same copy again to a backend, cold then warm), path
 * check (each backend's decode-time logprobs against its own prefill of the same tokens; after the
 * repeats, whose second run needs the first's prefix still cached).
 * The golden replay runs its send step against a candidate alone and classifies against the
 * golden answer; `record` sends through the same backend client.
 */
export class PairPipeline {
  /** Which backends report their cache hits, learned from their answers. */
  readonly counts = new CacheCounts();

  constructor(
    readonly backends: Backends,
    private readonly o: {
      /** Health taken over the scored positions (offline reports); the live mirror keeps the free-running health. */
      scoredHealth?: boolean;
      /** How copies are rewritten (`mirror`): a Responses copy is translated to chat with it where an engine returns no logprobs there. */
      rewrite?: RewriteOptions;
    } = {},
  ) {}

  /** An engine answered a Responses copy without logprobs: later Responses copies go as chat completions. */
  private responsesAsChat = false;

  async run(given: PairCopy, o: PairRunOptions): Promise<PairRun> {
    let copy = this.responsesAsChat ? this.asChat(given) : given;
    const flushErrors = o.repeat?.flush ? await this.flush(copy, o.repeat.backends) : new Map<Backend, string>();
    let sent = await this.send(copy);
    if (copy.kind === 'responses' && this.o.rewrite && withoutLogprobs(sent)) {
      // vLLM returned none on its Responses route before vllm-project/vllm#23225's fix: the same
      // request as chat completions (instructions and input items as messages) is compared instead.
      this.responsesAsChat = true;
      copy = this.asChat(given);
      sent = await this.send(copy);
    }
    const request = sent.request;
    const result = analyzePair(sent.candidate, sent.baseline, o.thresholds);
    // What the backends got: lowered to a logprobs cap one of them stated, if any.
    const asSent = withBody(copy, request);
    const cache = cacheSplit(this.counts.one('candidate', sent.candidate.body));
    if (result.comparison?.verdict === 'prompt_mismatch' && !o.busy)
      result.comparison = await this.locate(asSent, result.comparison);
    const scoring = await this.score(asSent, sent.baseline, result, o);
    const again = o.repeat
      ? await this.repeats(asSent, o.repeat, sent, flushErrors, o)
      : { repeats: [], body: request };
    // After the repeats: a prefill of the generated tokens would take the engine's cached prefix
    // (llama-server's one slot) that a repeat's second run must find warm.
    const paths = o.path ? await this.paths(asSent, sent, result, o.path, o.busy) : [];
    const repeats = again.repeats;
    // Baseline-free, the repeat is the comparison: a second run that failed leaves nothing compared.
    if (sent.baseline === null && repeats[0]?.verdict === null && result.outcome === 'ok')
      result.outcome = 'candidate_error';
    return {
      request: again.body,
      candidate: sent.candidate,
      baseline: sent.baseline,
      result,
      scoring,
      repeats,
      paths,
      cache,
      flushErrors,
      ...(copy !== given ? { translated: { from: given.path, to: copy.path } } : {}),
    };
  }

  /** A Responses copy as the chat completions copy it stands for (the same path prefix). */
  private asChat(copy: PairCopy): PairCopy {
    if (copy.kind !== 'responses' || !this.o.rewrite) return copy;
    const { payload: _payload, ...rest } = copy;
    return {
      ...rest,
      kind: 'chat',
      path: copy.path.replace(/\/responses$/, '/chat/completions'),
      body: responsesAsChat(copy.body, this.o.rewrite),
    };
  }

  /**
   * Step locate (a `prompt_mismatch` only): each side's prompt ids as its engine tokenizes the
   * request (chat through its own template), the first position where they differ and each
   * side's token there, spelled by its `/detokenize`. Never throws: where an engine cannot say,
   * the counts alone stand.
   */
  private async locate(copy: PairCopy, c: Comparison): Promise<Comparison> {
    const m = c.promptMismatch;
    if (!m || this.backends.baseline === null) return c;
    try {
      const source = scoringSource(copy.kind, copy.body);
      const side = (b: Backend) => {
        const client = this.backends.side(b);
        return client.promptTokens(client.target(copy.clientHeaders, copy.secrets), source);
      };
      const [cand, base] = await Promise.all([side('candidate'), side('baseline')]);
      const at = firstDifference(cand.ids, base.ids);
      if (at === null) return c;
      const [candidate, baseline] = await Promise.all([tokenAt(cand, at), tokenAt(base, at)]);
      return asPromptMismatch(c, { ...m, at, candidate, baseline });
    } catch {
      return c;
    }
  }

  /** Empties the caches of the backends a repeat probes, so the first run is cold; what failed is kept. */
  async flush(copy: Copy, backends: readonly Backend[]): Promise<Map<Backend, string>> {
    const errors = new Map<Backend, string>();
    for (const b of backends) {
      const client = this.backends.side(b);
      try {
        await client.flush(client.target(copy.clientHeaders, copy.secrets));
      } catch (err) {
        errors.set(b, (err as Error).message);
      }
    }
    return errors;
  }

  /** Step send: the copy to both backends at once (the candidate alone baseline-free). */
  async send(
    copy: Copy,
  ): Promise<{ request: Record<string, unknown>; candidate: BackendResult; baseline: BackendResult | null }> {
    if (this.backends.baseline === null) {
      const c = await this.backends.candidate.send(copy);
      return { request: c.body, candidate: c.result, baseline: null };
    }
    const sent = await this.backends.sendBoth(copy);
    return { request: sent.body, candidate: sent.candidate, baseline: sent.baseline };
  }

  /** Step score: a compared pair scored past its divergence, folded into its comparison (in place). */
  private async score(
    copy: PairCopy,
    baseline: BackendResult | null,
    result: PairResult,
    o: PairRunOptions,
  ): Promise<ScoringOutcome | null> {
    if (result.outcome !== 'ok' || !result.comparison || !result.baseline || baseline === null) return null;
    const free = result.comparison;
    const r = await scorePair(this.backends, {
      source: scoringSource(copy.kind, copy.body),
      free,
      baseline: { parsed: result.baseline, body: baseline.body },
      targets: {
        candidate: this.backends.candidate.target(copy.clientHeaders, copy.secrets),
        baseline: this.backends.side('baseline').target(copy.clientHeaders, copy.secrets),
      },
      thresholds: o.thresholds,
      busy: o.busy,
    });
    const scored = withScoring(free, r.scored, r.prompt, o.thresholds);
    result.comparison = this.o.scoredHealth ? withScoredHealth(scored, r.pair, o.thresholds) : scored;
    return { outcome: r.scored.outcome, counted: r.counted, reason: r.scored.reason };
  }

  /**
   * Step path check: each planned backend's own generated tokens scored in one prefill pass on
   * that backend (its engine profile, `prefill`), compared with the logprobs it reported while
   * decoding them. Never throws: an engine that cannot score gives `unsupported`, a failed call
   * `failed`, a mirror that is behind `skipped`.
   */
  private async paths(
    copy: PairCopy,
    sent: { candidate: BackendResult; baseline: BackendResult | null },
    result: PairResult,
    plan: PathPlan,
    busy: boolean,
  ): Promise<PathPair[]> {
    const out: PathPair[] = [];
    for (const backend of plan.backends) {
      const answer = sent[backend];
      if (answer === null || answer.error !== null || answer.status >= 400) continue;
      // Baseline-free, nothing parsed the candidate's answer yet.
      const parsed = result[backend] ?? parseResponse(answer.body);
      if (parsed.steps.length === 0) continue;
      if (busy) {
        out.push(notChecked(backend, 'skipped', 'the mirror is behind (its queue is half full): skipped to keep up'));
        continue;
      }
      out.push(await this.pathOf(backend, copy, answer, parsed, plan));
    }
    return out;
  }

  /** One backend's path check (see {@link paths}). */
  private async pathOf(
    backend: Backend,
    copy: PairCopy,
    answer: BackendResult,
    parsed: ParsedResponse,
    plan: PathPlan,
  ): Promise<PathPair> {
    const client = this.backends.side(backend);
    const target = client.target(copy.clientHeaders, copy.secrets);
    try {
      const { profile, spec } = await client.prepare(target, scoringSource(copy.kind, copy.body), {
        parsed,
        body: answer.body,
      });
      // As wide as the copy's own top-k at most: more alternatives on one side pair nothing.
      const topK = Math.min(spec.topK, Math.max(1, ...parsed.steps.map((s) => s.top.length)));
      const scored = await client.score(target, profile, { ...spec, topK, promptPositions: 0, prefill: true });
      const decode = parsed.steps.slice(0, scored.continuation.length);
      // The ids forced are the answer's own, or its text re-tokenised (SGLang's OpenAI routes name
      // none): text can re-tokenise to as many ids yet other ones, so each forced token must be the
      // one decoded — by id where the answer named it, else by text.
      const other = scored.continuation.findIndex((s, i) => !sameToken(s, decode[i]!));
      if (other >= 0)
        throw new UnsupportedError(
          `the answer names no token ids and its text re-tokenises to other tokens (position ${other}: ${JSON.stringify(scored.continuation[other]!.token)} for ${JSON.stringify(decode[other]!.token)})`,
        );
      // Named as decoded (the prefill may spell a token as its engine's placeholder).
      const prefill = scored.continuation.map((s, i) => ({ ...s, token: decode[i]!.token }));
      const analysis = comparePaths(decode, prefill, plan.thresholds);
      const method =
        profile.mode === 'incremental'
          ? `${profile.name} /completion per position (cache_prompt: false)`
          : profile.method;
      return { backend, outcome: 'ok', method, analysis, verdict: analysis.verdict };
    } catch (err) {
      const outcome = err instanceof UnsupportedError ? 'unsupported' : 'failed';
      return notChecked(backend, outcome, (err as Error)?.message ?? String(err));
    }
  }

  /**
   * Step repeat: each probed backend's second run, compared with its first; in the plan's order.
   * `body`: what the last run was sent (a second run may be lowered to a cap stated only then).
   */
  private async repeats(
    copy: PairCopy,
    plan: RepeatPlan,
    firsts: { candidate: BackendResult; baseline: BackendResult | null },
    flushErrors: ReadonlyMap<Backend, string>,
    o: PairRunOptions,
  ): Promise<{ repeats: RepeatPair[]; body: Record<string, unknown> }> {
    const repeats: RepeatPair[] = [];
    let body = copy.body;
    for (const b of plan.backends) {
      const first = firsts[b];
      if (first === null) continue;
      const client = this.backends.side(b);
      const flushError = flushErrors.get(b);
      repeats.push(
        await repeatOnce({
          client,
          first,
          send: async () => {
            const again = await client.send(withBody(copy, body));
            body = again.body;
            return again.result;
          },
          flushed: plan.flush && flushError === undefined,
          ...(flushError !== undefined ? { flushError } : {}),
          thresholds: o.thresholds,
          target: client.target(copy.clientHeaders, copy.secrets),
          source: scoringSource(copy.kind, body),
          busy: o.busy,
          when: this.backends.scoring.when,
          counts: this.counts,
        }),
      );
    }
    return { repeats, body };
  }
}

/** The first index at which two id lists differ (one ending before the other counts); null when equal. */
function firstDifference(a: readonly number[], b: readonly number[]): number | null {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return null;
}

/** A side's prompt token at `at`: its id (null past its end) and its text where its engine spells it. */
async function tokenAt(
  side: { ids: number[]; spell: ((ids: readonly number[]) => Promise<string>) | null },
  at: number,
): Promise<{ id: number | null; text: string | null }> {
  const id = side.ids[at];
  if (id === undefined) return { id: null, text: null };
  const text = side.spell ? await side.spell([id]).catch(() => null) : null;
  return { id, text };
}

/** Some side answered a Responses copy with no logprobs (its route returns none): the copy must go as chat. */
function withoutLogprobs(sent: { candidate: BackendResult; baseline: BackendResult | null }): boolean {
  return [sent.candidate, sent.baseline].some((r) => {
    if (r === null || r.error !== null || r.status >= 400) return false;
    const p = parseResponse(r.body);
    return p.format === 'responses' && p.steps.length === 0;
  });
}

function notChecked(backend: Backend, outcome: Exclude<PathPair['outcome'], 'ok'>, reason: string): PathPair {
  return { backend, outcome, reason, analysis: null, verdict: null };
}

/** Whether a prefill step forced the token the decode step chose: the same id where both name one, else the same text. */
function sameToken(s: TokenStep, decoded: TokenStep): boolean {
  if (decoded.id !== undefined && s.id !== undefined) return decoded.id === s.id;
  return s.token === decoded.token;
}

/** A copy with another body (and no payload: it is serialised again). */
export function withBody<C extends Copy>(copy: C, body: Record<string, unknown>): C {
  const { payload: _payload, ...rest } = copy;
  return { ...rest, body } as C;
}

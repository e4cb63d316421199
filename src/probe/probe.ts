import { Pool } from 'undici';
import type { Config } from '../config/schema.js';
import { parseResponse } from '../core/parse/index.js';
import { cachedPromptTokens } from '../core/self.js';
import type { TokenStep } from '../core/types.js';
import { failureReason, keyRefusal, refusesKey, type KeyName } from '../backend/failure.js';
import { parseLogprobLimit } from '../backend/limits.js';
import { detectEngine, KeyRefusedError } from '../backend/engines/detect.js';
import { requestJson, type JsonAnswer, type ScoringTarget } from '../backend/http.js';
import type { EngineName } from '../metrics/labels.js';
import { PROFILES } from '../backend/engines/index.js';
import type { Backend } from '../core/types.js';

/**
 * `logprobe probe URL` and `serve`'s start-up check of each backend: what the engine behind a URL
 * offers logprobe, each feature asked of the server itself (a request above the logprobs cap, a
 * repeat that should be served from the cache, a flush, one greedy request alone, again, and among
 * concurrent copies of itself), and
 * the server flag or setting that turns on what is off. Nothing here is assumed from the engine's
 * name except where the server cannot be asked (whether a scoring pass reads the cache is read in
 * its source: docs/engines.md).
 */

/** What the probe reports on, one line each; `logprobe_engine_capability{capability}`. */
export const CAPABILITIES = [
  'logprobs',
  'top_k_cap',
  'token_ids',
  'scoring',
  'prompt_top_k',
  'cache_counts',
  'flush',
  'cache_path',
  'chat_rendering',
  'determinism',
] as const;
export type CapabilityName = (typeof CAPABILITIES)[number];

/** The table's names for the capabilities. */
export const CAPABILITY_LABELS: Readonly<Record<CapabilityName, string>> = {
  logprobs: 'logprobs',
  top_k_cap: 'top-k cap',
  token_ids: 'token ids',
  scoring: 'scoring',
  prompt_top_k: 'prompt top-k',
  cache_counts: 'cache counts',
  flush: 'flush',
  cache_path: 'cache path',
  chat_rendering: 'chat rendering',
  determinism: 'determinism',
};

/** One line of the probe: works (true), does not (false), or was not tried (null, with the reason). */
export interface Capability {
  name: CapabilityName;
  ok: boolean | null;
  /** What the server answered, in a few words. */
  detail: string;
  /** The server flag or setting that enables it (null: none known, or nothing to enable). */
  enable: string | null;
}

export interface ProbeReport {
  url: string;
  engine: EngineName;
  /** How the engine was told (detect.ts's evidence, or `configured`). */
  evidence: string;
  version: string | null;
  model: string | null;
  capabilities: Capability[];
  /** The capabilities the configuration's features need (see {@link requiredCapabilities}). */
  required: CapabilityName[];
  /** Required capabilities that do not work (ok false or null). */
  missing: CapabilityName[];
  /** What the numbers it reports are (vLLM's `--logprobs-mode`, llama-server's pre-sampling values): two sides must mean the same. */
  meaning: LogprobMeaning;
}

/**
 * What a server's logprobs are. `mode`: vLLM's `--logprobs-mode` names (`raw_logprobs`, the
 * default; `raw_logits`, `processed_logprobs`, `processed_logits`), `logits` when only its
 * behaviour says they are not logprobs, null when not told (logprobs, raw or processed unknown).
 */
export interface LogprobMeaning {
  mode: string | null;
  /** How it was told, in a few words. */
  detail: string;
}

/** Whether two sides' logprobs cannot be compared, and why (one line naming the flag), or null. */
export function meaningMismatch(candidate: LogprobMeaning, baseline: LogprobMeaning): string | null {
  const c = candidate.mode;
  const b = baseline.mode;
  if (c === null || b === null || c === b) return null;
  const logits = (m: string) => m.endsWith('logits');
  // `logits` (told by behaviour only) matches either logits mode; raw vs processed needs both told.
  if ((c === 'logits' || b === 'logits') && logits(c) && logits(b)) return null;
  return `the candidate reports ${c} and the baseline ${b}: their numbers mean different things, so pairs are not compared (start both with the same vLLM --logprobs-mode; candidate: ${candidate.detail}; baseline: ${baseline.detail})`;
}

/** A URL that answers nothing at all: no HTTP answer to `GET /v1/models`. */
export class UnreachableError extends Error {
  override readonly name = 'UnreachableError';
}

/**
 * A server that answers `GET /v1/models` with 401/403: it refuses the key the probe sent (the
 * message names it: `rejected the API key (baseline.apiKey): HTTP 401: …`). Nothing else is asked
 * and no engine is told from the refusal. `sent`: whether a key was sent at all.
 */
export class KeyRejectedError extends Error {
  override readonly name = 'KeyRejectedError';
  constructor(
    message: string,
    readonly sent: boolean,
  ) {
    super(message);
  }
}

export interface ProbeOptions {
  url: string;
  /** Sent as `Authorization: Bearer …` on every request. */
  apiKey?: string | null;
  /** How a refusal names the key (`baseline.apiKey`; default `--api-key`, the command's flag). */
  keyName?: string;
  /** Sent instead of the API key to the cache flush (SGLang's `--admin-api-key`). */
  adminApiKey?: string | null;
  /** How a refused flush names the admin key (`candidate.adminApiKey`). */
  adminKeyName?: string;
  /** The served model's name; default the first of `/v1/models`. */
  model?: string | null;
  /** Per request, ms. */
  timeoutMs: number;
  tlsInsecure?: boolean;
  /** `auto` (detect.ts) or a profile name (candidate.engine / baseline.engine). */
  engine?: 'auto' | EngineName;
  /** Top logprobs logprobe asks for (`mirror.topLogprobs`). */
  topK: number;
  /** Empty the engine's cache to test the flush (false: the flush line says it was not tried). */
  flush: boolean;
  /**
   * Concurrent copies of the greedy request in the determinism check (`probe.concurrentCopies`,
   * default 16); on llama-server at most its `total_slots`.
   */
  copies?: number;
  /** Told the engine as soon as it is known, before any capability is asked (serve: the mirror adopts it). */
  onEngine?(engine: EngineName, evidence: string): void;
  /** What the configuration needs of this backend. */
  required: CapabilityName[];
  /** Only whether it answers, the engine and its version (`probe.atStart: reachability`): no capability is asked. */
  reachabilityOnly?: boolean;
  /** Aborts the probe (serve shutting down): its connections are destroyed, the probe rejects. */
  signal?: AbortSignal;
}

/** The flag or setting behind each capability, per engine (docs/engines.md cites the sources). */
const ENABLE: Partial<Record<CapabilityName, Partial<Record<EngineName, string>>>> = {
  top_k_cap: { vllm: '--max-logprobs N (default 20)' },
  token_ids: { vllm: 'vLLM 0.10.2+ (return_token_ids)' },
  prompt_top_k: { vllm: 'VLLM_USE_V2_MODEL_RUNNER=0 (the V2 runner returns no prompt top-k)' },
  cache_counts: { vllm: '--enable-prompt-tokens-details', sglang: '--enable-cache-report' },
  flush: {
    vllm: 'VLLM_SERVER_DEV_MODE=1',
    sglang: 'the admin key (--admin-api-key) as --api-key',
    llamacpp: '--slot-save-path DIR',
  },
  cache_path: {
    vllm: '--enable-prompt-tokens-details (dev mode alone does not do: its flush answers 200 without proof)',
    sglang: '--enable-cache-report',
    llamacpp: '--slot-save-path DIR',
  },
  chat_rendering: { sglang: 'an SGLang whose /tokenize takes messages (or returns prompt_token_ids)' },
  determinism: {
    vllm: 'VLLM_BATCH_INVARIANT=1 (vllm-project/vllm#51187: breaks near 44 co-resident sequences)',
    sglang: '--enable-deterministic-inference',
  },
};

/** Whether the engine's scoring pass reads its prefix cache, as its source says (it cannot be asked). */
const SCORING_READS_CACHE: Readonly<Record<EngineName, string>> = {
  vllm: 'does not read the cache (prompt_logprobs set skip_reading_prefix_cache: sampling_params.py)',
  sglang: 'does not read the cache (logprob_start_len 0 caps the reused prefix at 0: schedule_batch.py)',
  llamacpp: 'reads the cache (continuation positions with cache_prompt: true)',
  openai: 'cache use unknown',
};

/**
 * The capabilities a configuration's features need of a backend: logprobs within its cap always;
 * scoring (`analysis.scoring.when` not `never`) needs the scoring pass, prompt top-k and,
 * with the chat route mirrored, chat rendering; repeat probes (`mirror.repeat.rate` > 0, or no
 * baseline) need a visible cache path, and `mirror.repeat.flush` a flush; `noiseFloor: exact`
 * needs determinism.
 */
export function requiredCapabilities(config: Config, backend: Backend = 'candidate'): CapabilityName[] {
  const out: CapabilityName[] = ['logprobs', 'top_k_cap'];
  if (config.analysis.scoring.when !== 'never') {
    out.push('scoring', 'prompt_top_k');
    if (config.mirror.routes.includes('/v1/chat/completions')) out.push('chat_rendering');
  }
  const r = config.mirror.repeat;
  const repeats = config.baseline.url === null ? backend === 'candidate' : r.rate > 0 && r.backends.includes(backend);
  if (repeats) {
    out.push('cache_path');
    if (r.flush) out.push('flush');
  }
  if (config.analysis.noiseFloor === 'exact') out.push('determinism');
  return out;
}

/** A prompt long enough that a repeat is served from whole cache blocks (vLLM caches 16-token blocks only). */
function longPrompt(nonce: string): string {
  return `${nonce} The cache holds key 3 and value 7; the next line repeats it, so that a prefix cache has whole blocks to keep. `.repeat(
    3,
  );
}

const GREEDY = { temperature: 0, top_p: 1, seed: 1234 };

/**
 * Runs the probe. Throws {@link UnreachableError} when the URL answers nothing, {@link
 * KeyRejectedError} when it refuses the key.
 */
export async function probeEngine(o: ProbeOptions): Promise<ProbeReport> {
  const pool = new Pool(new URL(o.url).origin, {
    connections: null,
    pipelining: 1,
    connect: { rejectUnauthorized: !o.tlsInsecure, timeout: o.timeoutMs },
  });
  // A shutdown must not wait for a probe's requests (each may take probe.timeoutMs).
  const abort = () => void pool.destroy(new Error('probe aborted: shutting down')).catch(() => undefined);
  if (o.signal?.aborted) abort();
  o.signal?.addEventListener('abort', abort, { once: true });
  try {
    return await run(o, pool);
  } finally {
    o.signal?.removeEventListener('abort', abort);
    await pool.close().catch(() => undefined);
  }
}

/** A reachability-only probe's capabilities: none asked. */
const nothingAsked = (): Pick<ProbeReport, 'capabilities' | 'required' | 'missing'> => ({
  capabilities: [],
  required: [],
  missing: [],
});

/** Probes the server on `pool`: who it is, then (unless reachability only) each capability. */
async function run(o: ProbeOptions, pool: Pool): Promise<ProbeReport> {
  const headers: Record<string, string> = o.apiKey ? { authorization: `Bearer ${o.apiKey}` } : {};
  const target: ScoringTarget = {
    pool,
    url: o.url,
    headers,
    timeoutMs: o.timeoutMs,
    model: null,
    adminApiKey: o.adminApiKey ?? null,
  };
  const key: KeyName = o.apiKey
    ? { name: o.keyName ?? '--api-key', sent: true }
    : { name: o.keyName ?? 'pass --api-key', sent: false };
  const adminKey: KeyName = o.adminApiKey
    ? { name: o.adminKeyName ?? '--api-key', sent: true }
    : key.sent
      ? { name: `${key.name}; an admin key goes in ${o.adminKeyName ?? '--api-key'}`, sent: true }
      : { name: o.adminKeyName ? `set ${o.adminKeyName}` : key.name, sent: false };
  const get = (path: string): Promise<JsonAnswer> => requestJson(target, 'GET', path, undefined, o.timeoutMs);
  const post = (path: string, body: unknown): Promise<JsonAnswer> =>
    requestJson(target, 'POST', path, body, o.timeoutMs);

  const { model, engine, evidence, version, told } = await identify(o, target, get, key);
  if (told) o.onEngine?.(engine, evidence);
  const profile = PROFILES[engine];
  const report = { url: o.url, engine, evidence, version, model };
  if (o.reachabilityOnly) return { ...report, ...nothingAsked(), meaning: await toldMeaning(engine, get) };
  const caps = new Map<CapabilityName, Capability>();
  const c: ProbeContext = {
    target,
    engine,
    profile,
    model,
    get,
    post,
    set: (name, ok, detail, enable) =>
      void caps.set(name, {
        name,
        ok,
        detail,
        enable: enable === undefined ? (ENABLE[name]?.[engine] ?? null) : enable,
      }),
    postAdmin: (path, body) =>
      requestJson(
        target.adminApiKey
          ? { ...target, headers: { ...headers, authorization: `Bearer ${target.adminApiKey}` } }
          : target,
        'POST',
        path,
        body,
        o.timeoutMs,
      ),
    completion: (extra) => post('/v1/completions', { ...(model ? { model } : {}), ...GREEDY, ...extra }),
    why: (a) => keyRefusal(a, key) ?? failureReason({ status: a.status, body: a.body, error: null }),
    whyAdmin: (a) => keyRefusal(a, adminKey) ?? failureReason({ status: a.status, body: a.body, error: null }),
  };
  const steps = await probeAll(c, o);
  const capabilities = CAPABILITIES.map((n) => caps.get(n)!).filter(Boolean);
  const missing = o.required.filter((n) => caps.get(n)?.ok !== true);
  return { ...report, capabilities, required: o.required, missing, meaning: await meaningOf(engine, get, steps) };
}

/**
 * What the server says its logprobs are: vLLM names its `--logprobs-mode` only in
 * `GET /server_info?config_format=json` (`vllm_config.model_config.logprobs_mode`), which exists
 * with `VLLM_SERVER_DEV_MODE=1` alone; llama-server's are the pre-sampling distribution (its
 * `n_probs` without `post_sampling_probs`), vLLM's default. Null where nothing tells.
 */
async function toldMeaning(engine: EngineName, get: (path: string) => Promise<JsonAnswer>): Promise<LogprobMeaning> {
  if (engine === 'llamacpp')
    return { mode: 'raw_logprobs', detail: 'llama-server: pre-sampling probabilities (post_sampling_probs off)' };
  if (engine !== 'vllm') return { mode: null, detail: 'not told by the server' };
  const a = await get('/server_info?config_format=json').catch(errAnswer);
  const mode = (a.body as { vllm_config?: { model_config?: { logprobs_mode?: unknown } } } | null)?.vllm_config
    ?.model_config?.logprobs_mode;
  if (a.status === 200 && typeof mode === 'string')
    return { mode: mode.replace(/^LogprobsMode\./i, '').toLowerCase(), detail: '--logprobs-mode, from /server_info' };
  return {
    mode: null,
    detail: 'vLLM names its --logprobs-mode only in /server_info, with VLLM_SERVER_DEV_MODE=1',
  };
}

/** {@link toldMeaning}, else what a greedy answer's numbers show: values above 0, or a top list holding more than all the mass, are no logprobs. */
async function meaningOf(
  engine: EngineName,
  get: (path: string) => Promise<JsonAnswer>,
  steps: readonly TokenStep[],
): Promise<LogprobMeaning> {
  const told = await toldMeaning(engine, get);
  if (told.mode !== null) return told;
  const notLogprobs = steps.some(
    (s) =>
      (s.logprob !== null && s.logprob > 1e-6) ||
      s.top.reduce((sum, [, v]) => sum + (Number.isFinite(v) ? Math.exp(v) : 0), 0) > 1.01,
  );
  if (notLogprobs)
    return {
      mode: 'logits',
      detail: `the values are not logprobs (above 0, or a top list summing past 1)${engine === 'vllm' ? ': --logprobs-mode raw_logits or processed_logits' : ''}`,
    };
  return told;
}

/** The server's model, engine (configured or detected, with its evidence) and version; unreachable when /v1/models fails. */
async function identify(
  o: ProbeOptions,
  target: ScoringTarget,
  get: (path: string) => Promise<JsonAnswer>,
  key: KeyName,
): Promise<{ model: string | null; engine: EngineName; evidence: string; version: string | null; told: boolean }> {
  let models: JsonAnswer;
  try {
    models = await get('/v1/models');
  } catch (err) {
    throw new UnreachableError(failureReason({ status: 0, body: null, error: transportError(err) }));
  }
  if (refusesKey(models.status)) throw new KeyRejectedError(keyRefusal(models, key)!, key.sent);
  const listed = ((models.body as { data?: Array<{ id?: unknown }> } | null)?.data ?? [])
    .map((m) => m?.id)
    .find((id) => typeof id === 'string') as string | undefined;
  const model = o.model ?? listed ?? null;
  // told: the engine is known (configured or detected), not the fallback of a failed detection.
  const detected =
    o.engine && o.engine !== 'auto'
      ? { engine: o.engine, evidence: 'configured', told: true }
      : await detectEngine(target).then(
          (d) => ({ ...d, told: true }),
          (err: unknown) => {
            if (err instanceof KeyRefusedError)
              throw new KeyRejectedError(keyRefusal({ ...err.answer, error: null }, key)!, key.sent);
            return { engine: 'openai' as const, evidence: (err as Error).message, told: false };
          },
        );
  const engine = detected.engine;
  const version = await engineVersion(engine, get);
  return { model, engine, evidence: detected.evidence, version, told: detected.told };
}

/** Runs every capability check in order, each recording its result through `c.set`; the copy's steps. */
async function probeAll(c: ProbeContext, o: ProbeOptions): Promise<TokenStep[]> {
  const k = await probeTopK(c, o.topK);
  const steps = await probeCopy(c, k);
  await probeScoring(c, k, steps);
  const { countsOk, cacheBody } = await probeCacheCounts(c);
  const flushOk = o.flush ? await probeFlush(c, countsOk, cacheBody) : null;
  if (!o.flush) c.set('flush', null, 'not tried (mirror.repeat.flush is off: the probe does not empty the cache)');

  const pathOk = countsOk || flushOk === true;
  c.set(
    'cache_path',
    pathOk,
    countsOk
      ? 'visible: the engine reports its cache hits'
      : flushOk
        ? 'visible: the flush makes the first run cold'
        : 'not visible: no cache counts and no confirmed flush',
  );

  await probeChat(c);
  await probeDeterminism(c, k, o.copies ?? 16);
  return steps.steps;
}

/** What every check of a probe asks with: the server, its engine and profile, and where results go. */
interface ProbeContext {
  target: ScoringTarget;
  engine: EngineName;
  profile: (typeof PROFILES)[EngineName];
  model: string | null;
  get(path: string): Promise<JsonAnswer>;
  post(path: string, body: unknown): Promise<JsonAnswer>;
  /** A POST with the admin key where one is given (the cache flush). */
  postAdmin(path: string, body: unknown): Promise<JsonAnswer>;
  /** A capability's result (`enable`: how to turn it on; default the engine's flag for it). */
  set(name: CapabilityName, ok: boolean | null, detail: string, enable?: string | null): void;
  /** A greedy /v1/completions request with these fields. */
  completion(extra: Record<string, unknown>): Promise<JsonAnswer>;
  /** Why an answer failed; a 401/403 names the key it refused. */
  why(a: JsonAnswer): string;
  /** The same for the flush, naming the admin key. */
  whyAdmin(a: JsonAnswer): string;
}

/** top_k_cap: the logprobs cap asked with one above anything logprobe asks; the top-k the other checks then use. */
async function probeTopK(c: ProbeContext, topK: number): Promise<number> {
  // The logprobs cap, asked: one above anything logprobe asks (mirror.topLogprobs ≤ 20).
  const ask = 21;
  const above = await c
    .completion({ prompt: 'The cache holds key 3 and value', max_tokens: 1, logprobs: ask })
    .catch(errAnswer);
  let cap: number | null = null;
  let capText: string;
  if (above.status === 200) {
    const got = topWidth(parseResponse(above.body).steps);
    cap = got !== null && got < ask ? got : null;
    capText =
      got === null
        ? `asked ${ask}: answered no top logprobs`
        : got < ask
          ? `asked ${ask}: answered ${got} per token`
          : `none at ${ask} (answered ${got} per token)`;
  } else {
    cap = parseLogprobLimit(above.status, above.body);
    capText = cap !== null ? `${cap} (asked ${ask}: ${c.why(above)})` : `asked ${ask}: ${c.why(above)}`;
  }
  if (c.engine === 'vllm') {
    // prompt_logprobs have their own check against the same cap (sampling_params.py _validate_logprobs).
    const p = await c
      .completion({ prompt: 'The cache holds key 3 and value', max_tokens: 1, prompt_logprobs: ask })
      .catch(errAnswer);
    if (p.status !== 200) {
      const pc = parseLogprobLimit(p.status, p.body, { prompt: true });
      if (pc !== null) cap = Math.min(cap ?? pc, pc);
      capText += `; prompt_logprobs: ${pc !== null ? pc : c.why(p)}`;
    }
  }
  c.set('top_k_cap', cap === null ? above.status === 200 : cap >= topK, `${capText}; logprobe asks ${topK}`);
  return Math.min(topK, cap ?? topK);
}

/** logprobs and token_ids: a mirrored copy (with the profile's own fields); its steps. */
async function probeCopy(c: ProbeContext, k: number): Promise<{ steps: TokenStep[]; text: string | undefined }> {
  // Logprobs and token ids on a mirrored copy (with the profile's own extra fields).
  const copy = await c
    .completion({ prompt: 'The cache holds key 3 and value', max_tokens: 8, logprobs: k, ...c.profile.copyParams })
    .catch(errAnswer);
  const parsed = copy.status === 200 ? parseResponse(copy.body) : null;
  const steps = parsed?.steps ?? [];
  const withLp = steps.filter((s) => s.logprob !== null).length;
  c.set(
    'logprobs',
    steps.length > 0 && withLp === steps.length,
    parsed === null
      ? `/v1/completions: ${c.why(copy)}`
      : steps.length === 0
        ? `no logprobs in the answer (${parsed.error ?? parsed.format})`
        : `${withLp} of ${steps.length} tokens with a logprob, top-${topWidth(steps) ?? 0}`,
    null,
  );
  const ids = steps.filter((s) => s.id !== undefined).length;
  const asked = Object.keys(c.profile.copyParams).length
    ? ` (asked with ${Object.keys(c.profile.copyParams).join(', ')})`
    : '';
  c.set(
    'token_ids',
    steps.length > 0 && ids === steps.length,
    steps.length === 0
      ? 'no tokens to read'
      : `${ids} of ${steps.length} generated tokens with their id${asked}${ids < steps.length ? ': scoring re-tokenizes the text' : ''}`,
  );

  return { steps, text: parsed?.text };
}

/** scoring and prompt_top_k: the profile's own method on the prompt and the copy's tokens. */
async function probeScoring(
  c: ProbeContext,
  k: number,
  copy: { steps: TokenStep[]; text: string | undefined },
): Promise<void> {
  const { steps } = copy;
  // Scoring: the profile's own method on the prompt + the answer's tokens.
  let scored: { prompt: TokenStep[]; continuation: TokenStep[] } | null = null;
  try {
    const promptIds = await c.profile.promptIds(c.target, {
      kind: 'completions',
      body: { prompt: 'The cache holds key 3 and value', ...(c.model ? { model: c.model } : {}) },
    });
    const cont =
      steps.every((s) => s.id !== undefined) && steps.length > 0
        ? steps.map((s) => s.id!)
        : await c.profile.tokenize(c.target, copy.text ?? ' 7', c.model ?? undefined);
    scored = await c.profile.score(c.target, {
      model: c.model ?? undefined,
      prompt: promptIds,
      continuation: cont.slice(0, 4),
      topK: k,
      promptPositions: 4,
    });
    const forced = scored.continuation.filter((s) => s.logprob !== null).length;
    c.set(
      'scoring',
      forced === scored.continuation.length && forced > 0,
      `${c.profile.method}: ${forced} of ${scored.continuation.length} forced tokens scored; ${SCORING_READS_CACHE[c.engine]}`,
      null,
    );
  } catch (err) {
    c.set('scoring', false, `${c.profile.method}: ${(err as Error).message}`, null);
  }
  if (scored === null || scored.prompt.length === 0)
    c.set('prompt_top_k', false, scored === null ? 'no scoring' : 'no prompt positions scored');
  else {
    const widths = scored.prompt.map((s) => s.top.length);
    const min = Math.min(...widths);
    c.set(
      'prompt_top_k',
      min >= Math.min(k, 2),
      min <= 1
        ? `prompt positions carry the prompt token only (top ${min})`
        : `top-${min} at each of ${widths.length} prompt positions`,
    );
  }
}

/** cache_counts: a new prompt, then the same again (a prefix-cache hit on an engine that caches). */
async function probeCacheCounts(c: ProbeContext): Promise<{ countsOk: boolean; cacheBody: Record<string, unknown> }> {
  // Cache counts: a new prompt, then the same again (a prefix-cache hit on an c.engine that caches).
  const nonce = `probe-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  const cacheBody = { prompt: longPrompt(nonce), max_tokens: 1 };
  const cold = await c.completion(cacheBody).catch(errAnswer);
  const warm = await c.completion(cacheBody).catch(errAnswer);
  const c1 = cold.status === 200 ? cachedPromptTokens(cold.body) : null;
  const c2 = warm.status === 200 ? cachedPromptTokens(warm.body) : null;
  const countsOk = c2 !== null && c2 > 0;
  c.set(
    'cache_counts',
    countsOk,
    cold.status !== 200
      ? `/v1/completions: ${c.why(cold)}`
      : c1 === null && c2 === null
        ? 'not reported (no cached count in the answers)'
        : c2 === 0 || c2 === null
          ? `reported, but the repeat read ${c2 ?? 'nothing'} from the cache (prefix caching off?)`
          : `reported: cold ${c1 ?? 'no count (a 0 is dropped: a cold run reads as not reported)'}, warm ${c2}`,
  );

  return { countsOk, cacheBody };
}

/** flush: the engine's cache reset, confirmed by the counts where they are reported; whether it worked. */
async function probeFlush(
  c: ProbeContext,
  countsOk: boolean,
  cacheBody: Record<string, unknown>,
): Promise<boolean | null> {
  const f = await flushRequest(c);
  if (f === null) {
    c.set('flush', false, 'no cache reset on an OpenAI-compatible server', null);
    return null;
  }
  if (f.status < 200 || f.status >= 300) {
    const s = f.status;
    c.set(
      'flush',
      false,
      refusesKey(s)
        ? `${f.path} ${c.whyAdmin(f)}`
        : `${s === 400 ? 'refused (busy)' : 'not available'}: ${f.path} answered ${c.why(f)}`,
    );
    return null;
  }
  let detail = `${f.path} answered ${f.status}`;
  let flushOk = true;
  if (countsOk) {
    const after = await c.completion(cacheBody).catch(errAnswer);
    const c3 = after.status === 200 ? cachedPromptTokens(after.body) : null;
    if (c3 !== null && c3 > 0) {
      flushOk = false;
      detail += `, but the next run still read ${c3} tokens from the cache`;
    } else detail += '; confirmed: the next run read nothing from the cache';
  }
  c.set('flush', flushOk, detail, flushOk ? null : undefined);
  return flushOk;
}

/** chat_rendering: the prompt logprobe scores must be the prompt the chat generated from. */
async function probeChat(c: ProbeContext): Promise<void> {
  const messages = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Tell me about layer 3' },
  ];
  try {
    const rendered = await c.profile.promptIds(c.target, {
      kind: 'chat',
      body: { messages, ...(c.model ? { model: c.model } : {}) },
    });
    const chat = await c.post('/v1/chat/completions', {
      ...(c.model ? { model: c.model } : {}),
      messages,
      max_tokens: 1,
      ...GREEDY,
    });
    const used = (chat.body as { usage?: { prompt_tokens?: unknown } } | null)?.usage?.prompt_tokens;
    if (chat.status !== 200 || typeof used !== 'number')
      c.set('chat_rendering', true, `${rendered.length} tokens (the chat generation did not say how many it read)`);
    else
      c.set(
        'chat_rendering',
        used === rendered.length,
        `${rendered.length} tokens rendered, the chat generation read ${used}${used === rendered.length ? '' : ': not the same prompt'}`,
      );
  } catch (err) {
    c.set('chat_rendering', false, (err as Error).message);
  }
}

/** How two runs differ, in a few words: another token, the largest logprob move, or the top lists alone. */
function howDiffer(d: RunDiff): string {
  if (d.flipped) return 'another token';
  return d.shift > 0 ? `max ${nats(d.shift)} nats` : 'in the top alternatives only';
}

/** A small difference in nats as two significant digits (`2.6e-4`, `0.12`). */
function nats(x: number): string {
  return x > 0 && x < 0.01 ? x.toExponential(1) : x.toPrecision(2);
}

/**
 * determinism: one greedy request alone, again, then among concurrent copies of itself. Where the
 * engine lets a request skip its prefix cache (llama-server's `cache_prompt: false`), the runs
 * compared skip it, and one more pair of runs with the cache tells the cache's share apart from
 * batching. The burst is `copies`, on llama-server at most its slots (`total_slots`): a request
 * beyond them is never batched, it only holds one of the server's HTTP threads. What is suggested
 * is only what would change the figure.
 */
async function probeDeterminism(c: ProbeContext, k: number, copies: number): Promise<void> {
  const det: Record<string, unknown> = { prompt: 'Count the layers: one, two,', max_tokens: 16, logprobs: k };
  const llama = c.engine === 'llamacpp';
  const uncached = llama ? { ...det, cache_prompt: false } : det;
  const slots = llama ? await totalSlots(c.get) : null;
  const alone = await c.completion(uncached).catch(errAnswer);
  if (alone.status !== 200) {
    c.set('determinism', false, `/v1/completions: ${c.why(alone)}`);
    return;
  }
  const ref = parseResponse(alone.body).steps;
  const diff = (a: JsonAnswer): RunDiff =>
    a.status === 200 ? runDifference(ref, parseResponse(a.body).steps) : { equal: false, shift: 0, flipped: true };
  const again = diff(await c.completion(uncached).catch(errAnswer));
  // With the cache: one run fills it, the next reads its prefix.
  let cached: RunDiff | null = null;
  if (llama) {
    await c.completion(det).catch(errAnswer);
    cached = diff(await c.completion(det).catch(errAnswer));
  }
  const n = slots !== null ? Math.min(copies, slots) : copies;
  const batch =
    n > 1 ? await Promise.all(Array.from({ length: n }, () => c.completion(uncached).catch(errAnswer))) : [];
  const diffs = batch.map(diff);
  const { text, ok, enable } = determinismText(c.engine, { again, cached, diffs, n, copies, slots });
  const serverSays = c.engine === 'sglang' ? await deterministicFlag(c.get) : null;
  c.set(
    'determinism',
    ok,
    serverSays === null ? text : `${text}; server_info enable_deterministic_inference: ${serverSays}`,
    enable,
  );
}

/**
 * The determinism line from its runs: what was measured (lone runs with and without the cache,
 * the burst), whether `noiseFloor: exact` holds, and only a setting that would change the figure.
 */
function determinismText(
  engine: EngineName,
  m: { again: RunDiff; cached: RunDiff | null; diffs: RunDiff[]; n: number; copies: number; slots: number | null },
): { text: string; ok: boolean; enable: string | null } {
  const { again, cached, diffs, n, copies, slots } = m;
  const llama = engine === 'llamacpp';
  const differ = diffs.filter((d) => !d.equal).length;
  const flipped = diffs.filter((d) => d.flipped).length;
  const worst = Math.max(0, ...diffs.map((d) => d.shift));
  const parts: string[] = [];
  if (!llama)
    parts.push(
      again.equal
        ? 'two lone runs bitwise equal'
        : `two lone runs differ (${howDiffer(again)}; the repeat may read the prefix cache: this engine cannot skip it per request)`,
    );
  else if (!again.equal)
    parts.push(
      `two lone runs differ without the cache too (${howDiffer(again)}, cache_prompt: false)${cached && !cached.equal ? `; with it ${howDiffer(cached)}` : ''}`,
    );
  else if (cached && !cached.equal)
    parts.push(
      `two lone runs differ with the cache (${howDiffer(cached)}) and are bitwise equal without it (cache_prompt: false): the prefix cache, not batching`,
    );
  else parts.push('two lone runs bitwise equal, with the cache and without it');
  if (n > 1)
    parts.push(
      differ === 0
        ? `bitwise equal in each of ${n} concurrent copies${n < copies ? ` (total_slots ${slots})` : ''}`
        : `${differ} of ${n} concurrent copies differ from the lone run (max ${nats(worst)} nats${flipped ? `, ${flipped} with another token` : ''})`,
    );
  else if (slots === 1) parts.push('no concurrent copies: one slot (total_slots 1) batches no requests together');
  else parts.push('no concurrent copies (probe.concurrentCopies 1)');
  const ok = again.equal && differ === 0;
  if (ok)
    parts.push(
      cached && !cached.equal
        ? 'analysis.noiseFloor: exact is usable with the cache skipped (mirror.extraParams: {cache_prompt: false})'
        : 'analysis.noiseFloor: exact is usable',
    );
  let enable: string | null = null;
  if (!again.equal) {
    if (llama) enable = slots !== null && slots > 1 ? `-np 1 (this server has ${slots} slots)` : null;
    else if (engine === 'vllm') enable = '--no-enable-prefix-caching (if the repeat read the cache)';
    else if (engine === 'sglang') enable = '--disable-radix-cache (if the repeat read the cache)';
  } else if (differ > 0) {
    if (llama)
      enable = slots !== null && slots > 1 ? `-np 1 (this server has ${slots} slots: one batches nothing)` : null;
    else enable = ENABLE.determinism?.[engine] ?? null;
  }
  return { text: parts.join('; '), ok, enable };
}

/** undici's error as the mirror records it (`CODE: message`). */
function transportError(err: unknown): string {
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  const c = e.cause?.code ? e.cause : e;
  return `${c.code ?? 'ERROR'}: ${c.message ?? String(err)}`;
}

/** A failed request as an answer (status 0), so that one check failing does not end the probe. */
function errAnswer(err: unknown): JsonAnswer {
  return { status: 0, body: transportError(err), server: null };
}

/** The narrowest top list of the steps (null without steps). */
function topWidth(steps: readonly TokenStep[]): number | null {
  return steps.length === 0 ? null : Math.min(...steps.map((s) => s.top.length));
}

/**
 * How two generations of one greedy request differ: `equal` when they are bitwise the same
 * (tokens, ids, logprobs, top lists); `shift` the largest |Δ logprob| of the chosen token before
 * the first token that differs (0 when none moved); `flipped` when a token differs.
 */
export interface RunDiff {
  equal: boolean;
  shift: number;
  flipped: boolean;
}

/** The {@link RunDiff} of two generations. */
export function runDifference(a: readonly TokenStep[], b: readonly TokenStep[]): RunDiff {
  const key = (s: readonly TokenStep[]) => JSON.stringify(s.map((x) => [x.token, x.id ?? null, x.logprob, x.top]));
  let shift = 0;
  let flipped = a.length !== b.length;
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const x = a[i]!;
    const y = b[i]!;
    if (x.token !== y.token || x.id !== y.id) {
      flipped = true;
      break;
    }
    if (x.logprob !== null && y.logprob !== null) shift = Math.max(shift, Math.abs(x.logprob - y.logprob));
  }
  return { equal: key(a) === key(b), shift, flipped };
}

async function engineVersion(engine: EngineName, get: (p: string) => Promise<JsonAnswer>): Promise<string | null> {
  const read = async (path: string, key: string): Promise<string | null> => {
    try {
      const a = await get(path);
      const v =
        a.status === 200 && typeof a.body === 'object' && a.body !== null
          ? (a.body as Record<string, unknown>)[key]
          : undefined;
      return typeof v === 'string' ? v : null;
    } catch {
      return null;
    }
  };
  if (engine === 'vllm') return read('/version', 'version');
  if (engine === 'sglang') return (await read('/get_server_info', 'version')) ?? read('/server_info', 'version');
  if (engine === 'llamacpp') return read('/props', 'build_info');
  return null;
}

async function deterministicFlag(get: (p: string) => Promise<JsonAnswer>): Promise<boolean | null> {
  for (const path of ['/get_server_info', '/server_info']) {
    try {
      const a = await get(path);
      const v = (a.body as { enable_deterministic_inference?: unknown } | null)?.enable_deterministic_inference;
      if (a.status === 200 && typeof v === 'boolean') return v;
    } catch {
      // the next path
    }
  }
  return null;
}

/**
 * The engine's cache reset as the profile's flush sends it, with the answer kept (null: the engine
 * has none). llama-server: every slot erased (`/props` `total_slots`), the first refusal kept.
 */
async function flushRequest(c: ProbeContext): Promise<(JsonAnswer & { path: string }) | null> {
  if (c.engine === 'llamacpp') {
    const n = (await totalSlots(c.get)) ?? 1;
    let last: JsonAnswer = { status: 0, body: null, server: null };
    for (let i = 0; i < n; i++) {
      last = await c.postAdmin(`/slots/${i}?action=erase`, {}).catch(errAnswer);
      if (last.status < 200 || last.status >= 300) return { ...last, path: `/slots/${i}?action=erase` };
    }
    return { ...last, path: n === 1 ? '/slots/0?action=erase' : `/slots/{0..${n - 1}}?action=erase (every slot)` };
  }
  const path = c.engine === 'vllm' ? '/reset_prefix_cache' : c.engine === 'sglang' ? '/flush_cache' : null;
  if (path === null) return null;
  const a = await c.postAdmin(path, {}).catch(errAnswer);
  return { ...a, path };
}

/** llama-server's slot count (`/props` `total_slots`, its `-np`), or null where it does not say. */
async function totalSlots(get: (p: string) => Promise<JsonAnswer>): Promise<number | null> {
  try {
    const a = await get('/props');
    const n = (a.body as { total_slots?: unknown } | null)?.total_slots;
    return a.status === 200 && typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : null;
  } catch {
    return null;
  }
}

import type { FlipClass } from '../core/index.js';
import { KNOWN_ROUTES } from './labels.js';

/**
 * Every metric logprobe exports: docs/format.md's metrics table, a contract that dashboards and
 * alert rules rely on. The registry creates its metrics from this list, and the fleet tests check
 * every series that the rules and the dashboard query against it.
 */

/** Bucket bounds for nats: 1e-4 … 10, dense around the noise floors (1e-3 … 1e-1). */
export const NATS_BUCKETS = [0.0001, 0.0003, 0.001, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5, 10] as const;
/** Bucket bounds for LLM calls: a 5 ms cache hit to a 2-minute generation. */
export const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120] as const;
/** Bucket bounds for token positions. */
export const POSITION_BUCKETS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024] as const;

export type MetricType = 'counter' | 'gauge' | 'histogram';

/** A thread of the process: the proxy's (`main`) or the mirror's worker (`worker`). */
export type MetricThread = 'main' | 'worker';

/**
 * Which thread owns a metric, i.e. counts or sets it, and is the only one that registers it.
 * `both`: a counter or gauge that each thread moves for its own part, registered on both and
 * summed by `/metrics` (the only families the merge adds up; src/worker/handle.ts).
 */
export type MetricOwner = MetricThread | 'both';

export interface MetricSpec {
  readonly name: string;
  readonly type: MetricType;
  readonly help: string;
  readonly labelNames: readonly string[];
  readonly owner: MetricOwner;
  readonly buckets?: readonly number[];
}

export const METRIC_CATALOG = [
  {
    name: 'logprobe_proxy_requests_total',
    type: 'counter',
    help: 'Client requests proxied to the candidate, by route and status class.',
    labelNames: ['route', 'status_class'],
    owner: 'main',
  },
  {
    name: 'logprobe_shadow_requests_total',
    type: 'counter',
    help: 'Mirrored copies received in shadow mode (mode: shadow), by route and the status class they were answered with (2xx: the 202; never forwarded, so not in logprobe_proxy_requests_total).',
    labelNames: ['route', 'status_class'],
    owner: 'main',
  },
  {
    name: 'logprobe_proxy_request_duration_seconds',
    type: 'histogram',
    help: 'Client request duration through the proxy, seconds.',
    labelNames: ['route'],
    owner: 'main',
    buckets: LATENCY_BUCKETS,
  },
  // Both: the proxy's thread counts what it never hands over (skipped: not a mirrored kind;
  // dropped: the hand-over is full, the worker is gone or closing), the worker everything it takes.
  {
    name: 'logprobe_mirror_total',
    type: 'counter',
    help: 'Mirrored requests by outcome (ok, dropped, skipped, candidate_error, baseline_error, unparseable, incomparable).',
    labelNames: ['route', 'outcome'],
    owner: 'both',
  },
  {
    name: 'logprobe_upstream_duration_seconds',
    type: 'histogram',
    help: 'Mirrored request duration by backend, seconds.',
    labelNames: ['backend', 'route'],
    owner: 'worker',
    buckets: LATENCY_BUCKETS,
  },
  {
    name: 'logprobe_token_crosspath_diff_nats',
    type: 'histogram',
    help: '|candidate - baseline| logprob of the same chosen token, per aligned position before the first divergence, nats.',
    labelNames: ['route'],
    owner: 'worker',
    buckets: NATS_BUCKETS,
  },
  {
    name: 'logprobe_token_shift_nats',
    type: 'histogram',
    help: 'Largest |candidate - baseline| logprob over tokens in both top-k lists, per comparable position, nats.',
    labelNames: ['route', 'model'],
    owner: 'worker',
    buckets: NATS_BUCKETS,
  },
  {
    name: 'logprobe_token_gap_nats',
    type: 'histogram',
    help: 'Baseline top-1 minus top-2 logprob, per comparable position, nats.',
    labelNames: ['route'],
    owner: 'worker',
    buckets: NATS_BUCKETS,
  },
  {
    name: 'logprobe_flip_gap_nats',
    type: 'histogram',
    help: 'Force needed to flip the baseline token at the first divergence, nats.',
    labelNames: ['route', 'class'],
    owner: 'worker',
    buckets: NATS_BUCKETS,
  },
  {
    name: 'logprobe_token_kl_nats',
    type: 'histogram',
    help: 'Per-position KL(baseline || candidate) estimate over the union of both top-k lists plus a tail bucket, nats.',
    labelNames: ['route'],
    owner: 'worker',
    buckets: NATS_BUCKETS,
  },
  {
    name: 'logprobe_first_divergence_tokens',
    type: 'histogram',
    help: 'Position of the first divergence, for pairs that diverge.',
    labelNames: ['route'],
    owner: 'worker',
    buckets: POSITION_BUCKETS,
  },
  {
    name: 'logprobe_verdicts_total',
    type: 'counter',
    help: 'Comparison verdicts by model slice: of mirrored pairs (kind="pair", with cache: whether the candidate\'s copy read from its prefix cache: hit, miss, unknown), of repeat pairs of one backend, cold then warm (kind="self", with backend), and of one backend\'s decode path against its prefill of the same tokens (kind="path", with backend).',
    labelNames: ['route', 'verdict', 'kind', 'backend', 'model', 'cache'],
    owner: 'worker',
  },
  {
    name: 'logprobe_window_global_shift_ratio',
    type: 'gauge',
    help: 'Pooled share of shifted comparable positions over the last alert.window comparable mirrored requests.',
    labelNames: ['model'],
    owner: 'worker',
  },
  {
    name: 'logprobe_cusum_statistic',
    type: 'gauge',
    help: 'One-sided CUSUM of per-request maxShift / noiseFloor.',
    labelNames: ['model'],
    owner: 'worker',
  },
  {
    name: 'logprobe_alert_test_pvalue',
    type: 'gauge',
    help: "Permutation test's p-value: candidate vs baseline logprobs of the same greedy tokens over the alert window (1 with no evidence).",
    labelNames: ['model'],
    owner: 'worker',
  },
  {
    name: 'logprobe_alert_firing',
    type: 'gauge',
    help: 'In-process alert state per model slice: 1 firing, 0 not (LogprobSelfInconsistency and LogprobPathInconsistency per backend).',
    labelNames: ['alert', 'backend', 'model'],
    owner: 'worker',
  },
  {
    name: 'logprobe_canary_probes_total',
    type: 'counter',
    help: "Canary probes (logprobe's own requests, config canary) by outcome: ok (both sides answered and were compared), failed (a side failed or nothing could be compared), budget (not sent: canary.tokensPerHour would be passed), saturated (not sent: the client path had more than canary.maxCandidateInFlight requests in flight to the candidate).",
    labelNames: ['outcome'],
    owner: 'worker',
  },
  {
    name: 'logprobe_canary_tokens_total',
    type: 'counter',
    help: "Tokens the canary probes spent, both sides' prompt and generated tokens (usage.total_tokens, else an estimate); canary.tokensPerHour bounds it over any hour.",
    labelNames: [],
    owner: 'worker',
  },
  {
    name: 'logprobe_mirror_skipped_total',
    type: 'counter',
    help: "Sampled requests the mirror did not copy, by reason: stored_state (a Responses request reading server-side state the baseline cannot have: previous_response_id, conversation), meaning_differs (the two sides' logprobs mean different things), not_json (the body is not a JSON object), unserialisable (nested too deep to copy).",
    labelNames: ['reason'],
    owner: 'worker',
  },
  {
    name: 'logprobe_slice_overflow_total',
    type: 'counter',
    help: 'Mirrored requests whose model was folded into the `other` slice (outside slices.models, or past the first slices.maxModels names seen).',
    labelNames: [],
    owner: 'worker',
  },
  {
    name: 'logprobe_path_shift_nats',
    type: 'histogram',
    help: "Path check: per generated position, the largest |decode - prefill| logprob of one backend's own tokens over tokens in both top-k lists, nats.",
    labelNames: ['backend'],
    owner: 'worker',
    buckets: NATS_BUCKETS,
  },
  {
    name: 'logprobe_path_checks_total',
    type: 'counter',
    help: "Path checks by backend and outcome (ok, unsupported, skipped, failed): the prefill scoring of a backend's own generated tokens.",
    labelNames: ['backend', 'outcome'],
    owner: 'worker',
  },
  {
    name: 'logprobe_noise_floor_nats',
    type: 'gauge',
    help: 'Noise floor in force for a model slice, nats (per slice under noiseFloor: auto).',
    labelNames: ['model'],
    owner: 'worker',
  },
  {
    name: 'logprobe_noise_floor_observed_nats',
    type: 'gauge',
    help: 'Calibration: p99 of per-position shift between repeats of the same request, nats (NaN until calibration has measured it).',
    labelNames: ['backend', 'model'],
    owner: 'worker',
  },
  {
    name: 'logprobe_mirror_queue_depth',
    type: 'gauge',
    help: 'Mirrored requests waiting to be dispatched.',
    labelNames: [],
    owner: 'worker',
  },
  {
    name: 'logprobe_proxy_overflow_total',
    type: 'counter',
    help: 'Client requests refused with 503 at once because a configured candidate limit was reached (candidate.maxConnections, candidate.maxPending).',
    labelNames: ['reason'],
    owner: 'main',
  },
  {
    name: 'logprobe_admin_misdirected_total',
    type: 'counter',
    help: 'Admin-port requests answered 421 because their Host is not localhost, an IP address, the bind address or in admin.allowedHosts.',
    labelNames: [],
    owner: 'main',
  },
  {
    name: 'logprobe_proxy_refused_total',
    type: 'counter',
    help: "Client requests the proxy answered itself and never forwarded, by the client limit or HTTP rule that refused them (body_timeout: limits.bodyTimeoutMs; body_too_large: limits.bodyMB; head_timeout: limits.headTimeoutMs; header_too_large: limits.maxHeaderKB; transfer_encoding, duplicate_host, connect, malformed: HTTP's framing).",
    labelNames: ['reason'],
    owner: 'main',
  },
  // Both: the proxy's thread has the client path's candidate pool, the worker the mirror's
  // candidate and baseline pools; a backend's figure is the sum.
  {
    name: 'logprobe_upstream_connections',
    type: 'gauge',
    help: 'Open connections to each upstream (the client path and the mirror together).',
    labelNames: ['backend'],
    owner: 'both',
  },
  {
    name: 'logprobe_capture_errors_total',
    type: 'counter',
    help: 'Capture write failures, by reason.',
    labelNames: ['reason'],
    owner: 'worker',
  },
  {
    name: 'logprobe_capture_records_dropped_total',
    type: 'counter',
    help: 'Capture records lost, by reason (ENOSPC, EACCES, EROFS, write, overflow): every mirrored pair that is in no capture file.',
    labelNames: ['reason'],
    owner: 'worker',
  },
  {
    name: 'logprobe_capture_ok',
    type: 'gauge',
    help: 'Captures enabled and working: 0 from a record lost until a write succeeds again, then 1.',
    labelNames: [],
    owner: 'worker',
  },
  {
    name: 'logprobe_scoring_total',
    type: 'counter',
    help: 'Teacher-forced scoring of mirrored pairs by outcome (ok, unsupported, skipped, failed); pairs that needed none are not counted.',
    labelNames: ['route', 'outcome'],
    owner: 'worker',
  },
  {
    name: 'logprobe_prompt_shift_nats',
    type: 'histogram',
    help: "Shift of the prompt's own positions (prompt-token logprobs on both backends), per position, nats.",
    labelNames: ['route'],
    owner: 'worker',
    buckets: NATS_BUCKETS,
  },
  {
    name: 'logprobe_self_shift_nats',
    type: 'histogram',
    help: "Shift between a backend's repeat runs of the same request (cold then warm), per comparable position, nats.",
    labelNames: ['backend'],
    owner: 'worker',
    buckets: NATS_BUCKETS,
  },
  {
    name: 'logprobe_self_probes_total',
    type: 'counter',
    help: 'Repeat pairs by what they probed, as the engine told (probe: cold_warm, not_cold, not_warm, unprobed); only cold_warm feeds LogprobSelfInconsistency.',
    labelNames: ['backend', 'probe'],
    owner: 'worker',
  },
  {
    name: 'logprobe_engine_profile',
    type: 'gauge',
    help: 'The engine profile in force for each backend (1 for the profile, 0 for the others): configured, or detected once under engine: auto.',
    labelNames: ['backend', 'profile'],
    owner: 'worker',
  },
  {
    name: 'logprobe_engine_capability',
    type: 'gauge',
    help: "What each backend's engine offers logprobe, as serve's start-up probe found it (logprobe probe): 1 works, 0 does not; no series for a capability not asked (capability: logprobs, top_k_cap, token_ids, scoring, prompt_top_k, cache_counts, flush, cache_path, chat_rendering, determinism). The repeat probes also set cache_path to 0 when a backend's repeat pairs cannot tell a cold run from a warm one (no counts, no confirmed flush).",
    labelNames: ['backend', 'capability'],
    owner: 'worker',
  },
  {
    name: 'logprobe_logprobs_capped_total',
    type: 'counter',
    help: "Requests a backend refused for asking more logprobs than its cap (vLLM's --max-logprobs), resent within the cap it stated, by field (top_logprobs, logprobs: mirrored copies; prompt_logprobs, top_logprobs_num, n_probs: scoring).",
    labelNames: ['backend', 'field'],
    owner: 'worker',
  },
  {
    name: 'logprobe_mirror_worker_up',
    type: 'gauge',
    help: "1 when the mirror's worker thread answered the last scrape in time; 0 when it is gone or did not answer, and its series show their last known values.",
    labelNames: [],
    owner: 'main',
  },
] as const satisfies readonly MetricSpec[];

type CatalogEntry = (typeof METRIC_CATALOG)[number];
export type MetricName = CatalogEntry['name'];
/** The catalogue's metrics of one type: `Metrics.counter` takes only a counter's name, and so on. */
export type MetricNameOf<T extends MetricType> = Extract<CatalogEntry, { type: T }>['name'];
/**
 * The label names of a metric, as the catalogue lists them: a typo in a label fails `tsc`. A
 * metric without labels gets one name no caller writes (prom-client's label type for none is
 * `{}`, which takes any object), so a label given to it fails too.
 */
export type LabelOf<N extends MetricName> = [Extract<CatalogEntry, { name: N }>['labelNames'][number]] extends [never]
  ? '(no labels)'
  : Extract<CatalogEntry, { name: N }>['labelNames'][number];

/** The catalogue's metrics a thread registers: its own and those owned by both. */
export function metricsOf(thread: MetricThread): MetricSpec[] {
  return METRIC_CATALOG.filter((m) => m.owner === thread || m.owner === 'both');
}

/**
 * The label values each enum-like label may take (bounded by construction). Each thread creates
 * the series of its metrics for every known value at 0 when it starts (src/metrics/registry.ts),
 * so that every series a dashboard panel or a rule reads exists on a fresh proxy.
 */
export const MIRROR_OUTCOMES = [
  'ok',
  'dropped',
  'skipped',
  'candidate_error',
  'baseline_error',
  'unparseable',
  'incomparable',
] as const;
/** The outcomes the proxy's thread counts itself (src/worker/handle.ts): what it never hands over. */
export const MAIN_MIRROR_OUTCOMES = ['skipped', 'dropped'] as const satisfies ReadonlyArray<
  (typeof MIRROR_OUTCOMES)[number]
>;
export const ALERT_NAMES = [
  'LogprobGlobalShift',
  'LogprobSustainedShift',
  'LogprobSelfInconsistency',
  'LogprobPathInconsistency',
  'LogprobPromptMismatch',
  'LogprobCanaryShift',
] as const;
/** The alerts of one backend (labelled with it). */
export const BACKEND_ALERTS = ['LogprobSelfInconsistency', 'LogprobPathInconsistency'] as const;
export const BACKENDS = ['candidate', 'baseline'] as const;
/** Outcomes of `logprobe_scoring_total`. */
export const SCORING_OUTCOMES = ['ok', 'unsupported', 'skipped', 'failed'] as const;
/** `logprobe_canary_probes_total{outcome}`. */
export const CANARY_OUTCOMES = ['ok', 'failed', 'budget', 'saturated'] as const;
export type CanaryOutcome = (typeof CANARY_OUTCOMES)[number];
/** `logprobe_mirror_skipped_total{reason}`: why the mirror's worker did not copy a sampled request. */
export const MIRROR_SKIP_REASONS = ['stored_state', 'meaning_differs', 'not_json', 'unserialisable'] as const;
export type MirrorSkipReason = (typeof MIRROR_SKIP_REASONS)[number];
/** `logprobe_flip_gap_nats{class}`: core's FlipClass (the report's FLIP_CLASSES has the same list). */
export const FLIP_CLASSES = ['ambiguous', 'gray', 'systematic'] as const satisfies readonly FlipClass[];
/** `logprobe_proxy_requests_total{status_class}`: the status' hundreds, `aborted` for a client gone (499). */
export const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx', 'aborted'] as const;
/** `logprobe_proxy_refused_total{reason}`: the client-side limits and HTTP rules the proxy answers itself (src/proxy/app.ts). */
export const REFUSAL_REASONS = [
  'body_timeout',
  'body_too_large',
  'head_timeout',
  'header_too_large',
  'transfer_encoding',
  'duplicate_host',
  'connect',
  'malformed',
] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];
/** Every value of a client request's `route` label (src/proxy/routes.ts). */
export const ROUTE_LABELS = [...KNOWN_ROUTES, 'other'] as const;

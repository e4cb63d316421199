import type { Comparison, Thresholds } from '../core/index.js';
import type { BackendResult } from '../backend/dispatch.js';
import type { CanaryTag, MirroredPair, MirrorOutcome } from '../pair/types.js';
import type { RepeatPair } from '../pair/repeat.js';
import type { ProbeShape, RepeatCache, RepeatSides, SelfVerdict } from '../core/self.js';
import { HARMLESS_HEADERS, hashEchoedPrompts, hashPrompts, Redaction } from '../log/redact.js';
import type { Backend } from '../core/types.js';
import type { PathPair } from '../core/path.js';
import type { Slice } from '../core/slice.js';

/**
 * The capture format's version. 2 added the teacher-forced `scored` and `prompt` blocks and the
 * `locus` to `analysis` (docs/format.md); 3 the pair's `slice` (model, cache) and its `paths`
 * (decode vs prefill on one backend). `analyze` and `replay` read 1 to 3 and refuse others.
 */
export const CAPTURE_VERSION = 3;
/** The versions `analyze` and `replay` read. */
export const READABLE_CAPTURE_VERSIONS: readonly number[] = [1, 2, 3];

/** What one backend answered, as captured: the raw body (so `analyze` can re-run the comparison) and engine metadata. */
export interface CaptureSide {
  status: number;
  latencyMs: number;
  /** The body as received: parsed JSON, or the text when it was not JSON, or null without a response. */
  body: unknown;
  /** A transport failure (refused, timeout, reset); absent when a response arrived. */
  error?: string;
  /** `model` of the response body, when it names one. */
  model?: string;
  /** `system_fingerprint` of the response body, when present. */
  system_fingerprint?: string;
  /** Response headers that identify the server (`server`, `x-*-version`, …). */
  serverHeaders?: Record<string, string>;
}

/** The online comparison without its `positions[]` (they are recomputed from the bodies), plus the thresholds it used. */
export type CapturedAnalysis = Omit<Comparison, 'positions'> & {
  /** The noise floor in force for this pair (the calibrated one under `noiseFloor: auto`). */
  noiseFloor: number;
  /** Every threshold the online comparison used, so `analyze` reproduces it exactly. */
  thresholds: Thresholds;
};

/** One mirrored pair, one JSONL line (docs/format.md, "The capture record"). */
export interface CaptureRecord {
  v: 1 | 2 | 3;
  id: string;
  ts: string;
  route: string;
  /** The request path when it differs from `route` (a configured route outside the known ones). */
  path?: string;
  /** How the mirror classified the pair (`logprobe_mirror_total`'s outcome). */
  outcome: MirrorOutcome;
  /** The mirrored body as sent to both backends (prompts hashed when `promptsHashed`). */
  request: Record<string, unknown>;
  /** True when `capture.includePrompts: false` replaced prompts by their SHA-256: such a record cannot be replayed. */
  promptsHashed?: true;
  /** The client's harmless headers ({@link HARMLESS_HEADERS}); never credentials. */
  clientHeaders?: Record<string, string>;
  candidate: CaptureSide;
  /** The baseline's answer; null in baseline-free mode. */
  baseline: CaptureSide | null;
  /** The online comparison, or null when the pair was not compared (an error or an unparseable body, or no baseline). */
  analysis: CapturedAnalysis | null;
  /** Repeat probes of the cache path: the same copy again to a backend, its second run and how it compared with the first. */
  repeats?: CapturedRepeat[];
  /** The pair's model slice and cache split (v3; older records lack it: `analyze` takes the request's model, cache unknown). */
  slice?: Slice;
  /** Path checks (v3): each checked backend's decode-time logprobs against its own prefill of the same tokens. */
  paths?: PathPair[];
  /** The copy went to another route than the client's (v3): a Responses request sent as chat completions, its route returning no logprobs. */
  translated?: { from: string; to: string };
  /** A canary probe's pair (v3): logprobe's own request, no client behind it (`analyze` keeps it out of the mirrored pairs' detectors). */
  canary?: CanaryTag;
}

/** One repeat probe as captured: the first run is the record's own side of that backend. */
export interface CapturedRepeat {
  backend: Backend;
  /** The engine's cache was emptied before the first run. */
  flushed: boolean;
  flushError?: string;
  second: CaptureSide;
  /** Prompt tokens each run took from the cache, as the engine reported them (null: not reported). */
  cached?: RepeatCache;
  /** What the pair probed, judged online (the counts as known, the flush confirmed or not); optional: captures written before the field existed lack it. */
  probe?: ProbeShape;
  /** How each side was obtained (generation, or a scoring method) and whether that read the cache; optional: captures written before the field existed lack it. */
  sides?: RepeatSides;
  /** The two runs compared (second vs first), without positions; null when a run failed. */
  analysis: Omit<Comparison, 'positions'> | null;
  verdict: SelfVerdict | null;
  /** Every threshold the runs were compared with, the noise floor in force included (what the self detector divided by); optional: captures written before the field existed lack it. */
  thresholds?: Thresholds;
}

/** How records are built: what to hash, what to scrub, which thresholds were in force. */
export interface RecordOptions {
  includePrompts: boolean;
  /** `analysis.*` in force (the pair's own noise floor replaces `noiseFloor`). */
  thresholds: Omit<Thresholds, 'noiseFloor'>;
  /** Configured secrets to scrub wherever they appear (`baseline.apiKey`). */
  secrets?: ReadonlyArray<string | null | undefined>;
  /** Extra field names to redact (`log.redact`). */
  redactFields?: readonly string[];
}

function side(r: BackendResult, includePrompts: boolean): CaptureSide {
  const out: CaptureSide = {
    status: r.status,
    latencyMs: Math.round(r.latencyMs * 10) / 10,
    body: includePrompts ? r.body : hashEchoedPrompts(r.body),
  };
  if (r.error !== null) out.error = r.error;
  if (r.body !== null && typeof r.body === 'object' && !Array.isArray(r.body)) {
    const b = r.body as Record<string, unknown>;
    if (typeof b.model === 'string') out.model = b.model;
    if (typeof b.system_fingerprint === 'string') out.system_fingerprint = b.system_fingerprint;
  }
  if (Object.keys(r.serverHeaders).length > 0) out.serverHeaders = { ...r.serverHeaders };
  return out;
}

function withoutPositions(c: Comparison): Omit<Comparison, 'positions'> {
  const { positions: _positions, ...rest } = c;
  return rest;
}

const rules = new WeakMap<RecordOptions, Redaction>();

/** The redaction rule of these options (built once per options object). */
export function redactionFor(options: RecordOptions): Redaction {
  let r = rules.get(options);
  if (r === undefined)
    rules.set(options, (r = new Redaction({ fields: options.redactFields, keys: options.secrets ?? [] })));
  return r;
}

/** The secret values a pair's record is scrubbed of: its request's credential headers and the configured keys. */
export function recordSecrets(pair: Pick<MirroredPair, 'clientHeaders'>, options: RecordOptions): string[] {
  return redactionFor(options).secrets(pair.clientHeaders);
}

/**
 * The capture record of a mirrored pair. Client headers are dropped except a harmless
 * allow-list; every field named like a credential (or in `log.redact`) and every occurrence of a
 * secret the request carried (or `baseline.apiKey`) is replaced by `[redacted]`, in the request,
 * both answers and the repeat probes (src/log/redact.ts); prompts are hashed unless
 * `includePrompts`.
 */
export function buildRecord(pair: MirroredPair, options: RecordOptions): CaptureRecord {
  return assemble(pair, options, redactionFor(options), recordSecrets(pair, options));
}

/**
 * The record as one JSON line (no newline), the same as `JSON.stringify(buildRecord(…))` but
 * cheaper: the record is serialised unredacted, searched once for secret values and credential
 * field names, and scrubbed only when one turns up. JSON escapes character by character, so a
 * string holds a secret exactly when the line holds the secret's escaped form.
 */
export function recordLine(pair: MirroredPair, options: RecordOptions): string {
  const rule = redactionFor(options);
  const secrets = rule.secrets(pair.clientHeaders);
  const line = JSON.stringify(assemble(pair, options, null, []));
  if (!rule.touches(line, secrets)) return line;
  return JSON.stringify(assemble(pair, options, rule, secrets));
}

/** The record, redacted by `rule` (null: not redacted, for {@link recordLine}'s first look). */
function assemble(
  pair: MirroredPair,
  options: RecordOptions,
  rule: Redaction | null,
  secrets: readonly string[],
): CaptureRecord {
  const clean = <T>(v: T, byName = true): T => (rule === null ? v : (rule.scrub(v, secrets, { byName }) as T));
  const clientHeaders: Record<string, string> = {};
  for (const name of HARMLESS_HEADERS) {
    const v = pair.clientHeaders[name];
    if (v !== undefined && !rule?.isSecretName(name)) clientHeaders[name] = clean(Array.isArray(v) ? v.join(', ') : v);
  }
  const request = clean(options.includePrompts ? pair.request : hashPrompts(pair.request));
  const analysis: CapturedAnalysis | null =
    pair.analysis === null
      ? null
      : {
          ...withoutPositions(pair.analysis),
          noiseFloor: pair.noiseFloor,
          thresholds: { ...options.thresholds, noiseFloor: pair.noiseFloor },
        };
  const sideOf = (r: BackendResult): CaptureSide => {
    const s = side(r, options.includePrompts);
    if (rule === null) return s;
    // The body by name and value: an upstream's error page may quote the request's headers.
    const out: CaptureSide = { ...s, body: clean(s.body) };
    if (s.serverHeaders !== undefined) out.serverHeaders = rule.headers(s.serverHeaders, secrets);
    for (const k of ['error', 'model', 'system_fingerprint'] as const) if (s[k] !== undefined) out[k] = clean(s[k]);
    return out;
  };
  return {
    v: CAPTURE_VERSION,
    id: clean(pair.id),
    ts: pair.ts,
    route: pair.route,
    ...(pair.path !== pair.route ? { path: pair.path } : {}),
    outcome: pair.outcome,
    request,
    ...(options.includePrompts ? {} : { promptsHashed: true as const }),
    ...(Object.keys(clientHeaders).length > 0 ? { clientHeaders } : {}),
    candidate: sideOf(pair.candidate),
    baseline: pair.baseline === null ? null : sideOf(pair.baseline),
    // Numbers and tokens only: by value (a token spelled like a credential field stays).
    analysis: clean(analysis, false),
    ...(pair.repeats && pair.repeats.length > 0
      ? {
          repeats: pair.repeats.map((r) =>
            capturedRepeat(r, sideOf, clean, { ...options.thresholds, noiseFloor: pair.noiseFloor }),
          ),
        }
      : {}),
    ...(pair.slice ? { slice: pair.slice } : {}),
    ...(pair.translated ? { translated: pair.translated } : {}),
    // Numbers, token ids and reasons: the reason may quote an upstream's error page.
    ...(pair.paths && pair.paths.length > 0 ? { paths: clean(pair.paths, false) } : {}),
    ...(pair.canary ? { canary: pair.canary } : {}),
  };
}

/** One repeat probe as captured, through the record's own side and scrub rules. */
function capturedRepeat(
  r: RepeatPair,
  sideOf: (r: BackendResult) => CaptureSide,
  clean: <T>(v: T, byName?: boolean) => T,
  thresholds: Thresholds,
): CapturedRepeat {
  return {
    backend: r.backend,
    flushed: r.flushed,
    ...(r.flushError ? { flushError: clean(r.flushError) } : {}),
    second: sideOf(r.second),
    cached: r.cached,
    probe: r.probe,
    sides: r.sides,
    analysis: r.analysis === null ? null : clean(withoutPositions(r.analysis), false),
    verdict: r.verdict,
    thresholds,
  };
}

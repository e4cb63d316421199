import type { Comparison, Thresholds } from '../core/index.js';
import type { BackendResult } from '../mirror/dispatch.js';
import type { MirroredPair, MirrorOutcome } from '../mirror/types.js';
import type { ProbeShape, RepeatCache, RepeatSides, SelfVerdict } from '../core/self.js';
import { HARMLESS_HEADERS, hashEchoedPrompts, hashPrompts, scrub, secretValues } from './redact.js';

/**
 * The capture format's version. 2 added the teacher-forced `scored` and `prompt` blocks and the
 * `locus` to `analysis` (docs/format.md); `analyze` and `replay` read 1 and 2 and refuse others.
 */
export const CAPTURE_VERSION = 2;
/** The versions `analyze` and `replay` read. */
export const READABLE_CAPTURE_VERSIONS: readonly number[] = [1, 2];

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
  v: 1 | 2;
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
}

/** One repeat probe as captured: the first run is the record's own side of that backend. */
export interface CapturedRepeat {
  backend: 'candidate' | 'baseline';
  /** The engine's cache was emptied before the first run. */
  flushed: boolean;
  flushError?: string;
  second: CaptureSide;
  /** Prompt tokens each run took from the cache, as the engine reported them (null: not reported). */
  cached?: RepeatCache;
  /** What the pair probed, judged online (the counts as known, the flush confirmed or not); absent in records before it. */
  probe?: ProbeShape;
  /** How each side was obtained (generation, or a scoring method) and whether that read the cache; absent in records before it. */
  sides?: RepeatSides;
  /** The two runs compared (second vs first), without positions; null when a run failed. */
  analysis: Omit<Comparison, 'positions'> | null;
  verdict: SelfVerdict | null;
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
  const out: CaptureSide = { status: r.status, latencyMs: Math.round(r.latencyMs * 10) / 10, body: includePrompts ? r.body : hashEchoedPrompts(r.body) };
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

/**
 * The capture record of a mirrored pair. Client headers are dropped except a harmless
 * allow-list; every field named like a credential and every occurrence of a secret the client
 * sent (or `baseline.apiKey`) is replaced by `[redacted]`; prompts are hashed unless
 * `includePrompts`.
 */
export function buildRecord(pair: MirroredPair, options: RecordOptions): CaptureRecord {
  return assemble(pair, options, secretValues(pair.clientHeaders, options.secrets ?? []));
}

/**
 * The record as one JSON line (no newline), the same as `JSON.stringify(buildRecord(…))` but
 * cheaper: secret values are searched for once in the serialised line, and the structural scrub
 * runs only when one turns up. JSON escapes character by character, so a string holds a secret
 * exactly when the line holds the secret's escaped form.
 */
export function recordLine(pair: MirroredPair, options: RecordOptions): string {
  const secrets = secretValues(pair.clientHeaders, options.secrets ?? []);
  const line = JSON.stringify(assemble(pair, options, []));
  if (!secrets.some((secret) => line.includes(JSON.stringify(secret).slice(1, -1)))) return line;
  return JSON.stringify(assemble(pair, options, secrets));
}

function assemble(pair: MirroredPair, options: RecordOptions, secrets: readonly string[]): CaptureRecord {
  const clientHeaders: Record<string, string> = {};
  for (const name of HARMLESS_HEADERS) {
    const v = pair.clientHeaders[name];
    if (v !== undefined) clientHeaders[name] = Array.isArray(v) ? v.join(', ') : v;
  }
  const byName = { extraFields: options.redactFields };
  const request = scrub(options.includePrompts ? pair.request : hashPrompts(pair.request), secrets, byName) as Record<string, unknown>;
  const analysis: CapturedAnalysis | null =
    pair.analysis === null ? null : { ...withoutPositions(pair.analysis), noiseFloor: pair.noiseFloor, thresholds: { ...options.thresholds, noiseFloor: pair.noiseFloor } };
  return {
    v: CAPTURE_VERSION,
    id: scrub(pair.id, secrets) as string,
    ts: pair.ts,
    route: pair.route,
    ...(pair.path !== pair.route ? { path: pair.path } : {}),
    outcome: pair.outcome,
    request,
    ...(options.includePrompts ? {} : { promptsHashed: true as const }),
    ...(Object.keys(clientHeaders).length > 0 ? { clientHeaders: scrub(clientHeaders, secrets, byName) as Record<string, string> } : {}),
    candidate: scrubSide(side(pair.candidate, options.includePrompts), secrets, byName),
    baseline: pair.baseline === null ? null : scrubSide(side(pair.baseline, options.includePrompts), secrets, byName),
    analysis: scrub(analysis, secrets, { byName: false }) as CapturedAnalysis | null,
    ...(pair.repeats && pair.repeats.length > 0
      ? {
          repeats: pair.repeats.map((r) => ({
            backend: r.backend,
            flushed: r.flushed,
            ...(r.flushError ? { flushError: scrub(r.flushError, secrets) as string } : {}),
            second: scrubSide(side(r.second, options.includePrompts), secrets, byName),
            cached: r.cached,
            probe: r.probe,
            sides: r.sides,
            analysis: r.analysis === null ? null : (scrub(withoutPositions(r.analysis), secrets, { byName: false }) as Omit<Comparison, 'positions'>),
            verdict: r.verdict,
          })),
        }
      : {}),
  };
}

/** Headers and the error text by name and value; the body by value only (see {@link scrub}). */
function scrubSide(s: CaptureSide, secrets: readonly string[], byName: { extraFields?: readonly string[] }): CaptureSide {
  const out: CaptureSide = { ...s, body: secrets.length > 0 ? scrub(s.body, secrets, { byName: false }) : s.body };
  if (s.error !== undefined) out.error = scrub(s.error, secrets) as string;
  if (s.serverHeaders !== undefined) out.serverHeaders = scrub(s.serverHeaders, secrets, byName) as Record<string, string>;
  for (const k of ['model', 'system_fingerprint'] as const) if (s[k] !== undefined) out[k] = scrub(s[k], secrets) as string;
  return out;
}

import type { Comparison } from '../core/index.js';
import type { AlertTransition } from '../core/detector.js';
import type { PairOutcome } from '../core/pair.js';
import type { BackendResult } from '../backend/dispatch.js';
import type { RepeatPair } from './repeat.js';
import type { PathPair } from '../core/path.js';
import type { Slice } from '../core/slice.js';

/** Outcomes of `logprobe_mirror_total` (docs/format.md): a pair's ({@link PairOutcome}, src/core/pair.ts), or never sent. */
export type MirrorOutcome = PairOutcome | 'dropped' | 'skipped';

/** One mirrored pair, complete: what was sent, what each side answered, what the comparison found. */
export interface MirroredPair {
  id: string;
  ts: string;
  route: string;
  /** The request path (the `route` label is `other` for configured routes outside the known ones). */
  path: string;
  /** The mirrored body as sent to both backends. */
  request: Record<string, unknown>;
  /** The client request's headers (for capture: credentials are stripped there). */
  clientHeaders: Record<string, string | string[] | undefined>;
  candidate: BackendResult;
  /** The baseline's answer; null in baseline-free mode. */
  baseline: BackendResult | null;
  outcome: MirrorOutcome;
  /** The comparison, when both sides answered with a body. */
  analysis: Comparison | null;
  /** The noise floor used for this pair, nats. */
  noiseFloor: number;
  /** Its model slice and whether the candidate's copy read from the prefix cache (src/core/slice.ts). */
  slice?: Slice;
  /** Repeat probes of the cache path (the same copy again to a backend, cold then warm). */
  repeats?: RepeatPair[];
  /** Path checks: each checked backend's decode-time logprobs against its own prefill of the same tokens. */
  paths?: PathPair[];
  /** The copy went to another route than the client's: a Responses request sent as chat completions (its route returned no logprobs). */
  translated?: { from: string; to: string };
  /** A canary probe's pair (logprobe's own request, no client behind it): which probe, which round, against what. */
  canary?: CanaryTag;
}

/** What makes a pair a canary's: its probe's id, the round it was sent in, and whether the other side was a recorded reference. */
export interface CanaryTag {
  probe: string;
  round: number;
  reference: boolean;
}

/** Who wants to hear about mirrored pairs and alert transitions (capture, the demo). */
export interface MirrorListeners {
  onPair?(pair: MirroredPair): void;
  onAlert?(transition: AlertTransition): void;
}

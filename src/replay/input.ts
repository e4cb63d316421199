import { basename } from 'node:path';
import { captureRecordError, readJsonLines } from '../capture/reader.js';
import type { CaptureRecord } from '../capture/record.js';
import { requestKind, type RequestKind } from '../backend/rewrite.js';
import type { MirroredPair } from '../pair/types.js';
import { routeLabel } from '../metrics/labels.js';
import type { Summary } from '../report/summary.js';
import { RateLimiter } from './limit.js';

/** One request to replay: where it goes and the body before the mirror's rewrite. */
export interface ReplayItem {
  route: string;
  kind: RequestKind;
  body: Record<string, unknown>;
  /** Its model (the gate by model, src/replay/models.ts): a capture record's `slice.model`, else the body's `model`; absent when neither names one. */
  model?: string;
}

/** The model of an input line: the capture's slice when it has one (what the mirror counted it in), else the request's `model`. */
function modelOf(slice: unknown, body: Record<string, unknown>): { model?: string } {
  const fromSlice = (slice as { model?: unknown } | null | undefined)?.model;
  const m = typeof fromSlice === 'string' ? fromSlice : body.model;
  return typeof m === 'string' && m !== '' ? { model: m } : {};
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * A replay input line: a capture record (its mirrored request), or a prompt-set line
 * `{"route": "/v1/chat/completions", "body": {…}}` or `{"route": …, …body fields}`.
 * Returns the item, or why the line cannot be replayed.
 */
export function toReplayItem(value: unknown): ReplayItem | { error: string } {
  if (!isObject(value)) return { error: 'not a capture record or a prompt-set line (not an object)' };
  if (value.v !== undefined) {
    const bad = captureRecordError(value);
    if (bad) return { error: bad };
    const record = value as unknown as CaptureRecord;
    if (record.promptsHashed)
      return { error: 'the prompt was not captured (capture.includePrompts: false), nothing to replay' };
    const path = typeof record.path === 'string' ? record.path : record.route;
    const kind = requestKind(path);
    if (kind === null || !path.startsWith('/'))
      return { error: `route '${path}' cannot be replayed (not a completions route)` };
    return { route: path, kind, body: record.request, ...modelOf(record.slice, record.request) };
  }
  if (typeof value.route !== 'string') return { error: 'not a capture record or a prompt-set line (no "route")' };
  const route = value.route;
  const kind = requestKind(route);
  if (kind === null || !route.startsWith('/'))
    return { error: `route '${route}' is neither a /completions nor a /chat/completions path` };
  let body: Record<string, unknown>;
  if (value.body !== undefined) {
    if (!isObject(value.body)) return { error: '"body" must be a JSON object' };
    body = value.body;
  } else {
    const { route: _route, ...rest } = value;
    body = rest;
  }
  if (kind === 'chat' && !Array.isArray(body.messages)) return { error: 'a chat request needs "messages" (a list)' };
  if (kind === 'completions' && body.prompt === undefined) return { error: 'a completions request needs "prompt"' };
  return { route, kind, body, ...modelOf(undefined, body) };
}

/**
 * The capture record of one replayed input: a mirrored pair as the live mirror would have written
 * it (no client headers: a replay has no client), for `replay`, `--baseline none` and
 * `--baseline-from` alike.
 */
export function replayedPair(
  id: string,
  item: ReplayItem,
  p: Pick<MirroredPair, 'request' | 'candidate' | 'baseline' | 'outcome' | 'analysis' | 'noiseFloor' | 'repeats'>,
): MirroredPair {
  return { id, ts: new Date().toISOString(), route: routeLabel(item.route), path: item.route, clientHeaders: {}, ...p };
}

/** Where an input line came from. */
export interface InputPlace {
  file: string;
  line: number;
}

/**
 * Streams the replay's inputs line by line and starts `run` for each item, at most `concurrency`
 * in flight and `rps` started a second; a line that is no item, or that `refuse` names a reason
 * for, is skipped (counted in the summary and said through `onSkip`). The id of a pair is its
 * input's place, `basename:line`: the replay capture points back at what was replayed. Returns how
 * many were started, once all have finished.
 */
export async function forEachItem(
  o: {
    inputs: readonly string[];
    concurrency: number;
    rps: number | null;
    summary: Summary;
    onSkip?: (message: string) => void;
    signal?: AbortSignal;
  },
  run: (id: string, item: ReplayItem, at: InputPlace, value: unknown) => Promise<void>,
  refuse: (item: ReplayItem, value: unknown) => string | null = () => null,
): Promise<number> {
  const limiter = new RateLimiter(o.rps);
  const inflight = new Set<Promise<void>>();
  let started = 0;
  const skip = (message: string) => {
    o.summary.skip(message);
    o.onSkip?.(message);
  };
  for (const file of o.inputs) {
    for await (const line of readJsonLines(file)) {
      if (o.signal?.aborted) break;
      const item = line.error === undefined ? toReplayItem(line.value) : { error: line.error };
      if ('error' in item) {
        skip(`${line.file}:${line.line}: ${item.error}`);
        continue;
      }
      const refused = refuse(item, line.value);
      if (refused !== null) {
        skip(`${line.file}:${line.line}: ${refused}`);
        continue;
      }
      while (inflight.size >= o.concurrency) await Promise.race(inflight);
      await limiter.take();
      started++;
      const p = run(`${basename(file)}:${line.line}`, item, { file, line: line.line }, line.value).finally(() =>
        inflight.delete(p),
      );
      inflight.add(p);
    }
  }
  await Promise.all(inflight);
  return started;
}

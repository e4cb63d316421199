import { DEFAULT_THRESHOLDS, type Thresholds } from '../core/index.js';
import { asCaptureRecord, captureRecordError, readJsonLines } from '../capture/reader.js';
import type { CaptureRecord } from '../capture/record.js';
import { analyzePair, analyzeRepeat, type PairResult } from '../pair/analyze.js';
import type { Summary } from './summary.js';
import { CACHE_SPLITS, type CacheSplit, type Slice } from '../core/slice.js';
import { PATH_VERDICTS, rejudgePath, type PathPair } from '../core/path.js';
import { entryModel } from './slices.js';

/** One analysed record. */
export interface AnalysedRecord {
  file: string;
  line: number;
  record: CaptureRecord;
  result: PairResult;
  thresholds: Thresholds;
  /** The pair's model slice and cache split: the captured ones, or (before v3) the request's model and `unknown`. */
  slice: Slice;
  /** Its path checks, judged again against the floor each was counted against (or `--noise-floor`). */
  paths: PathPair[];
}

/** What {@link analyzeFiles} reads and where it reports. */
export interface AnalyzeFilesOptions {
  files: readonly string[];
  /** Thresholds that replace each record's own (from `--config` and flags); empty keeps them. */
  overrides: Partial<Thresholds>;
  summary: Summary;
  /** Each pair, in input order; a returned promise is awaited (stdout backpressure). */
  onPair?: (r: AnalysedRecord) => void | Promise<void>;
  /** Each skipped line as `file:line: reason`. */
  onSkip?: (message: string) => void;
  /** File bytes consumed, for progress. */
  onBytes?: (n: number) => void;
  /** Stops reading (e.g. the reader of `--json` has gone). */
  signal?: AbortSignal;
}

/**
 * The thresholds a record is re-analysed with: the ones it was judged with online (so that,
 * without overrides, `analyze` reproduces the online verdict exactly), then the overrides.
 * Records without an online analysis fall back to the defaults.
 */
export function recordThresholds(record: CaptureRecord, overrides: Partial<Thresholds>): Thresholds {
  const a = record.analysis;
  // A baseline-free record has no analysis: its repeats carry the thresholds they were judged with.
  const own: Partial<Thresholds> = a
    ? { ...(a.thresholds ?? {}), ...(typeof a.noiseFloor === 'number' ? { noiseFloor: a.noiseFloor } : {}) }
    : (record.repeats?.find((r) => r.thresholds)?.thresholds ?? {});
  return { ...DEFAULT_THRESHOLDS, ...own, ...overrides };
}

/** Bad lines listed one by one per file; the others are counted and said in one line. */
export const LISTED_PER_FILE = 10;
/** A file whose first this many lines hold no capture record is not a capture file: said once, not read further. */
export const PROBE_LINES = 5;

/**
 * Streams capture files record by record (constant memory), re-runs the comparison on the
 * captured bodies, and feeds the summary. Bad lines are reported and skipped, never fatal: up to
 * {@link LISTED_PER_FILE} per file, then how many more; a file that starts with
 * {@link PROBE_LINES} bad lines (a README, a log) is said once not to be a capture file.
 */
export async function analyzeFiles(o: AnalyzeFilesOptions): Promise<{ records: number; golden: number }> {
  let records = 0;
  let golden = 0;
  for (const file of o.files) {
    if (o.signal?.aborted) break;
    const n = await analyzeFile(o, file);
    records += n.records;
    golden += n.golden;
  }
  return { records, golden };
}

/**
 * One capture file. Its bad lines are held until its first good one says whether it is a capture
 * file at all: then they are listed, else (the first {@link PROBE_LINES} all bad) it is no capture.
 */
async function analyzeFile(o: AnalyzeFilesOptions, file: string): Promise<{ records: number; golden: number }> {
  let good = 0;
  let bad = 0;
  let unlisted = 0;
  let golden = 0;
  const held: string[] = [];
  const report = (message: string) => {
    o.summary.skip(message);
    if (++bad <= LISTED_PER_FILE) o.onSkip?.(message);
    else unlisted++;
  };
  for await (const item of readJsonLines(file, { onBytes: o.onBytes })) {
    if (o.signal?.aborted) break;
    let problem = item.error;
    if (problem === undefined) problem = captureRecordError(item.value) ?? undefined;
    if (problem !== undefined) {
      const message = `${item.file}:${item.line}: ${problem}`;
      if (good > 0) report(message);
      else if (held.push(message) === PROBE_LINES) break;
      continue;
    }
    // A golden record (logprobe record) has one side: nothing to compare offline; said once per file.
    if ((item.value as { golden?: unknown }).golden === true) {
      golden++;
      continue;
    }
    if (good++ === 0) held.splice(0).forEach(report);
    await analyzeRecord(o, file, item.line, asCaptureRecord(item.value));
  }
  if (held.length === PROBE_LINES) {
    const message = `${file}: not a capture file: none of its first ${PROBE_LINES} lines is a capture record (line ${held[0]!.slice(file.length + 1)}); skipped`;
    o.summary.skip(message);
    o.onSkip?.(message);
  } else held.splice(0).forEach(report);
  if (unlisted > 0) o.onSkip?.(`${file}: ${unlisted} more bad line${unlisted === 1 ? '' : 's'} skipped, not listed`);
  if (golden > 0)
    o.onSkip?.(
      `${file}: ${golden} golden record${golden === 1 ? '' : 's'} (logprobe record: the baseline side only) not analysed — nothing to compare; replay INPUT --candidate URL --baseline-from ${file} compares a build with them`,
    );
  return { records: good, golden };
}

/** One capture record: compared again with its thresholds, added to the summary, handed to `onPair`. */
async function analyzeRecord(o: AnalyzeFilesOptions, file: string, line: number, record: CaptureRecord): Promise<void> {
  const thresholds = recordThresholds(record, o.overrides);
  // Baseline-free records carry only the candidate and its repeat probes.
  const result: PairResult =
    record.baseline === null
      ? { outcome: record.outcome, comparison: null, candidate: null, baseline: null, baselineFree: true }
      : analyzePair(record.candidate, record.baseline, thresholds, record.analysis ?? undefined);
  const repeats = (record.repeats ?? []).map((r) =>
    analyzeRepeat(r.backend === 'candidate' ? record.candidate : record.baseline, r, thresholds),
  );
  const slice = recordSlice(record);
  const paths = recordPaths(record).map((p) => rejudgePath(p, o.overrides.noiseFloor));
  if (record.canary !== undefined) {
    // A canary's pair: its round was judged online; it is counted apart, never as traffic.
    o.summary.addCanary(slice.model, record.canary.round, result.comparison?.verdict ?? null);
    const wait = o.onPair?.({ file, line, record, result, thresholds, slice, paths });
    if (wait) await wait;
    return;
  }
  o.summary.add({
    file,
    line,
    id: String(record.id),
    route: record.route,
    result,
    noiseFloor: thresholds.noiseFloor,
    online: record.analysis === undefined || record.baseline === null ? undefined : (record.analysis?.verdict ?? null),
    repeats,
    at: Date.parse(record.ts) / 1000,
    request: record.request,
    promptsHashed: record.promptsHashed === true,
    slice,
    paths,
  });
  const wait = o.onPair?.({ file, line, record, result, thresholds, slice, paths });
  if (wait) await wait;
}

/** A record's slice: as captured (v3), else the request's model and cache `unknown`; a malformed one read the same way. */
export function recordSlice(record: CaptureRecord): Slice {
  const s = record.slice as Partial<Slice> | undefined;
  const model = entryModel(
    s && typeof s.model === 'string' && s.model !== '' ? { model: s.model } : undefined,
    record.request,
  );
  const cache: CacheSplit = CACHE_SPLITS.includes(s?.cache as CacheSplit) ? (s!.cache as CacheSplit) : 'unknown';
  return { model, cache };
}

/**
 * A record's path checks that can be read (a backend, an outcome; an analysis with its shifts, a
 * known verdict and a floor), the rest left out: a hand-edited or foreign line is skipped, not fatal.
 */
function recordPaths(record: CaptureRecord): PathPair[] {
  if (!Array.isArray(record.paths)) return [];
  const ok = record.paths.filter((p): p is PathPair => {
    if (
      typeof p !== 'object' ||
      p === null ||
      (p.backend !== 'candidate' && p.backend !== 'baseline') ||
      typeof p.outcome !== 'string'
    )
      return false;
    const a = p.analysis as PathPair['analysis'] | undefined;
    if (a === null || a === undefined) return p.verdict === null || p.verdict === undefined;
    return (
      Array.isArray(a.shifts) &&
      a.shifts.every((x) => x === null || typeof x === 'number') &&
      typeof a.noiseFloor === 'number' &&
      PATH_VERDICTS.includes(p.verdict as never)
    );
  });
  return ok.map((p) => (p.analysis ? p : { ...p, analysis: null, verdict: null }));
}

import { DEFAULT_THRESHOLDS, type Thresholds } from '../core/index.js';
import { asCaptureRecord, captureRecordError, readJsonLines } from '../capture/reader.js';
import type { CaptureRecord } from '../capture/record.js';
import { analyzePair, type PairResult } from './pair.js';
import type { Summary } from './summary.js';

/** One analysed record. */
export interface AnalysedRecord {
  file: string;
  line: number;
  record: CaptureRecord;
  result: PairResult;
  thresholds: Thresholds;
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
  const own: Partial<Thresholds> = a ? { ...(a.thresholds ?? {}), ...(typeof a.noiseFloor === 'number' ? { noiseFloor: a.noiseFloor } : {}) } : {};
  return { ...DEFAULT_THRESHOLDS, ...own, ...overrides };
}

/**
 * Streams capture files record by record (constant memory), re-runs the comparison on the
 * captured bodies, and feeds the summary. Bad lines are reported and skipped, never fatal.
 */
export async function analyzeFiles(o: AnalyzeFilesOptions): Promise<{ records: number }> {
  let records = 0;
  for (const file of o.files) {
    if (o.signal?.aborted) break;
    for await (const item of readJsonLines(file, { onBytes: o.onBytes })) {
      if (o.signal?.aborted) break;
      let problem = item.error;
      if (problem === undefined) problem = captureRecordError(item.value) ?? undefined;
      if (problem !== undefined) {
        const message = `${item.file}:${item.line}: ${problem}`;
        o.summary.skip(message);
        o.onSkip?.(message);
        continue;
      }
      const record = asCaptureRecord(item.value);
      const thresholds = recordThresholds(record, o.overrides);
      const result = analyzePair(record.candidate, record.baseline, thresholds, record.analysis ?? undefined);
      records++;
      o.summary.add({
        file,
        line: item.line,
        id: String(record.id),
        route: record.route,
        result,
        noiseFloor: thresholds.noiseFloor,
        online: record.analysis === undefined ? undefined : (record.analysis?.verdict ?? null),
      });
      const wait = o.onPair?.({ file, line: item.line, record, result, thresholds });
      if (wait) await wait;
    }
  }
  return { records };
}

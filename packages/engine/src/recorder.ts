/**
 * Records every request the engine receives — for tests, and for an independent judge checking
 * what a proxy really sent upstream. Headers are kept verbatim, authorization included: proving
 * which credentials reached which backend is part of the point. Never use it in front of real
 * users' traffic.
 */
import { open, type FileHandle } from 'node:fs/promises';
import type { WriteStream } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';

/** One received request. */
export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  /** The raw body as received (UTF-8). */
  readonly body: string;
  /** Epoch milliseconds when the body was complete. */
  readonly receivedAt: number;
}

/** A bounded in-memory list plus an optional JSONL file. */
export class RequestRecorder {
  /** The most recent requests, oldest first. */
  readonly requests: RecordedRequest[] = [];
  private stream: WriteStream | null = null;

  private constructor(private readonly limit: number) {}

  /**
   * Creates a recorder keeping the last `limit` requests; with `file`, appends one JSON line per
   * request to it (opened here, so a bad path fails at start-up, not on the first request).
   */
  static async create(limit: number, file?: string): Promise<RequestRecorder> {
    const rec = new RequestRecorder(limit);
    if (file) {
      const handle: FileHandle = await open(file, 'a');
      rec.stream = handle.createWriteStream();
    }
    return rec;
  }

  /** Records one request. */
  record(r: RecordedRequest): void {
    this.requests.push(r);
    // Trim in batches: one splice per 10% overflow instead of a shift per request.
    if (this.requests.length > this.limit * 1.1 + 1) this.requests.splice(0, this.requests.length - this.limit);
    this.stream?.write(
      `${JSON.stringify({ method: r.method, path: r.path, headers: r.headers, body: r.body, receivedAt: new Date(r.receivedAt).toISOString() })}\n`,
    );
  }

  /** Flushes and closes the file. */
  async close(): Promise<void> {
    const s = this.stream;
    this.stream = null;
    if (!s) return;
    await new Promise<void>((resolve) => s.end(resolve));
  }
}

import type { IncomingMessage } from 'node:http';
import { PayloadTooLargeError } from './errors.js';

/**
 * Reads a request body into one Buffer, failing with 413 past `limitBytes`. Used only where a
 * copy is needed (a request that may be mirrored, or a chunked body whose size is unknown);
 * other bodies stream through untouched.
 */
export function readBody(stream: IncomingMessage, limitBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (err: Error | null, buf?: Buffer) => {
      if (done) return;
      done = true;
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('error', onError);
      stream.off('aborted', onAborted);
      if (err) reject(err);
      else resolve(buf as Buffer);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limitBytes) {
        // Stop reading; the connection is closed after the 413 so the rest is not read.
        stream.pause();
        finish(new PayloadTooLargeError(Math.round(limitBytes / 1024 / 1024)));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => finish(null, chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size));
    const onError = (err: Error) => finish(err);
    const onAborted = () => {
      const err = new Error('client aborted the request body') as Error & { code: string };
      err.code = 'ECONNRESET';
      finish(err);
    };
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onError);
    stream.on('aborted', onAborted);
  });
}

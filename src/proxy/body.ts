import type { IncomingMessage } from 'node:http';
import { PayloadTooLargeError } from '../errors.js';

/**
 * Reads a request body into one Buffer, failing with 413 past `limitBytes`. Used only where a
 * copy is needed (a request that may be mirrored, a small body sent with its headers in one
 * write, or a chunked body whose size is unknown); other bodies stream through untouched.
 * Callback style: it runs once per proxied request, so no Promise and no closure per chunk.
 */
export function readBody(stream: IncomingMessage, limitBytes: number, callback: (err: Error | null, body: Buffer) => void): void {
  let first: Buffer | null = null;
  let chunks: Buffer[] | null = null;
  let size = 0;
  let done = false;
  const finish = (err: Error | null, buf: Buffer) => {
    if (done) return;
    done = true;
    stream.off('data', onData);
    stream.off('end', onEnd);
    stream.off('error', onError);
    stream.off('aborted', onAborted);
    callback(err, buf);
  };
  const onData = (chunk: Buffer) => {
    size += chunk.length;
    if (size > limitBytes) {
      // Stop reading; the connection is closed after the 413 so the rest is not read.
      stream.pause();
      finish(new PayloadTooLargeError(Math.round(limitBytes / 1024 / 1024)), EMPTY);
      return;
    }
    if (first === null) first = chunk;
    else (chunks ??= [first]).push(chunk);
  };
  const onEnd = () => finish(null, chunks !== null ? Buffer.concat(chunks, size) : (first ?? EMPTY));
  const onError = (err: Error) => finish(err, EMPTY);
  const onAborted = () => {
    const err = new Error('client aborted the request body') as Error & { code: string };
    err.code = 'ECONNRESET';
    finish(err, EMPTY);
  };
  stream.on('data', onData);
  stream.on('end', onEnd);
  stream.on('error', onError);
  stream.on('aborted', onAborted);
}

const EMPTY = Buffer.alloc(0);

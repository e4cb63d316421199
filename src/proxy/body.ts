import type { IncomingMessage } from 'node:http';
import { PayloadTooLargeError, RequestBodyTimeoutError } from '../errors/index.js';

/** What a client that closed its connection in the middle of its request body fails a read with. */
export class ClientAbortedError extends Error {
  readonly code = 'LOGPROBE_CLIENT_ABORTED';
  constructor() {
    super('the client closed the connection during the request body');
  }
}

/**
 * Reads a request body, failing with 413 past `limitBytes` and with 408 when no byte came for
 * `idleMs` (an idle timer, reset by each chunk: a slow upload that keeps sending is not cut).
 * `keep`: the body is returned as one Buffer, else its bytes are dropped as they come (a
 * shadow copy the sampler did not keep). Used only where a copy is needed (a request that may
 * be mirrored, a small body sent with its headers in one write, or a chunked body whose size is
 * unknown); other bodies stream through untouched (see {@link watchStreamedBody}).
 * Callback style: it runs once per proxied request, so no Promise and no closure per chunk.
 */
export function readBody(
  stream: IncomingMessage,
  limitBytes: number,
  idleMs: number,
  keep: boolean,
  callback: (err: Error | null, body: Buffer) => void,
): void {
  let first: Buffer | null = null;
  let chunks: Buffer[] | null = null;
  let size = 0;
  let done = false;
  // The parser has the whole body already (it came with the head): nothing can stall.
  let timer: NodeJS.Timeout | null = stream.complete
    ? null
    : setTimeout(() => finish(new RequestBodyTimeoutError(idleMs), EMPTY), idleMs);
  const finish = (err: Error | null, buf: Buffer) => {
    if (done) return;
    done = true;
    if (timer !== null) clearTimeout(timer);
    timer = null;
    stream.off('data', onData);
    stream.off('end', onEnd);
    stream.off('error', onError);
    stream.off('aborted', onAborted);
    // Stop reading: the connection is closed after the 413 or the 408, so the rest is not read.
    if (err !== null) stream.pause();
    callback(err, buf);
  };
  const onData = (chunk: Buffer) => {
    timer?.refresh();
    size += chunk.length;
    if (size > limitBytes) {
      finish(new PayloadTooLargeError(Math.round(limitBytes / 1024 / 1024)), EMPTY);
      return;
    }
    if (!keep) return;
    if (first === null) first = chunk;
    else (chunks ??= [first]).push(chunk);
  };
  const onEnd = () => finish(null, chunks !== null ? Buffer.concat(chunks, size) : (first ?? EMPTY));
  const onError = (err: Error) => finish(stream.aborted ? new ClientAbortedError() : err, EMPTY);
  const onAborted = () => finish(new ClientAbortedError(), EMPTY);
  stream.on('data', onData);
  stream.on('end', onEnd);
  stream.on('error', onError);
  stream.on('aborted', onAborted);
}

/**
 * The idle timer of a body that streams through to undici (read by undici, not by us): armed
 * while the body flows (undici wants bytes), reset by each chunk, off while undici holds it
 * paused (the upstream reads slower than the client sends: not the client's doing) and before
 * undici starts reading (waiting for an upstream connection). `onIdle` runs once when the
 * client sent nothing for `idleMs` while a byte was wanted. Returns a function that stops it.
 *
 * No `data` listener is added before undici's own: that would start the flow with nobody to
 * take the bytes. undici's `on('data')` makes the body emit `resume`; ours is added then.
 */
export function watchStreamedBody(stream: IncomingMessage, idleMs: number, onIdle: () => void): () => void {
  let timer: NodeJS.Timeout | null = null;
  let watching = false;
  const arm = () => {
    if (!watching) {
      watching = true;
      stream.on('data', refresh);
    }
    if (timer === null) timer = setTimeout(fire, idleMs);
    else timer.refresh();
  };
  const disarm = () => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
  };
  const refresh = () => timer?.refresh();
  const fire = () => {
    timer = null;
    stop();
    // Every byte arrived (what is left is ours to pass on): not a stalled client.
    if (!stream.complete) onIdle();
  };
  const stop = () => {
    disarm();
    stream.off('resume', arm);
    stream.off('pause', disarm);
    stream.off('data', refresh);
    stream.off('end', stop);
    stream.off('close', stop);
  };
  if (stream.complete) return stop;
  stream.on('resume', arm);
  stream.on('pause', disarm);
  stream.on('end', stop);
  stream.on('close', stop);
  return stop;
}

const EMPTY = Buffer.alloc(0);

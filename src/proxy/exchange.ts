import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Logger } from 'pino';
import { ClientAbortedError, readBody, watchStreamedBody } from './body.js';
import { PayloadTooLargeError, RequestBodyTimeoutError, UpstreamOverflowError } from '../errors/index.js';
import { mapUpstreamError, openAIError } from './errors.js';
import { MIRROR_HEADER, clientResponseHeaders, upstreamRequestHeaders } from './headers.js';
import { pathOf } from './routes.js';
import { routeLabel } from '../metrics/labels.js';
import { parseMirrorHeader, type MirrorTap } from './tap.js';
import type { ConnectionBudget } from './budget.js';
import type { OverflowReason } from '../metrics/labels.js';
import type { RefusalReason } from '../metrics/catalog.js';

/** What every exchange shares: built once per app. */
export interface ExchangeContext {
  candidate: Dispatcher;
  origin: string;
  host: string;
  basePath: string;
  limitBytes: number;
  limitMB: number;
  /** limits.bodyTimeoutMs: the longest silence of a client in the middle of its request body. */
  bodyTimeoutMs: number;
  log: Logger;
  /** Whether the info-level request line is written (checked once per request, not per field). */
  logRequests: () => boolean;
  metrics: {
    observeRequest(route: string, status: number, seconds: number): void;
    /** A copy received in shadow mode (`mode: shadow`), answered with `status` (499: the mirror source left first). */
    observeShadow?(route: string, status: number): void;
    /** A request the proxy answered itself, refused by a client limit or an HTTP rule. */
    refused(reason: RefusalReason): void;
  };
  mirror: MirrorTap | undefined;
  /** The configured candidate limits, or null when there are none (the default). */
  budget: ConnectionBudget | null;
  /** A request refused by the budget: counted and logged. */
  overflowed: (reason: OverflowReason) => void;
  /** Whether a candidate connection finished a response in this turn of the event loop. */
  reuse: ReuseWindow;
}

/**
 * undici frees a pipelining-1 connection one `setImmediate` after its response completes. Under
 * load one poll phase reads a stream's end and, from another client, the next request; sent at
 * once, that request finds no free connection and opens a new one, and for N streams that end
 * and restart the pool grows to ~2N connections (bench/RESULTS.md). While a response completed
 * in this turn, new requests are dispatched in its check phase, after undici's resumes (queued
 * earlier, run first), so they take the connections those responses freed. A request there
 * waits no longer than on a reused connection anyway: undici writes those only in a check phase
 * (its idle-socket check).
 */
export class ReuseWindow {
  /** A response completed in this turn; closed by an immediate queued before undici's resumes. */
  open = false;
  private readonly shut = (): void => {
    this.open = false;
  };

  /** A candidate response ended (its connection, when kept, is freed in this turn's check phase). */
  completed(): void {
    if (this.open) return;
    this.open = true;
    setImmediate(this.shut);
  }
}

/**
 * Bodies up to this size with a known length are read before the upstream request is sent, so
 * headers and body leave in one write; larger ones stream through. Either way the bytes are the
 * client's, unchanged.
 */
const READ_AHEAD_BYTES = 64 * 1024;

/** The error a client disconnect aborts the upstream request with. */
class ClientGoneError extends Error {
  readonly code = 'LOGPROBE_CLIENT_GONE';
  constructor() {
    super('the client closed the connection');
  }
}

const kExchange = Symbol('logprobe.exchange');
type TaggedResponse = ServerResponse & { [kExchange]?: ProxyExchange };

/** `res.on('close')` listener shared by all exchanges (no closure per request). */
function onResponseClose(this: TaggedResponse): void {
  this[kExchange]?.closed();
}

/** A request's id: the client's `x-request-id`, else a new UUID (the inline and the shadow path alike). */
export function clientRequestId(headers: IncomingHttpHeaders): string {
  const h = headers['x-request-id'];
  return typeof h === 'string' && h !== '' ? h : randomUUID();
}

/**
 * One client request forwarded to the candidate: reads (or streams) the body, dispatches it on
 * the candidate's pool and relays the answer chunk by chunk with backpressure. It is its own
 * undici handler, so a request costs one object, not a stream pipeline. On the response's
 * `close` it records metrics, writes the request log line, aborts the upstream request when the
 * client left early, and hands the exchange to the mirror.
 */
export class ProxyExchange implements Dispatcher.DispatchHandler {
  private readonly start = performance.now();
  private readonly route: string;
  private readonly path: string;
  private readonly forced: boolean | undefined;
  private readonly keepBody: boolean;
  private body: Buffer | null = null;
  private controller: Dispatcher.DispatchController | null = null;
  private done = false;
  private resumer: (() => void) | null = null;
  private id: string | undefined;
  /** Holds a slot of the budget until the upstream exchange ends. */
  private admitted = false;
  /** The streamed body went silent for limits.bodyTimeoutMs: answered 408, the upstream request aborted once it has gone. */
  private bodyTimedOut = false;

  constructor(
    private readonly ctx: ExchangeContext,
    private readonly req: IncomingMessage,
    private readonly res: ServerResponse,
  ) {
    const url = req.url as string;
    this.path = pathOf(url);
    this.route = routeLabel(url);
    const mirrorHeader = req.headers[MIRROR_HEADER];
    this.forced = mirrorHeader === undefined ? undefined : parseMirrorHeader(mirrorHeader);
    this.keepBody = ctx.mirror ? ctx.mirror.wantsBody(req.method as string, this.path, this.forced) : false;
    (res as TaggedResponse)[kExchange] = this;
    res.on('close', onResponseClose);
  }

  /** The request id: the client's `x-request-id`, else a UUID made when first needed. */
  requestId(): string {
    return (this.id ??= clientRequestId(this.req.headers));
  }

  /** Forwards the request: reads the body first when it must be kept or is small, else streams it. */
  run(): void {
    const headers = this.req.headers;
    const cl = headers['content-length'];
    const te = headers['transfer-encoding'];
    if (cl !== undefined && Number(cl) > this.ctx.limitBytes) {
      this.fail(new PayloadTooLargeError(this.ctx.limitMB));
      return;
    }
    if (te === undefined && (cl === undefined || cl === '0')) {
      this.dispatch(null);
      return;
    }
    if (this.keepBody || cl === undefined || Number(cl) <= READ_AHEAD_BYTES) {
      readBody(this.req, this.ctx.limitBytes, this.ctx.bodyTimeoutMs, true, (err, buf) => {
        if (err) {
          this.fail(err);
          return;
        }
        if (this.keepBody) this.body = buf;
        this.dispatch(buf);
      });
      return;
    }
    watchStreamedBody(this.req, this.ctx.bodyTimeoutMs, () => this.streamedBodyIdle());
    this.dispatch(this.req);
  }

  /**
   * The client stopped sending a body that streams to the candidate: 408 when the candidate has
   * not answered yet (the upstream request is aborted once the 408 has gone, so that undici does
   * not destroy the client's connection under it), else the response is cut.
   */
  private streamedBodyIdle(): void {
    if (this.done || this.res.destroyed) return;
    this.ctx.metrics.refused('body_timeout');
    this.bodyTimedOut = true;
    if (this.res.headersSent) {
      this.ctx.log.debug({ reqId: this.requestId() }, 'request body stalled after the response started: response cut');
      this.controller?.abort(new RequestBodyTimeoutError(this.ctx.bodyTimeoutMs));
      this.res.destroy();
      return;
    }
    this.fail(new RequestBodyTimeoutError(this.ctx.bodyTimeoutMs), true);
  }

  private dispatch(body: Buffer | IncomingMessage | null): void {
    if (this.res.destroyed) return;
    if (this.ctx.reuse.open) {
      setImmediate(() => this.dispatch(body));
      return;
    }
    const budget = this.ctx.budget;
    if (budget !== null) {
      const refused = budget.admit();
      if (refused !== null) {
        this.ctx.overflowed(refused);
        const why =
          refused === 'pending'
            ? 'too many requests waiting for a connection (candidate.maxPending)'
            : 'every connection is busy (candidate.maxConnections)';
        // A streamed body was not read: the connection cannot carry another request.
        this.fail(new UpstreamOverflowError(why), body !== null && !(body instanceof Buffer));
        return;
      }
      this.admitted = true;
    }
    const headers = upstreamRequestHeaders(this.req.headers, this.ctx.host);
    if (body instanceof Buffer) headers['content-length'] = String(body.length);
    try {
      this.ctx.candidate.dispatch(
        {
          origin: this.ctx.origin,
          path: this.ctx.basePath + (this.req.url as string),
          method: this.req.method as Dispatcher.HttpMethod,
          headers,
          body,
        },
        this,
      );
    } catch (err) {
      this.onResponseError(null, err as Error);
    }
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.res.destroyed) controller.abort(new ClientGoneError());
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    if (this.res.destroyed || this.bodyTimedOut) {
      controller.abort(new ClientGoneError());
      return;
    }
    let out: OutgoingHttpHeaders;
    try {
      out = clientResponseHeaders(headers);
      this.res.writeHead(statusCode, out);
    } catch (err) {
      controller.abort(err as Error);
    }
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.res.write(chunk)) {
      // Backpressure: the client reads slower than the upstream writes.
      controller.pause();
      this.resumer ??= () => this.controller?.resume();
      this.res.once('drain', this.resumer);
    }
  }

  onResponseEnd(): void {
    this.settle();
    this.ctx.reuse.completed();
    this.res.end();
  }

  /** The upstream exchange is over: its budget slot goes back. */
  private settle(): void {
    this.done = true;
    if (this.admitted) {
      this.admitted = false;
      this.ctx.budget?.release();
    }
  }

  onResponseError(_controller: Dispatcher.DispatchController | null, err: Error): void {
    this.settle();
    if (err instanceof ClientGoneError || this.res.destroyed || this.bodyTimedOut) return;
    if (!this.res.headersSent) {
      this.fail(mapUpstreamError(err, this.ctx.host));
      return;
    }
    // Mid-stream: the status is gone, so the client sees a truncated response.
    this.ctx.log.warn({ reqId: this.requestId(), err }, 'response terminated with an error with headers already sent');
    this.res.destroy(err);
  }

  /**
   * Answers with an error of our own, in the OpenAI envelope. `unreadBody`: the request body was
   * not read, so the connection cannot carry another request.
   */
  fail(err: Error & { statusCode?: number; code?: string }, unreadBody = false): void {
    if (!this.bodyTimedOut) this.settle();
    const res = this.res;
    if (res.destroyed || res.headersSent || err instanceof ClientAbortedError) {
      // The client left in the middle of its upload: its doing, not ours (counted as aborted).
      if (err instanceof ClientAbortedError)
        this.ctx.log.debug({ reqId: this.requestId(), reason: err.message }, 'client aborted the request');
      res.destroy();
      return;
    }
    const status = err.statusCode !== undefined && err.statusCode >= 400 ? err.statusCode : 500;
    if (status === 413) this.ctx.metrics.refused('body_too_large');
    else if (status === 408 && !this.bodyTimedOut) this.ctx.metrics.refused('body_timeout');
    // Refusals by the configured limits are logged by the budget's own rate-limited line.
    if (status >= 500 && !(err instanceof UpstreamOverflowError))
      this.ctx.log.warn({ reqId: this.requestId(), err }, 'proxy error');
    const payload = JSON.stringify(openAIError(status, err.message, err.code ?? null));
    const headers: OutgoingHttpHeaders = {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(payload),
    };
    // The rest of an oversized body is never read: the connection cannot be reused.
    if (status === 413 || status === 408 || unreadBody) headers.connection = 'close';
    res.writeHead(status, headers);
    res.end(payload);
  }

  /** The response closed (finished, or the client went away): account for the exchange once. */
  closed(): void {
    const res = this.res as TaggedResponse;
    res[kExchange] = undefined;
    const aborted = !res.writableFinished;
    if ((aborted || this.bodyTimedOut) && !this.done) this.controller?.abort(new ClientGoneError());
    this.settle();
    const seconds = (performance.now() - this.start) / 1000;
    const { ctx, req } = this;
    ctx.metrics.observeRequest(this.route, aborted ? 499 : res.statusCode, seconds);
    if (ctx.logRequests()) {
      ctx.log.info(
        {
          reqId: this.requestId(),
          method: req.method,
          route: this.route,
          status: res.statusCode,
          durationMs: Math.round(seconds * 1e6) / 1e3,
          aborted,
        },
        'request',
      );
    }
    if (ctx.mirror && this.body) {
      try {
        ctx.mirror.onExchange({
          requestId: this.requestId(),
          method: req.method as string,
          path: this.path,
          route: this.route,
          headers: req.headers,
          body: this.body,
          status: aborted ? 0 : res.statusCode,
          aborted,
          forced: this.forced,
        });
      } catch (err) {
        ctx.log.error({ reqId: this.requestId(), err }, 'mirror tap failed');
      }
    }
  }
}

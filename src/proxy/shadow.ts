import type { IncomingMessage, ServerResponse } from 'node:http';
import { ClientAbortedError, readBody } from './body.js';
import { PayloadTooLargeError } from '../errors/index.js';
import { openAIError } from './errors.js';
import { MIRROR_HEADER } from './headers.js';
import { pathOf } from './routes.js';
import { routeLabel } from '../metrics/labels.js';
import { parseMirrorHeader } from './tap.js';
import { clientRequestId, type ExchangeContext } from './exchange.js';

/**
 * Shadow mode (`mode: shadow`): logprobe is the *target* of a mirror that already exists (Envoy's
 * `request_mirror_policies`, Istio's `mirror`, Gateway API's `HTTPRequestMirrorFilter`, nginx's
 * `mirror`). The mirror source sends a copy of each production request and ignores the answer, so
 * each copy is answered at once — 202, empty body, once its body is read (under `limits.bodyMB`,
 * 413 beyond; 408 when it stalls for `limits.bodyTimeoutMs`) — and never forwarded: the candidate is never called for it. The copy then goes to
 * the mirror exactly as a finished inline exchange does (the same sampling, rewrite, both
 * backends, scoring, metrics, alerts, capture), with status 200: logprobe does not know what
 * production answered, and the mirror source only copies requests it routes, so each copy counts
 * as a request production accepted. A copy the candidate then refuses (a request production would
 * have refused too) counts as `candidate_error`, not as `skipped` as inline.
 */

/**
 * Envoy (so Istio and Envoy-based Gateway API implementations) marks a mirrored request by adding
 * `-shadow` to its Host/authority: `api-shadow`, `api-shadow:8080` (recent Envoy puts it before
 * the port), `api:8080-shadow` (older ones). This removes it, so that logs and anything routed by
 * host see the production host. The mirrored copies go to the configured backends anyway.
 */
export function stripShadowSuffix(host: string): string {
  return host.replace(/-shadow(?=(?::\d+)?$)/i, '');
}

const NO_CONTENT_HEADERS = { 'content-length': '0' } as const;

const kShadow = Symbol('logprobe.shadow');
type TaggedResponse = ServerResponse & { [kShadow]?: ShadowExchange };

function onResponseClose(this: TaggedResponse): void {
  this[kShadow]?.closed();
}

/**
 * One mirrored copy received in shadow mode: its body read (kept when the sampler wants it,
 * discarded otherwise), answered 202 with an empty body, then handed to the mirror once the
 * answer has gone. Counted in `logprobe_shadow_requests_total`, never in
 * `logprobe_proxy_requests_total` (nothing is proxied).
 */
export class ShadowExchange {
  private readonly start = performance.now();
  private readonly route: string;
  private readonly path: string;
  private readonly forced: boolean | undefined;
  private readonly keepBody: boolean;
  private body: Buffer | null = null;
  /** The Host as it came, when it carried the `-shadow` suffix. */
  private shadowHost: string | undefined;
  private id: string | undefined;

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
    const host = req.headers.host;
    if (host !== undefined) {
      const stripped = stripShadowSuffix(host);
      if (stripped !== host) {
        this.shadowHost = host;
        req.headers.host = stripped;
      }
    }
    (res as TaggedResponse)[kShadow] = this;
    res.on('close', onResponseClose);
  }

  requestId(): string {
    return (this.id ??= clientRequestId(this.req.headers));
  }

  /** Reads the body (kept or discarded, under limits.bodyMB), then answers 202. */
  run(): void {
    const { req } = this;
    const cl = req.headers['content-length'];
    if (cl !== undefined && Number(cl) > this.ctx.limitBytes) {
      this.fail(new PayloadTooLargeError(this.ctx.limitMB));
      return;
    }
    if (req.headers['transfer-encoding'] === undefined && (cl === undefined || cl === '0')) {
      this.accept(null);
      return;
    }
    // Kept when the sampler wants it, else its bytes are dropped as they come.
    readBody(req, this.ctx.limitBytes, this.ctx.bodyTimeoutMs, this.keepBody, (err, buf) =>
      err ? this.fail(err) : this.accept(this.keepBody ? buf : null),
    );
  }

  private accept(body: Buffer | null): void {
    if (this.res.destroyed) return;
    if (this.keepBody) this.body = body ?? Buffer.alloc(0);
    this.res.writeHead(202, NO_CONTENT_HEADERS);
    this.res.end();
  }

  private fail(err: Error & { statusCode?: number; code?: string }): void {
    const res = this.res;
    const status = err.statusCode;
    if (res.destroyed || res.headersSent || (status !== 413 && status !== 408)) {
      // The mirror source went away mid-body: nothing to answer, nothing to mirror.
      if (err instanceof ClientAbortedError)
        this.ctx.log.debug({ reqId: this.requestId(), reason: err.message }, 'mirror source aborted the request');
      res.destroy();
      return;
    }
    this.ctx.metrics.refused(status === 413 ? 'body_too_large' : 'body_timeout');
    const payload = JSON.stringify(openAIError(status, err.message, err.code ?? null));
    // The rest of the body is never read: the connection cannot be reused.
    res.writeHead(status, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(payload),
      connection: 'close',
    });
    res.end(payload);
  }

  /** The answer went (or the mirror source left): counted, logged, and the copy handed to the mirror. */
  closed(): void {
    const res = this.res as TaggedResponse;
    res[kShadow] = undefined;
    const finished = res.writableFinished;
    const seconds = (performance.now() - this.start) / 1000;
    const { ctx, req } = this;
    ctx.metrics.observeShadow?.(this.route, finished ? res.statusCode : 499);
    if (ctx.logRequests()) {
      ctx.log.info(
        {
          reqId: this.requestId(),
          mode: 'shadow',
          method: req.method,
          route: this.route,
          host: req.headers.host,
          ...(this.shadowHost !== undefined ? { shadowHost: this.shadowHost } : {}),
          status: res.statusCode,
          durationMs: Math.round(seconds * 1e6) / 1e3,
          aborted: !finished,
        },
        'shadow request',
      );
    }
    // The whole copy arrived (the body was read before the answer): it is mirrored even when the
    // mirror source did not wait for the 202.
    if (ctx.mirror && this.body !== null) {
      try {
        ctx.mirror.onExchange({
          requestId: this.requestId(),
          method: req.method as string,
          path: this.path,
          route: this.route,
          headers: req.headers,
          body: this.body,
          status: 200,
          aborted: false,
          forced: this.forced,
        });
      } catch (err) {
        ctx.log.error({ reqId: this.requestId(), err }, 'mirror tap failed');
      }
    }
  }
}

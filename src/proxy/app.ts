import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { openAIError } from './errors.js';
import { ProxyExchange, type ExchangeContext } from './exchange.js';
import type { MirrorTap } from './tap.js';
import { upstreamBasePath } from '../upstream/pool.js';
import { RawFrontend } from './raw.js';

/** What the proxy needs from the rest of the process. */
export interface ProxyDeps {
  logger: Logger;
  /** The candidate's long-lived pool (client traffic goes there). */
  candidate: Dispatcher;
  metrics: {
    observeRequest(route: string, status: number, seconds: number): void;
  };
  /** The mirror's hook; absent when mirroring is off. */
  mirror?: MirrorTap | undefined;
}

/** Methods forwarded to the candidate; any other method gets a 404 in the OpenAI envelope. */
const FORWARDED_METHODS = new Set(['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS']);

/** What a request gets while the proxy drains: the OpenAI envelope, like every error we make. */
const CLOSING_BODY = JSON.stringify(openAIError(503, 'logprobe is shutting down: retry on another replica', 'LOGPROBE_SHUTTING_DOWN'));

function notFound(ctx: ExchangeContext, req: IncomingMessage, res: ServerResponse): void {
  const started = performance.now();
  const payload = JSON.stringify(openAIError(404, `no route for ${req.method ?? ''} ${req.url ?? ''}`, 'not_found'));
  res.writeHead(404, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(payload) });
  res.end(payload);
  ctx.metrics.observeRequest('other', 404, (performance.now() - started) / 1000);
  if (ctx.logRequests()) ctx.log.info({ method: req.method, route: 'other', status: 404, durationMs: 0, aborted: false }, 'request');
}

const CLIENT_ERRORS: Record<string, [number, string, string]> = {
  HPE_HEADER_OVERFLOW: [431, 'Request Header Fields Too Large', 'request header fields too large'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'Request Timeout', 'request not received in time'],
};

/**
 * A request node:http's parser refused (malformed head, header overflow, timeout): answered in the
 * OpenAI envelope, like every error we make, and the connection closed.
 */
function onClientError(err: Error & { code?: string }, socket: Duplex): void {
  if (!socket.writable || err.code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  const [status, text, message] = CLIENT_ERRORS[err.code ?? ''] ?? [400, 'Bad Request', 'malformed HTTP request'];
  const payload = JSON.stringify(openAIError(status, message, err.code ?? null));
  socket.end(`HTTP/1.1 ${status} ${text}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(payload)}\r\nconnection: close\r\n\r\n${payload}`);
}

/**
 * Builds the client-facing proxy as an unstarted fastify instance. Every method and path goes to
 * the candidate with the client's bytes; only requests the mirror may copy, small ones and
 * chunked ones are read into memory first, and no body is parsed here.
 *
 * fastify owns the server's lifecycle (listen, graceful close, logging); requests go straight
 * from node:http to {@link ProxyExchange}, bypassing fastify's router, hooks and reply streams,
 * which cost three quarters of the proxy's CPU per request (see bench/RESULTS.md).
 */
export function buildApp(config: Config, deps: ProxyDeps): FastifyInstance {
  const limitBytes = Math.floor(config.limits.bodyMB * 1024 * 1024);
  const candidateUrl = new URL(config.candidate.url);
  const log = deps.logger.child({ module: 'proxy' });
  const ctx: ExchangeContext = {
    candidate: deps.candidate,
    origin: candidateUrl.origin,
    host: candidateUrl.host,
    basePath: upstreamBasePath(config.candidate.url),
    limitBytes,
    limitMB: config.limits.bodyMB,
    log,
    logRequests: () => log.isLevelEnabled('info'),
    metrics: deps.metrics,
    mirror: deps.mirror,
  };
  let closing = false;
  let raw: RawFrontend | null = null;
  /** The exchange in flight on each connection (only while one is). */
  const inFlight = new WeakMap<object, Promise<void>>();

  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    if (closing) {
      res.writeHead(503, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(CLOSING_BODY)), connection: 'close' });
      res.end(CLOSING_BODY);
      return;
    }
    const url = req.url;
    // Origin-form only ("/…"): absolute-form and "*" are not requests for the candidate.
    if (url === undefined || url.charCodeAt(0) !== 47 || !FORWARDED_METHODS.has(req.method ?? '')) {
      notFound(ctx, req, res);
      return;
    }
    const exchange = new ProxyExchange(ctx, req, res);
    // Pipelined requests reach the candidate one at a time, in order, as they were sent: node:http
    // emits the next before the previous response is done.
    const sock = req.socket;
    const before = inFlight.get(sock);
    const done = new Promise<void>((resolve) =>
      res.once('close', () => {
        if (inFlight.get(sock) === done) inFlight.delete(sock);
        resolve();
      }),
    );
    inFlight.set(sock, done);
    if (before === undefined) exchange.run();
    // A client gone meanwhile: nothing to forward.
    else void before.then(() => (res.destroyed ? undefined : exchange.run()));
  };

  const app = Fastify({
    loggerInstance: log as unknown as FastifyBaseLogger,
    serverFactory: () => {
      const server = createServer(onRequest);
      // Long generations: the client-facing server must not cut them.
      server.requestTimeout = 0;
      server.setTimeout(0);
      server.keepAliveTimeout = 65_000;
      // Plain-http candidates: connections go through the byte-level fast path first (raw.ts);
      // https candidates, and what the fast path does not handle, use ProxyExchange.
      if (candidateUrl.protocol === 'http:') {
        raw = new RawFrontend(
          {
            upstreamHost: candidateUrl.host,
            upstreamHostname: candidateUrl.hostname.replace(/^\[|\]$/g, ''),
            upstreamPort: Number(candidateUrl.port || 80),
            basePath: ctx.basePath,
            limitBytes: ctx.limitBytes,
            limitMB: ctx.limitMB,
            log: ctx.log,
            logRequests: ctx.logRequests,
            metrics: ctx.metrics,
            mirror: ctx.mirror,
            timeoutMs: config.candidate.timeoutMs,
            connectTimeoutMs: config.candidate.connectTimeoutMs,
            idleTimeoutMs: config.candidate.idleTimeoutMs,
          },
          server,
        );
      }
      return server;
    },
    forceCloseConnections: false,
    clientErrorHandler: onClientError,
  });
  // New requests during the drain get 503 and "connection: close" (fastify's return503OnClosing).
  app.addHook('preClose', (done) => {
    closing = true;
    raw?.beginClose();
    done();
  });
  app.addHook('onClose', (_instance, done) => {
    raw?.destroy();
    done();
  });
  return app;
}

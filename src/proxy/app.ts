import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { createServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { openAIError } from './errors.js';
import { ProxyExchange, ReuseWindow, type ExchangeContext } from './exchange.js';
import { ShadowExchange } from './shadow.js';
import type { MirrorTap } from './tap.js';
import { upstreamBasePath } from '../backend/pool.js';
import { ConnectionBudget } from './budget.js';
import type { OverflowReason } from '../metrics/labels.js';
import type { RefusalReason } from '../metrics/catalog.js';
import { BadRequestError, PayloadTooLargeError, UnsupportedTransferEncodingError } from '../errors/index.js';

/** What the proxy needs from the rest of the process. */
export interface ProxyDeps {
  logger: Logger;
  /** The candidate's long-lived pool (client traffic goes there). */
  candidate: Dispatcher;
  metrics: {
    observeRequest(route: string, status: number, seconds: number): void;
    /** A copy received in shadow mode, by the status it was answered. */
    observeShadow?(route: string, status: number): void;
    /** A request refused at once because a configured candidate limit was reached. */
    overflow(reason: OverflowReason): void;
    /** A request the proxy answered itself, refused by a client limit or an HTTP rule. */
    refused(reason: RefusalReason): void;
  };
  /** The mirror's hook; absent when mirroring is off. */
  mirror?: MirrorTap | undefined;
}

/** Methods forwarded to the candidate; any other method gets a 404 in the OpenAI envelope. */
const FORWARDED_METHODS = new Set(['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS']);

/** What a request gets while the proxy drains: the OpenAI envelope, like every error we make. */
const CLOSING_BODY = JSON.stringify(
  openAIError(503, 'logprobe is shutting down: retry on another replica', 'LOGPROBE_SHUTTING_DOWN'),
);

function notFound(ctx: ExchangeContext, req: IncomingMessage, res: ServerResponse, shadow: boolean): void {
  const started = performance.now();
  const payload = JSON.stringify(openAIError(404, `no route for ${req.method ?? ''} ${req.url ?? ''}`, 'not_found'));
  res.writeHead(404, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(payload),
  });
  res.end(payload);
  if (shadow) ctx.metrics.observeShadow?.('other', 404);
  else ctx.metrics.observeRequest('other', 404, (performance.now() - started) / 1000);
  if (ctx.logRequests())
    ctx.log.info({ method: req.method, route: 'other', status: 404, durationMs: 0, aborted: false }, 'request');
}

const CLIENT_ERRORS: Record<string, [number, string, string, RefusalReason]> = {
  HPE_HEADER_OVERFLOW: [431, 'Request Header Fields Too Large', 'request header fields too large', 'header_too_large'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'Request Timeout', 'request not received in time', 'head_timeout'],
  // llhttp refuses a request whose last coding is not chunked, or that names chunked twice.
  HPE_INVALID_TRANSFER_ENCODING: [
    501,
    'Not Implemented',
    'Transfer-Encoding other than chunked is not supported',
    'transfer_encoding',
  ],
};
const MALFORMED: [number, string, string, RefusalReason] = [400, 'Bad Request', 'malformed HTTP request', 'malformed'];

/** Writes one answer of ours on a connection that is then closed (the parser cannot go on). */
function answerAndClose(socket: Duplex, status: number, text: string, message: string, code: string | null): void {
  const payload = JSON.stringify(openAIError(status, message, code));
  if (socket.writable)
    socket.end(
      `HTTP/1.1 ${status} ${text}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(payload)}\r\nconnection: close\r\n\r\n${payload}`,
    );
  else socket.destroy();
}

/**
 * A request node:http's parser refused (malformed head, header overflow, stalled head): answered
 * in the OpenAI envelope, like every error we make, and the connection closed — after the
 * answers to the requests pipelined before it, so a client reads them in order.
 */
function onClientError(
  err: Error & { code?: string; reason?: string },
  socket: Duplex,
  before: Promise<void> | undefined,
  refused: (reason: RefusalReason) => void,
): void {
  if (!socket.writable || err.code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  // Content-Length with Transfer-Encoding is a 400 (as nginx), whichever llhttp names.
  const both = err.code === 'HPE_INVALID_TRANSFER_ENCODING' && /content-length/i.test(err.reason ?? '');
  const [status, text, message, reason] = (both ? undefined : CLIENT_ERRORS[err.code ?? '']) ?? MALFORMED;
  refused(reason);
  const answer = () => answerAndClose(socket, status, text, message, err.code ?? null);
  if (before === undefined) answer();
  else void before.then(answer);
}

/**
 * Why a request head llhttp accepted is refused anyway, or null: a Transfer-Encoding other than
 * exactly `chunked` (llhttp takes `gzip, chunked`, where undici's re-framing would drop the
 * gzip; nginx answers 501 to any other value) and two Host fields (RFC 9112 §3.2; node:http
 * keeps the first and drops the others from `req.headers`, its list of raw fields has both).
 */
function framingError(req: IncomingMessage): (Error & { statusCode: number; code: string }) | null {
  const te = req.headers['transfer-encoding'];
  if (te !== undefined && (te.length !== 7 || te.toLowerCase() !== 'chunked'))
    return new UnsupportedTransferEncodingError();
  const raw = req.rawHeaders;
  let hosts = 0;
  for (let i = 0; i < raw.length; i += 2)
    if (raw[i]!.length === 4 && raw[i]!.toLowerCase() === 'host' && ++hosts > 1)
      return new BadRequestError('two Host header fields (RFC 9112 §3.2)');
  return null;
}

const REFUSAL_OF: Record<string, RefusalReason> = {
  LOGPROBE_UNSUPPORTED_TRANSFER_ENCODING: 'transfer_encoding',
  LOGPROBE_BAD_REQUEST: 'duplicate_host',
  LOGPROBE_PAYLOAD_TOO_LARGE: 'body_too_large',
};

/**
 * Builds the client-facing proxy as an unstarted fastify instance. Every method and path goes to
 * the candidate with the client's bytes; only requests the mirror may copy, small ones and
 * chunked ones are read into memory first, and no body is parsed here.
 *
 * One transport: node:http (llhttp) reads every client request, undici sends it on. fastify owns
 * the server's lifecycle (listen, graceful close, logging); requests go straight from node:http
 * to {@link ProxyExchange}, bypassing fastify's router, hooks and reply streams, which cost three
 * quarters of the proxy's CPU per request (see bench/RESULTS.md).
 */
export function buildApp(config: Config, deps: ProxyDeps): FastifyInstance {
  const log = deps.logger.child({ module: 'proxy' });
  const path = new ClientPath(config, exchangeContext(config, deps, log));
  const app = Fastify({
    loggerInstance: log as unknown as FastifyBaseLogger,
    serverFactory: () => path.createServer(),
    forceCloseConnections: false,
    clientErrorHandler: (err: Error, socket: Duplex) => path.onClientError(err, socket),
  });
  // New requests during the drain get 503 and "connection: close" (fastify's return503OnClosing).
  app.addHook('preClose', (done) => {
    path.closing = true;
    done();
  });
  return app;
}

/** What every exchange shares: the candidate, its limits, the log, the metrics, the mirror's tap. */
function exchangeContext(config: Config, deps: ProxyDeps, log: Logger): ExchangeContext {
  const candidateUrl = new URL(config.candidate.url);
  const { maxConnections, maxPending } = config.candidate;
  return {
    candidate: deps.candidate,
    origin: candidateUrl.origin,
    host: candidateUrl.host,
    basePath: upstreamBasePath(config.candidate.url),
    limitBytes: Math.floor(config.limits.bodyMB * 1024 * 1024),
    limitMB: config.limits.bodyMB,
    bodyTimeoutMs: config.limits.bodyTimeoutMs,
    log,
    logRequests: () => log.isLevelEnabled('info'),
    metrics: deps.metrics,
    mirror: deps.mirror,
    budget: maxConnections === null ? null : new ConnectionBudget(maxConnections, maxPending),
    overflowed: overflowLogger(log, deps.metrics, config),
    reuse: new ReuseWindow(),
  };
}

/** The node:http server's options: the limits, the same on every request (ARCHITECTURE.md, "The proxy"). */
function serverOptions(limits: Config['limits']): ServerOptions {
  return {
    // One head limit for the client's request and (in the pool) the upstream's response.
    maxHeaderSize: limits.maxHeaderKB * 1024,
    // A head still incomplete after headTimeoutMs is answered 408 (slowloris); once the head
    // is in, nothing cuts the request: a generation may take minutes.
    headersTimeout: limits.headTimeoutMs,
    requestTimeout: 0,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    // How often node checks heads against headersTimeout (its default, 30 s, would let a
    // stalled head live up to twice the limit).
    connectionsCheckingInterval: Math.max(100, Math.min(1000, Math.floor(limits.headTimeoutMs / 4))),
    noDelay: true,
    // TCP keep-alive probes find clients that vanished mid-stream without a FIN.
    keepAlive: true,
    keepAliveInitialDelay: 60_000,
    // llhttp's strict defaults stay: no lenient parsing, Host required on HTTP/1.1.
    insecureHTTPParser: false,
    requireHostHeader: true,
  };
}

/**
 * The client path's server and its connections: each request refused, answered 503 while
 * closing, or handed to its exchange — pipelined ones in order, one at a time per connection —
 * and the parser's refusals answered after what was pipelined before them.
 */
class ClientPath {
  /** The drain began: new requests are answered 503, idle connections closed. */
  closing = false;
  private readonly shadow: boolean;
  private server: Server | null = null;
  /**
   * The last request on each connection while an exchange is in flight there: its request, the
   * promise its response's close settles, and the one of the request before it.
   */
  private readonly inFlight = new WeakMap<
    object,
    { req: IncomingMessage; done: Promise<void>; before: Promise<void> | undefined }
  >();
  /**
   * Connections whose request was refused for its framing: answered, then closed after the
   * answer ("connection: close"). Whatever the parser still reads there (a request hidden in a
   * body we would not frame) is never served.
   */
  private readonly refusedSockets = new WeakSet<object>();

  constructor(
    private readonly config: Config,
    private readonly ctx: ExchangeContext,
  ) {
    this.shadow = config.mode === 'shadow';
  }

  createServer(): Server {
    const { limits } = this.config;
    const server = createServer(serverOptions(limits), this.onRequest);
    this.server = server;
    server.setTimeout(0);
    server.keepAliveTimeout = limits.keepAliveTimeoutMs;
    // Expect: 100-continue: the 100 goes out only for a request we accept (see onRequest).
    server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => this.onRequest(req, res, true));
    // CONNECT asks for a tunnel: not something a reverse proxy of an API gives. Without this
    // listener node:http closes the connection without a word.
    server.on('connect', (_req: IncomingMessage, socket: Duplex) => this.onConnect(socket));
    return server;
  }

  private readonly closeIdle = (): void => this.server?.closeIdleConnections();

  private onConnect(socket: Duplex): void {
    const { metrics } = this.ctx;
    metrics.refused('connect');
    if (this.shadow) metrics.observeShadow?.('other', 400);
    else metrics.observeRequest('other', 400, 0);
    const answer = () =>
      answerAndClose(
        socket,
        400,
        'Bad Request',
        'CONNECT is not supported: logprobe is a reverse proxy, not a tunnel',
        'LOGPROBE_BAD_REQUEST',
      );
    const last = this.inFlight.get(socket);
    if (last === undefined) answer();
    else void last.done.then(answer);
  }

  /**
   * After the answers to what was pipelined before the broken bytes: all in flight when they
   * came in a new head, those before the last request when they broke its (chunked) body.
   */
  onClientError(err: Error, socket: Duplex): void {
    // Its request was refused already (a Transfer-Encoding llhttp refuses only once the head
    // has been handed over): that answer closes the connection.
    if (this.refusedSockets.has(socket)) return;
    const last = this.inFlight.get(socket);
    const metrics = this.ctx.metrics;
    onClientError(
      err,
      socket,
      last === undefined ? undefined : last.req.complete ? last.done : last.before,
      metrics.refused.bind(metrics),
    );
  }

  /** Answers a request we refuse for its framing, in the OpenAI envelope, and closes its connection. */
  private refuse(req: IncomingMessage, res: ServerResponse, err: Error & { statusCode: number; code: string }): void {
    const { ctx } = this;
    const started = performance.now();
    this.refusedSockets.add(req.socket);
    ctx.metrics.refused(REFUSAL_OF[err.code] ?? 'malformed');
    const payload = JSON.stringify(openAIError(err.statusCode, err.message, err.code));
    res.writeHead(err.statusCode, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(payload),
      connection: 'close',
    });
    res.end(payload);
    if (this.shadow) ctx.metrics.observeShadow?.('other', err.statusCode);
    else ctx.metrics.observeRequest('other', err.statusCode, (performance.now() - started) / 1000);
    if (ctx.logRequests())
      ctx.log.info(
        { method: req.method, route: 'other', status: err.statusCode, durationMs: 0, aborted: false, code: err.code },
        'request',
      );
  }

  /**
   * `expectContinue`: the client waits for `100 Continue` before its body (node:http's
   * `checkContinue`); it is sent only once the request is accepted, so a refused one (a
   * Content-Length over limits.bodyMB, bad framing, a drain) never gets it.
   */
  private readonly onRequest = (req: IncomingMessage, res: ServerResponse, expectContinue = false): void => {
    // Parsed after a refusal on the same connection, which closes once that answer is out: left
    // unanswered (destroying it could cut the refusal's bytes on their way).
    if (this.refusedSockets.has(req.socket)) return;
    const framing = framingError(req);
    if (framing !== null) {
      this.refuse(req, res, framing);
      return;
    }
    if (this.closing) {
      res.writeHead(503, {
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(CLOSING_BODY)),
        connection: 'close',
      });
      res.end(CLOSING_BODY);
      return;
    }
    const url = req.url;
    // Origin-form only ("/…"): absolute-form and "*" are not requests for the candidate.
    if (url === undefined || url.charCodeAt(0) !== 47 || !FORWARDED_METHODS.has(req.method ?? '')) {
      notFound(this.ctx, req, res, this.shadow);
      return;
    }
    if (expectContinue) {
      const cl = req.headers['content-length'];
      if (cl !== undefined && Number(cl) > this.ctx.limitBytes) {
        this.refuse(req, res, new PayloadTooLargeError(this.config.limits.bodyMB));
        return;
      }
      res.writeContinue();
    }
    // Shadow mode: a mirrored copy, answered 202 and handed to the mirror; nothing is forwarded.
    this.start(req, res, this.shadow ? new ShadowExchange(this.ctx, req, res) : new ProxyExchange(this.ctx, req, res));
  };

  /**
   * Pipelined requests reach the candidate one at a time, in order, as they were sent: node:http
   * emits the next before the previous response is done.
   */
  private start(req: IncomingMessage, res: ServerResponse, exchange: { run(): void }): void {
    const sock = req.socket;
    const before = this.inFlight.get(sock)?.done;
    const entry = { req, done: undefined as unknown as Promise<void>, before };
    entry.done = new Promise<void>((resolve) =>
      res.once('close', () => {
        if (this.inFlight.get(sock) === entry) this.inFlight.delete(sock);
        // Draining: a keep-alive connection whose last answer just went out is closed now rather
        // than at its keep-alive timeout, so the stop ends when the last request does.
        if (this.closing) setImmediate(this.closeIdle);
        resolve();
      }),
    );
    this.inFlight.set(sock, entry);
    if (before === undefined) exchange.run();
    // A client gone meanwhile: nothing to forward.
    else void before.then(() => (res.destroyed ? undefined : exchange.run()));
  }
}

/** Counts each refusal and logs at most one warn line per 10 s, with how many were refused. */
function overflowLogger(log: Logger, metrics: ProxyDeps['metrics'], config: Config): (reason: OverflowReason) => void {
  let refused = 0;
  let lastLog = -Infinity;
  return (reason) => {
    metrics.overflow(reason);
    refused++;
    const now = performance.now();
    if (now - lastLog < 10_000) return;
    lastLog = now;
    log.warn(
      { reason, refused, maxConnections: config.candidate.maxConnections, maxPending: config.candidate.maxPending },
      'candidate limit reached: requests refused with 503 (candidate.maxConnections / candidate.maxPending)',
    );
    refused = 0;
  };
}

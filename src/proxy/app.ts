import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import httpProxy from '@fastify/http-proxy';
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { readBody } from './body.js';
import { PayloadTooLargeError, mapUpstreamError, openAIError } from './errors.js';
import { MIRROR_HEADER, clientResponseHeaders, upstreamRequestHeaders } from './headers.js';
import { pathOf, routeLabel } from './routes.js';
import { parseMirrorHeader, type MirrorTap } from './tap.js';
import { upstreamBasePath } from '../upstream/pool.js';

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

/** Per-request state, declared up front (fastify's decorator rule). */
interface ProxyState {
  route: string;
  path: string;
  start: bigint;
  forced: boolean | undefined;
  keepBody: boolean;
  body: Buffer | null;
}

declare module 'fastify' {
  interface FastifyRequest {
    logprobe: ProxyState | null;
  }
}

function hasBody(raw: IncomingMessage): boolean {
  const te = raw.headers['transfer-encoding'];
  const cl = raw.headers['content-length'];
  return te !== undefined || (cl !== undefined && cl !== '0');
}

/**
 * Builds the client-facing proxy as an unstarted fastify instance. Every method and path goes to
 * the candidate with the client's bytes; only requests the mirror may copy are buffered, and no
 * body is parsed here.
 */
export function buildApp(config: Config, deps: ProxyDeps): FastifyInstance {
  const limitBytes = Math.floor(config.limits.bodyMB * 1024 * 1024);
  const candidateUrl = new URL(config.candidate.url);
  const basePath = upstreamBasePath(config.candidate.url);
  const log = deps.logger.child({ module: 'proxy' });

  const app = Fastify({
    loggerInstance: log as unknown as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    requestIdHeader: 'x-request-id',
    // Ids end up in captures and alerts: unique across restarts and replicas, not a counter.
    genReqId: () => randomUUID(),
    bodyLimit: limitBytes,
    // Long generations: the client-facing server must not cut them.
    requestTimeout: 0,
    connectionTimeout: 0,
    keepAliveTimeout: 65_000,
    return503OnClosing: true,
    forceCloseConnections: false,
    routerOptions: { ignoreTrailingSlash: false },
  });

  app.decorateRequest('logprobe', null);

  app.addHook('onRequest', (request, _reply, done) => {
    const path = pathOf(request.url);
    const forced = parseMirrorHeader(request.headers[MIRROR_HEADER]);
    request.logprobe = {
      route: routeLabel(request.url),
      path,
      start: process.hrtime.bigint(),
      forced,
      keepBody: deps.mirror ? deps.mirror.wantsBody(request.method, path, forced) : false,
      body: null,
    };
    done();
  });

  // Bodies: streamed through untouched unless the mirror wants a copy or the size is unknown
  // (chunked), in which case they are read into one Buffer under the limit. Never parsed.
  const parser = (request: FastifyRequest, payload: IncomingMessage, done: (err: Error | null, body?: unknown) => void) => {
    const state = request.logprobe;
    const cl = payload.headers['content-length'];
    if (cl !== undefined && Number(cl) > limitBytes) {
      done(new PayloadTooLargeError(config.limits.bodyMB));
      return;
    }
    if (state?.keepBody || cl === undefined) {
      readBody(payload, limitBytes).then(
        (buf) => {
          if (state) state.body = buf;
          done(null, buf);
        },
        (err: Error) => done(err),
      );
      return;
    }
    done(null, payload);
  };
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', parser);

  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, request, reply) => {
    const status = err.statusCode && err.statusCode >= 400 ? err.statusCode : 500;
    if (status >= 500) request.log.warn({ err }, 'proxy error');
    if (status === 413) reply.header('connection', 'close');
    reply
      .code(status)
      .type('application/json')
      .send(openAIError(status, err.message, err.code ?? null));
  });

  app.setNotFoundHandler((request, reply) => {
    reply.code(404).send(openAIError(404, `no route for ${request.method} ${request.url}`, 'not_found'));
  });

  app.addHook('onResponse', (request, reply, done) => {
    const state = request.logprobe;
    if (state) {
      const seconds = Number(process.hrtime.bigint() - state.start) / 1e9;
      const aborted = !reply.raw.writableFinished;
      deps.metrics.observeRequest(state.route, aborted ? 499 : reply.statusCode, seconds);
      request.log.info(
        { method: request.method, route: state.route, status: reply.statusCode, durationMs: Math.round(seconds * 1e6) / 1e3, aborted },
        'request',
      );
      if (deps.mirror && state.body) {
        try {
          deps.mirror.onExchange({
            requestId: String(request.id),
            method: request.method,
            path: state.path,
            route: state.route,
            headers: request.headers,
            body: state.body,
            status: aborted ? 0 : reply.statusCode,
            aborted,
            forced: state.forced,
          });
        } catch (err) {
          request.log.error({ err }, 'mirror tap failed');
        }
      }
    }
    done();
  });

  const forward = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const raw = request.raw;
    const ac = new AbortController();
    // A client that goes away before the upstream answered must stop the generation too:
    // the response's 'close' before it finished means the socket is gone.
    const onClose = () => {
      if (!reply.raw.writableFinished) ac.abort();
    };
    reply.raw.once('close', onClose);
    let body: Buffer | IncomingMessage | undefined;
    if (request.body instanceof Buffer) body = request.body;
    else if (request.body !== undefined && request.body !== null) body = request.body as IncomingMessage;
    else if (hasBody(raw)) body = raw;
    const headers = upstreamRequestHeaders(raw.headers, candidateUrl.host);
    if (body instanceof Buffer) headers['content-length'] = String(body.length);
    let res: Dispatcher.ResponseData;
    try {
      res = await deps.candidate.request({
        origin: candidateUrl.origin,
        path: basePath + raw.url,
        method: raw.method as Dispatcher.HttpMethod,
        headers,
        body,
        signal: ac.signal,
      });
    } catch (err) {
      if (ac.signal.aborted) {
        // The client is gone; there is nobody to answer.
        return;
      }
      throw mapUpstreamError(err, candidateUrl.host);
    }
    reply.code(res.statusCode);
    reply.headers(clientResponseHeaders(res.headers));
    // Streams (SSE included) are piped chunk by chunk; a client disconnect destroys `res.body`,
    // which aborts the upstream request.
    return reply.send(res.body);
  };

  void app.register(httpProxy, {
    upstream: config.candidate.url,
    // Our own content type parsers above keep the bytes; http-proxy must not add its own.
    proxyPayloads: false,
    // Every method; QUERY etc. are left to fastify's defaults.
    httpMethods: ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS'],
    handler: (request: FastifyRequest, reply: FastifyReply) => forward(request, reply),
  } as Parameters<typeof httpProxy>[1]);

  return app;
}

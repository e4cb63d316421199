import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { renderLivePage } from '../live/page.js';
import type { LiveAnswer } from '../worker/handle.js';
import type { AdminHosts } from './hosts.js';
import { EXPOSED_WITHOUT_AUTH, type AdminAuth, type AdminRoute } from './auth.js';
import type { BackendStatus } from '../backend/health.js';

/** What the admin server reports on. */
export interface AdminDeps {
  logger: Logger;
  /** The exposition text (the main registry merged with the mirror worker's). */
  metricsText(): Promise<string>;
  contentType: string;
  /** Resolves true when the candidate answers HTTP at all (any status). */
  candidateReachable(): Promise<boolean>;
  /** False once shutdown started: load balancers stop sending traffic. */
  accepting(): boolean;
  /** With proxy worker processes (listen.workers > 1): false while none of them is listening. */
  proxyListening?(): boolean;
  /** Each backend's state as the mirror knows it (the body of /readyz names one it cannot reach). */
  mirrorBackends?(): readonly BackendStatus[];
  /** The live page's data after pair `since` and point `sinceT` (MirrorHandle.liveData); absent without a mirror. */
  live?(since: number, sinceT: number): Promise<LiveAnswer>;
  /** The `Host` values answered (admin.allowedHosts); any other gets 421 on every route. */
  hosts: AdminHosts;
  /** Counts one request refused for its `Host` (logprobe_admin_misdirected_total). */
  misdirected(): void;
  /** Who may read which route (admin.auth); absent: every route open. */
  auth?: AdminAuth;
  /** HTTPS (admin.tls): the certificate and key, PEM. */
  https?: { cert: Buffer; key: Buffer };
}

/** A refused `Host` is logged the first time, then at most once per this long, with the count since. */
export const MISDIRECTED_LOG_MS = 60_000;

/** A non-negative integer query parameter, 0 when absent or not one. */
function count(v: unknown): number {
  const n = typeof v === 'string' ? Number(v) : NaN;
  return Number.isSafeInteger(n) && n >= 0 ? n : 0;
}

/** Answers 421 to a `Host` not in admin.allowedHosts (DNS rebinding), counting it and logging at most once per MISDIRECTED_LOG_MS. */
function addMisdirectedHook(app: FastifyInstance, deps: AdminDeps, log: Logger): void {
  // DNS rebinding (src/admin/hosts.ts): before any route, the unknown ones included.
  let refused = 0;
  let loggedAt = -Infinity;
  app.addHook('onRequest', async (request, reply) => {
    const host = request.headers.host;
    if (deps.hosts.allows(host)) return;
    deps.misdirected();
    refused++;
    const now = performance.now();
    if (now - loggedAt >= MISDIRECTED_LOG_MS) {
      log.warn(
        { host: host?.slice(0, 256), refused },
        'admin port: request for a Host not in admin.allowedHosts answered 421 (add the name there if it is yours)',
      );
      loggedAt = now;
      refused = 0;
    }
    return reply.code(421).type('application/json; charset=utf-8').header('cache-control', 'no-store').send({
      status: 'misdirected',
      error:
        'this Host is not served by the admin port: add the name to admin.allowedHosts, or use localhost or an IP address',
    });
  });
}

/** What each route needs (src/admin/auth.ts); any other path, a 404 included, needs nothing. */
const ROUTES: Readonly<Record<string, AdminRoute>> = { '/ui': 'ui', '/ui/data': 'ui', '/metrics': 'metrics' };

/** Answers 401 without the credential admin.auth asks for, 403 for the live page on an exposed port without admin.auth. */
function addAuthHook(app: FastifyInstance, auth: AdminAuth): void {
  app.addHook('onRequest', async (request, reply) => {
    const route = ROUTES[request.routeOptions.url ?? ''] ?? 'open';
    const verdict = await auth.check(route, request.headers.authorization);
    if (verdict === 'ok') return;
    reply.header('cache-control', 'no-store').type('text/plain; charset=utf-8');
    if (verdict === 'forbidden') return reply.code(403).send(`${EXPOSED_WITHOUT_AUTH}\n`);
    return reply
      .code(401)
      .header('www-authenticate', auth.challenge)
      .send('credentials required (admin.auth): basic auth or a bearer token\n');
  });
}

/** The live page (`/ui`) and its data (`/ui/data`), relayed from the mirror worker. */
function addLiveRoutes(app: FastifyInstance, deps: AdminDeps): void {
  // The live page (src/live/page.ts): inline script and style only, allowed by a per-response
  // nonce; the only connection it may open is to this origin's /ui/data.
  app.get('/ui', async (_request, reply) => {
    const nonce = randomBytes(16).toString('base64');
    return reply
      .type('text/html; charset=utf-8')
      .header(
        'content-security-policy',
        `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
      )
      .header('cache-control', 'no-store')
      .header('x-content-type-options', 'nosniff')
      .send(renderLivePage(nonce));
  });

  // The worker's bytes are relayed as they came: this thread neither builds, parses nor encodes them.
  app.get('/ui/data', async (request, reply) => {
    const q = request.query as Record<string, unknown>;
    const answer: LiveAnswer | { worker: 'off' } = deps.live
      ? await deps.live(count(q.since), count(q.t))
      : { worker: 'off' };
    const body =
      answer.worker === 'up'
        ? Buffer.from(answer.body.buffer, answer.body.byteOffset, answer.body.byteLength)
        : JSON.stringify({ worker: answer.worker, data: null });
    return reply
      .type('application/json; charset=utf-8')
      .header('cache-control', 'no-store')
      .header('x-content-type-options', 'nosniff')
      .send(body);
  });
}

/**
 * `/readyz`: 503 while shutting down, with no proxy worker listening, or the candidate unreachable;
 * names the mirror backends it cannot use: unreachable, or refusing their key (401/403).
 */
function addReadyRoute(app: FastifyInstance, deps: AdminDeps): void {
  app.get('/readyz', async (_request, reply) => {
    if (!deps.accepting()) return reply.code(503).send({ status: 'shutting down' });
    if (deps.proxyListening && !deps.proxyListening())
      return reply.code(503).send({ status: 'no proxy worker listening' });
    const ok = await deps.candidateReachable();
    // About the client path only; a backend the mirror cannot use is named, never a 503.
    const failing = (deps.mirrorBackends?.() ?? []).filter((b) => b.state === 'unreachable' || b.state === 'rejected');
    const mirror =
      failing.length === 0
        ? {}
        : {
            mirror: failing.map((b) => ({
              backend: b.backend,
              host: b.host,
              state: b.state,
              reason: b.lastError?.reason ?? b.state,
              since: b.lastError ? new Date(b.lastError.at).toISOString() : null,
            })),
          };
    return reply.code(ok ? 200 : 503).send({ status: ok ? 'ready' : 'candidate unreachable', ...mirror });
  });
}

/**
 * The admin server: `/metrics`, `/healthz`, `/readyz` and the live page (`/ui`, `/ui/data`), on
 * its own host and port so that metrics, health and the pairs never show on the public port.
 */
export function buildAdminApp(deps: AdminDeps): FastifyInstance {
  const log = deps.logger.child({ module: 'admin' });
  const app = Fastify({
    ...(deps.https ? { https: deps.https } : {}),
    loggerInstance: log as unknown as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
  });

  addMisdirectedHook(app, deps, log);
  if (deps.auth) addAuthHook(app, deps.auth);

  app.get('/metrics', async (_request, reply) => {
    const body = await deps.metricsText();
    return reply.type(deps.contentType).send(body);
  });

  app.get('/healthz', async () => ({ status: 'ok' }));

  addLiveRoutes(app, deps);
  addReadyRoute(app, deps);

  return app;
}

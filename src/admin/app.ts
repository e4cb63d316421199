import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';

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
}

/**
 * The admin server: `/metrics`, `/healthz`, `/readyz`, on its own host and port so that metrics
 * and health never show on the public port.
 */
export function buildAdminApp(deps: AdminDeps): FastifyInstance {
  const app = Fastify({ loggerInstance: deps.logger.child({ module: 'admin' }) as unknown as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
  });

  app.get('/metrics', async (_request, reply) => {
    const body = await deps.metricsText();
    return reply.type(deps.contentType).send(body);
  });

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.get('/readyz', async (_request, reply) => {
    if (!deps.accepting()) return reply.code(503).send({ status: 'shutting down' });
    if (deps.proxyListening && !deps.proxyListening()) return reply.code(503).send({ status: 'no proxy worker listening' });
    const ok = await deps.candidateReachable();
    return reply.code(ok ? 200 : 503).send({ status: ok ? 'ready' : 'candidate unreachable' });
  });

  return app;
}

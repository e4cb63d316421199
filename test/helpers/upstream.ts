import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A request as a test upstream saw it. */
export interface SeenRequest {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  rawHeaders: string[];
  body: Buffer;
  /** Resolves when the upstream's side of the exchange closed (finished or aborted). */
  closed: Promise<{ aborted: boolean }>;
}

export interface TestUpstream {
  url: string;
  port: number;
  seen: SeenRequest[];
  close(): Promise<void>;
}

/**
 * A real HTTP server on port 0 for proxy tests. The handler gets the request with its body
 * already read (unless `streamBody` is set) and answers however it wants.
 */
export async function startUpstream(
  handler: (req: IncomingMessage, res: ServerResponse, body: Buffer, seen: SeenRequest) => unknown,
  options: http.ServerOptions = {},
): Promise<TestUpstream> {
  const seen: SeenRequest[] = [];
  const server = http.createServer(options, (req, res) => {
    const chunks: Buffer[] = [];
    let resolveClosed!: (v: { aborted: boolean }) => void;
    const closed = new Promise<{ aborted: boolean }>((r) => (resolveClosed = r));
    res.on('close', () => resolveClosed({ aborted: !res.writableFinished }));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const entry: SeenRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        body: Buffer.concat(chunks),
        closed,
      };
      seen.push(entry);
      void Promise.resolve(handler(req, res, entry.body, entry)).catch((err: unknown) => {
        res.destroy(err as Error);
      });
    });
  });
  server.keepAliveTimeout = 5000;
  const { url, port } = await listenLocal(server);
  return {
    url,
    port,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Listens on a free port of 127.0.0.1; the server's http:// URL and port. */
export async function listenLocal(server: http.Server): Promise<{ url: string; port: number }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${port}`, port };
}

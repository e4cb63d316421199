import { createServer } from 'node:net';

/** True when `host:port` can be listened on right now (the demo's default ports may be taken). */
export function portFree(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

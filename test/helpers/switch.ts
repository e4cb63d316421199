import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A switch in front of the candidate: forwards to `target` (changed at will: a redeploy), and
 * holds every request whose body says HOLD until `release()` (a busy client path).
 */
export async function candidateSwitch(t: { after(fn: () => unknown): void }, first: string) {
  let target = first;
  const held: Array<() => void> = [];
  const forward = (req: IncomingMessage, res: ServerResponse, body: Buffer) => {
    const u = new URL(target);
    const out = httpRequest(
      { host: u.hostname, port: u.port, method: req.method, path: req.url, headers: req.headers },
      (up) => {
        res.writeHead(up.statusCode!, up.headers);
        up.pipe(res);
      },
    );
    // A request cut while the test closes (the canaries' last round): not the test's subject.
    out.on('error', () => res.destroy());
    out.end(body);
  };
  const server = createServer((req, res) => {
    req.on('error', () => res.destroy());
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const body = Buffer.concat(parts);
      if (body.includes('HOLD')) held.push(() => forward(req, res, body));
      else forward(req, res, body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => {
    for (const go of held.splice(0)) go();
    server.closeAllConnections();
    return new Promise<void>((r) => server.close(() => r()));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    to: (url: string) => (target = url),
    held: () => held.length,
    release: () => held.splice(0).forEach((go) => go()),
  };
}

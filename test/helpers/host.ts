import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';

/** GET `path` on `baseUrl`'s server with exactly this `Host` header value (the connection goes to the URL's address). */
export function getWithHost(
  baseUrl: string,
  path: string,
  host: string,
): Promise<{ status: number; contentType: string; body: string }> {
  const u = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: u.hostname, port: u.port, path, method: 'GET', setHost: false, headers: { host, connection: 'close' } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, contentType: String(res.headers['content-type'] ?? ''), body }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** Sends `head` (CRLF line ends, ending with an empty line) on a raw connection and resolves with everything read until the server closes. */
export function rawExchange(baseUrl: string, head: string): Promise<string> {
  const u = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(u.port), u.hostname);
    let out = '';
    socket.setEncoding('latin1');
    socket.on('data', (c: string) => (out += c));
    socket.on('end', () => resolve(out));
    socket.on('error', reject);
    socket.setTimeout(10_000, () => socket.destroy(new Error(`no answer to ${JSON.stringify(head)}`)));
    socket.write(head);
  });
}

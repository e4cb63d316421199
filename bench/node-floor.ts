/**
 * The floor of logprobe's transport, for the streaming lane's `node-floor` target: the smallest
 * correct reverse proxy made of the same two parts, node:http (llhttp) on the client side and an
 * undici Pool (no connection cap, pipelining 1, as src/backend/pool.ts) on the upstream side,
 * relaying each chunk with backpressure through a dispatch handler (as src/proxy/exchange.ts).
 * No config, metrics, logging, mirror or limits, and none of logprobe's code (its hop-by-hop list
 * is written out here): what logprobe costs above this row is its own;
 * what this row costs above nginx is the platform's (issue #13).
 *
 *   node --import tsx bench/node-floor.ts --upstream http://127.0.0.1:PORT [--port N]
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool, type Dispatcher } from 'undici';
import { arg } from './lib/args.js';

const upstream = new URL(arg('--upstream'));
const pool = new Pool(upstream.origin, { connections: null, pipelining: 1, headersTimeout: 0, bodyTimeout: 0 });
/** Hop-by-hop headers (RFC 9110 §7.6.1) and the client's Host, which the pool sets. */
const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
]);

function strip(h: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const k in h) {
    const v = h[k];
    if (v !== undefined && !HOP.has(k)) out[k] = v;
  }
  return out;
}

class Relay implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | null = null;
  constructor(private readonly res: http.ServerResponse) {
    res.once('close', () => {
      if (!res.writableFinished) this.controller?.abort(new Error('client gone'));
    });
  }
  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
  }
  onResponseStart(
    _c: Dispatcher.DispatchController,
    status: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    this.res.writeHead(status, strip(headers));
  }
  onResponseData(c: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.res.write(chunk)) {
      c.pause();
      this.res.once('drain', () => c.resume());
    }
  }
  onResponseEnd(): void {
    this.res.end();
  }
  onResponseError(_c: Dispatcher.DispatchController | null, err: Error): void {
    if (this.res.headersSent) this.res.destroy(err);
    else if (!this.res.destroyed) {
      this.res.writeHead(502, { 'content-type': 'application/json' });
      this.res.end('{"error":{"message":"upstream error"}}');
    }
  }
}

const server = http.createServer({ noDelay: true, keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
  const parts: Buffer[] = [];
  req.on('data', (c: Buffer) => parts.push(c));
  req.on('end', () => {
    const body = Buffer.concat(parts);
    const headers = strip(req.headers);
    headers['content-length'] = String(body.length);
    pool.dispatch(
      { path: req.url as string, method: req.method as Dispatcher.HttpMethod, headers, body },
      new Relay(res),
    );
  });
});
server.listen({ port: Number(arg('--port', '0')), host: '127.0.0.1', backlog: 4096 }, () => {
  process.stdout.write(`node floor proxy listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`);
});
process.on('SIGTERM', () => process.exit(0));

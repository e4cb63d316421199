/**
 * A fixed-response OpenAI-compatible upstream for the proxy-overhead figures: it answers every
 * request with the same captured chat completion (JSON, or SSE events when the body asks for a
 * stream), so it costs a few microseconds per request and the proxy in front of it is what is
 * measured. Run as its own process:
 *
 *   node --import tsx bench/upstream.ts --json FILE --sse FILE [--port N] [--gap-ms MS]
 *
 * SSE events are written one write each, back to back; `--gap-ms` apart when the request body
 * has `"user":"bench-paced"` (the inter-chunk delay figure).
 */
import http from 'node:http';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { arg } from './lib/args.js';

const json = readFileSync(arg('--json'));
const events = readFileSync(arg('--sse'), 'utf8')
  .split('\n\n')
  .filter((e) => e.trim() !== '')
  .map((e) => Buffer.from(`${e}\n\n`));
const gapMs = Number(arg('--gap-ms', '0'));
const STREAM = Buffer.from('"stream":true');
const PACED = Buffer.from('"user":"bench-paced"');
const jsonHeaders = { 'content-type': 'application/json', 'content-length': String(json.length) };
const sseHeaders = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' };

function sendEvents(res: http.ServerResponse, i: number, gap: number): void {
  if (res.destroyed) return;
  if (i >= events.length) {
    res.end();
    return;
  }
  res.write(events[i]);
  if (gap > 0) setTimeout(sendEvents, gap, res, i + 1, gap);
  else sendEvents(res, i + 1, 0);
}

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
    if (req.method === 'POST' && body.includes(STREAM)) {
      res.writeHead(200, sseHeaders);
      sendEvents(res, 0, body.includes(PACED) ? gapMs : 0);
    } else {
      res.writeHead(200, jsonHeaders);
      res.end(json);
    }
  });
});
server.keepAliveTimeout = 65_000;
server.listen(Number(arg('--port', '0')), '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`bench upstream listening on http://127.0.0.1:${port}\n`);
});
process.on('SIGTERM', () => process.exit(0));

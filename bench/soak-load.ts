/**
 * The soak's load generator (bench/soak.ts), in its own process: autocannon, closed loop, every
 * connection cycling through chat and completions requests, JSON and SSE. Prints one JSON line
 * of cumulative counts (and seconds since the start, `t`) a second, and a last one with `done: true` from autocannon's own totals.
 *
 *   node --import tsx bench/soak-load.ts URL CONNECTIONS SECONDS
 */
import { createRequire } from 'node:module';
import { chatBody, MAX_TOKENS } from './upstreams.js';

interface Request {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string;
}
interface Result {
  '2xx': number;
  non2xx: number;
  errors: number;
  timeouts: number;
  requests: { total: number };
}
interface Instance {
  on(event: 'response', fn: (client: unknown, status: number) => void): void;
  on(event: 'reqError', fn: () => void): void;
}
type Autocannon = (opts: Record<string, unknown>, done: (err: Error | null, result: Result) => void) => Instance;
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

const [url, connections, seconds] = process.argv.slice(2);
const headers = { 'content-type': 'application/json' };
const completion = (stream: boolean) =>
  JSON.stringify({
    model: 'bench',
    prompt: 'Write one short sentence about proxies.',
    max_tokens: MAX_TOKENS,
    ...(stream ? { stream: true } : {}),
  });
const requests: Request[] = [
  { method: 'POST', path: '/v1/chat/completions', headers, body: chatBody(false) },
  { method: 'POST', path: '/v1/completions', headers, body: completion(true) },
  { method: 'POST', path: '/v1/chat/completions', headers, body: chatBody(true) },
  { method: 'POST', path: '/v1/completions', headers, body: completion(false) },
];

const counts = { ok: 0, non2xx: 0, errors: 0 };
const began = performance.now();
// `t`: seconds since the load began, so the soak's req/s does not depend on when it reads a line.
const print = (extra: object = {}) =>
  process.stdout.write(`${JSON.stringify({ ...counts, t: (performance.now() - began) / 1000, ...extra })}\n`);
const ticker = setInterval(print, 1000);
const instance = autocannon(
  { url, connections: Number(connections), duration: Number(seconds), timeout: 10, requests },
  (err, r) => {
    clearInterval(ticker);
    if (err) {
      process.stderr.write(`autocannon: ${err.message}\n`);
      process.exit(1);
    }
    print({
      done: true,
      ok: r['2xx'],
      non2xx: r.non2xx,
      errors: r.errors,
      timeouts: r.timeouts,
      total: r.requests.total,
    });
  },
);
instance.on('response', (_client, status) => {
  if (status >= 200 && status < 300) counts.ok++;
  else counts.non2xx++;
});
instance.on('reqError', () => counts.errors++);
process.on('SIGTERM', () => process.exit(0));

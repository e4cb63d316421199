import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startUpstream } from './helpers/upstream.js';
import { BIN, runCli } from './helpers/cli.js';
import { chatBody, tempDir } from './helpers/capture.js';

/** An engine stand-in that answers after `delayMs` and records how many requests it held at once. */
async function slowEngine(delayMs: number) {
  let active = 0;
  const stats = { maxActive: 0, arrivals: [] as number[] };
  const up = await startUpstream(async (_req, res) => {
    stats.arrivals.push(performance.now());
    active++;
    stats.maxActive = Math.max(stats.maxActive, active);
    await new Promise((r) => setTimeout(r, delayMs));
    active--;
    res.writeHead(200, { 'content-type': 'application/json', server: 'slow-engine/2.1' });
    res.end(
      JSON.stringify(
        chatBody([
          [' a', -0.1],
          [' b', -0.2],
        ]),
      ),
    );
  });
  return { up, stats };
}

function promptSet(dir: string, n: number): string {
  const file = join(dir, 'p.jsonl');
  writeFileSync(
    file,
    Array.from({ length: n }, (_, i) =>
      JSON.stringify({ route: '/v1/chat/completions', messages: [{ role: 'user', content: `p${i}` }] }),
    ).join('\n'),
  );
  return file;
}

test('--concurrency bounds the pairs in flight (default 4)', async (t) => {
  const dir = tempDir(t);
  const c = await slowEngine(60);
  const b = await slowEngine(60);
  t.after(() => Promise.all([c.up.close(), b.up.close()]));
  const file = promptSet(dir, 12);
  const r1 = await runCli([
    'replay',
    file,
    '--candidate',
    c.up.url,
    '--baseline',
    b.up.url,
    '--concurrency',
    '3',
    '--out',
    join(dir, 'a.jsonl'),
  ]);
  assert.equal(r1.code, 0, r1.stdout + r1.stderr);
  assert.equal(c.stats.maxActive, 3);
  assert.equal(b.stats.maxActive, 3);
  const first = JSON.parse(readFileSync(join(dir, 'a.jsonl'), 'utf8').split('\n')[0]!) as {
    candidate: { serverHeaders: Record<string, string> };
  };
  assert.equal(first.candidate.serverHeaders.server, 'slow-engine/2.1', 'server-identifying headers kept');
  c.stats.maxActive = 0;
  const r2 = await runCli([
    'replay',
    file,
    '--candidate',
    c.up.url,
    '--baseline',
    b.up.url,
    '--out',
    join(dir, 'b.jsonl'),
  ]);
  assert.equal(r2.code, 0);
  assert.equal(c.stats.maxActive, 4, 'default concurrency');
  assert.match(r2.stdout, /identical +12 /);
});

test('--rps paces the pairs evenly (token bucket, no burst)', async (t) => {
  const dir = tempDir(t);
  const c = await slowEngine(1);
  const b = await slowEngine(1);
  t.after(() => Promise.all([c.up.close(), b.up.close()]));
  const res = await runCli([
    'replay',
    promptSet(dir, 9),
    '--candidate',
    c.up.url,
    '--baseline',
    b.up.url,
    '--rps',
    '20',
    '--concurrency',
    '16',
    '--out',
    join(dir, 'o.jsonl'),
  ]);
  assert.equal(res.code, 0, res.stdout + res.stderr);
  const a = c.stats.arrivals;
  assert.equal(a.length, 9);
  // Arrivals are timed at the upstream, so the first one also pays the connection set-up (tens of
  // ms on a loaded machine): measure from the second arrival. A burst would put them all at once.
  // One arrival late in transit on a loaded machine shortens the span by up to a gap and makes
  // one gap small; a burst would make them all small.
  const span = a[a.length - 1]! - a[1]!;
  assert.ok(span >= 6 * 50, `pairs 2..9 at 20/s span ≥ 300 ms (350 when none is late), got ${span.toFixed(0)}`);
  const gaps = a
    .slice(2)
    .map((x, i) => x - a[i + 1]!)
    .sort((x, y) => x - y);
  assert.ok(
    gaps[Math.floor(gaps.length / 2)]! >= 40,
    `evenly spaced: median gap ${gaps[Math.floor(gaps.length / 2)]!.toFixed(0)} ms, gaps ${gaps.map((g) => g.toFixed(0)).join(' ')}`,
  );
});

test(
  'on a terminal replay draws a progress bar on stderr; piped, stderr stays clean',
  { skip: existsSync('/usr/bin/script') ? false : 'script(1) is absent' },
  async (t) => {
    const dir = tempDir(t);
    const c = await slowEngine(20);
    const b = await slowEngine(20);
    t.after(() => Promise.all([c.up.close(), b.up.close()]));
    const file = promptSet(dir, 12);
    const args = ['replay', file, '--candidate', c.up.url, '--baseline', b.up.url, '--out', join(dir, 'o.jsonl')];
    // script(1) gives the command a pseudo-terminal; stdout goes to /dev/null, so what shows is stderr.
    const shell = `${process.execPath} ${BIN} ${args.join(' ')} > /dev/null`;
    const tty = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const child = spawn('script', ['-qec', shell, '/dev/null'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.on('close', (code) => resolve({ code, out }));
    });
    assert.equal(tty.code, 0, tty.out);
    assert.match(tty.out, /replay \[[█░]+\] 100% \| 12 of 12/);
    const piped = await runCli(args);
    assert.equal(piped.code, 0);
    assert.equal(piped.stderr, '');
  },
);

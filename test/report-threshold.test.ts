/**
 * The threshold model in the report: the share of positions that flipped per
 * baseline-gap bucket, and the gap at which flips stop as a second estimate of the offset.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readFileSync, writeFileSync } from 'node:fs';
import { FlipCurve, GAP_BUCKETS } from '../src/report/threshold.js';
import type { PositionRow } from '../src/core/index.js';
import { startSim } from './helpers/sim.js';
import { runCli } from './helpers/cli.js';
import { tempDir } from './helpers/capture.js';

const GOLDEN = fileURLToPath(new URL('../config/golden-prompts.example.jsonl', import.meta.url));

function row(i: number, gap: number | null, flipped = false): PositionRow {
  return {
    i,
    token: 't',
    ...(flipped ? { candidateToken: 'u' } : {}),
    candidate: -1,
    baseline: -1,
    diff: flipped ? null : 0,
    shift: 0,
    gap,
    kl: 0,
  };
}

test('FlipCurve: positions and flips per gap bucket; flips stop at the 95th percentile of the flips’ gaps, not before five flips', () => {
  const c = new FlipCurve();
  c.add({ positions: [row(0, 2), row(1, 0.8), row(2, 0.35, true)] });
  c.add({ positions: [row(0, 0.02, true)] });
  c.add({ positions: [row(0, null), row(1, 0.6)] });
  let d = c.toJSON();
  assert.deepEqual(d.edges, GAP_BUCKETS);
  assert.equal(
    d.positions.reduce((a, b) => a + b, 0),
    5,
    'a position without a gap is not counted',
  );
  assert.equal(d.flips[0], 1, '0.02 in 0–0.05');
  assert.equal(d.flips[GAP_BUCKETS.indexOf(0.4)], 1, '0.35 in 0.3–0.4');
  assert.equal(d.stop, null, 'two flips say little');
  for (const g of [0.3, 0.38, 0.41, 0.42]) c.add({ positions: [row(0, 3.5), row(1, g, true)] });
  d = c.toJSON();
  assert.equal(d.positions[GAP_BUCKETS.length], 4, 'gaps above 3 in the last bucket');
  assert.ok(d.stop && d.stop.flips === 6 && d.stop.gap >= 0.41 && d.stop.gap <= 0.43, JSON.stringify(d.stop));
});

test('the reports show the curve: a state shift flips tokens up to a gap of its size (a second estimate of the offset), float noise only near-ties', async (t) => {
  const baseline = await startSim();
  const shifted = await startSim({ stateShift: 0.5 });
  // The noisy engine's draws fixed (seed base 3, its requests one at a time), so the noise half
  // is the same every run: its 96 pairs (the 24 prompts four times) flip 10 near-ties. One pass
  // of 24 pairs flips 1 to 3 tokens, too few for the report to say where flips stop.
  const noisy = await startSim({ noise: 0.003, requestSeedBase: 3 });
  t.after(() => Promise.all([baseline.close(), shifted.close(), noisy.close()]));
  const dir = tempDir(t);
  const html = join(dir, 'r.html');
  const sh = await runCli([
    'replay',
    GOLDEN,
    '--candidate',
    shifted.url,
    '--baseline',
    baseline.url,
    '--out',
    join(dir, 's.jsonl'),
    '--html',
    html,
  ]);
  assert.equal(sh.code, 1, sh.stderr);
  assert.match(sh.stdout, /^flip share by the baseline's gap/m);
  const stop =
    /flips stop at a gap of about ([\d.]+) nats \(95% of (\d+) flips below it\): a systematic shift of size s flips/.exec(
      sh.stdout,
    );
  assert.ok(stop, sh.stdout);
  const gap = Number(stop[1]);
  t.diagnostic(`stateShift 0.5: flips stop at ${gap} nats over ${stop[2]} flips`);
  // A shift of s flips the tokens whose gap is below about s: the stop is at most s = 0.5. The sim
  // without noise gives the same pairs every run: 24 flips (every pair) stopping at 0.40 nats;
  // 0.05 nats either side is the tolerance (five quantile steps of 0.01).
  assert.ok(Math.abs(gap - 0.4) <= 0.05 && gap <= 0.5, `flips stop at ${gap} for a shift of 0.5 nats`);
  assert.ok(Number(stop[2]) >= 20, `${stop[2]} of 24 pairs flipped`);
  const page = readFileSync(html, 'utf8');
  assert.match(page, /<section id="flip-curve-section">/);
  assert.match(page, /<svg id="flip-curve"/);
  assert.match(page, /flips stop ≈ /);

  const prompts = join(dir, 'golden-x4.jsonl');
  writeFileSync(prompts, readFileSync(GOLDEN, 'utf8').repeat(4));
  const no = await runCli([
    'replay',
    prompts,
    '--candidate',
    noisy.url,
    '--baseline',
    baseline.url,
    '--out',
    join(dir, 'n.jsonl'),
    '--concurrency',
    '1',
  ]);
  assert.equal(no.code, 0, `float noise passes the gate: ${no.stderr}`);
  const line = /^ {2}flips stop.*$/m.exec(no.stdout)?.[0];
  assert.ok(line, no.stdout);
  const noiseStop =
    /flips stop at a gap of about ([\d.]+) nats \(95% of (\d+) flips below it\): only near-ties flip — the pattern of float noise$/.exec(
      line,
    );
  assert.ok(noiseStop, line);
  // Measured: 10 flips stopping at 0.003 nats; the near-tie bucket (below 0.05) is the expectation.
  assert.ok(Number(noiseStop[1]) < 0.05 && Number(noiseStop[2]) >= 5, line);
  assert.match(no.stdout, /^ {2}gap 0–0\.05 .* flipped/m, 'the near-tie bucket');
  for (const m of no.stdout.matchAll(/^ {2}gap (\S+) +\d+ positions +(\d+) flipped/gm))
    if (m[1] !== '0–0.05' && m[1] !== '0.05–0.1') assert.equal(m[2], '0', `noise flips nothing at gap ${m[1]}`);
});

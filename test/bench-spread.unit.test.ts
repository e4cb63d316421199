import { test } from 'node:test';
import assert from 'node:assert/strict';
import { floorChecks, medianInterval, spreadVerdict } from '../bench/streams-report.js';

test('a lane verdict only where the whole spread over rounds is on one side of the target', () => {
  assert.deepEqual(spreadVerdict([1.01, 0.98, 1.04], 1.05), { pass: true, noise: false, text: '1.01 (0.98–1.04)' });
  assert.deepEqual(spreadVerdict([1.2, 1.06, 1.3], 1.05), { pass: false, noise: false, text: '1.20 (1.06–1.30)' });
  const straddle = spreadVerdict([0.9, 1.1, 1.0], 1.05);
  assert.equal(straddle.pass, null);
  assert.equal(straddle.noise, true, 'the spread straddles 1.05: within noise, no verdict');
  assert.deepEqual(spreadVerdict([Number.NaN], 1), { pass: null, noise: false, text: '–' });
  assert.equal(spreadVerdict([1.05], 1.05).pass, true, 'at the target is within it');
});

test('logprobe is held to the floor on the kept-alive streams and CPU per stream, round by round', () => {
  type R = Parameters<typeof floorChecks>[0];
  // Per round: [logprobe's kept-alive TTFB p99, its all-streams TTFB p99, its CPU ms] against the floor's 10 ms / 10 ms / 100 ms.
  const result = (rounds: Array<[number, number, number]>): R => {
    const run = (key: string, round: number, warm: number, all: number, cpuMs: number) => ({
      key,
      n: 100,
      round,
      cpuMs,
      load: { completed: 1000, ttfb: { p99: all }, ttfbWarm: { p99: warm } },
    });
    return {
      summaries: [
        { key: 'node-floor', n: 100 },
        { key: 'logprobe-off', n: 100 },
      ],
      runs: rounds.flatMap(([warm, all, cpu], i) => [
        run('node-floor', i, 10, 10, 100),
        run('logprobe-off', i, warm, all, cpu),
      ]),
    } as unknown as R;
  };
  const [ttfb, cpu] = floorChecks(
    result([
      [10.5, 90, 105],
      [10.9, 80, 108],
      [9.5, 70, 99],
    ]),
  );
  assert.equal(ttfb!.pass, true, 'the kept-alive p99 is judged, not the first streams’ burst (90 ms)');
  assert.equal(ttfb!.detail, 'N=100 1.05 (0.95–1.09)×');
  assert.equal(cpu!.pass, true);
  const [ttfb2, cpu2] = floorChecks(
    result([
      [12, 12, 130],
      [13, 13, 120],
      [10.5, 10.5, 125],
    ]),
  );
  assert.equal(ttfb2!.pass, null, 'one round under 1.1×: within noise');
  assert.equal(ttfb2!.noise, true);
  assert.equal(cpu2!.pass, false, 'every round over 1.1×: FAIL');
  assert.deepEqual(floorChecks({ summaries: [], runs: [] } as unknown as R), [], 'no floor measured: no check');
});

test('the verdict is read on the interval of the median over rounds, which more rounds narrow', () => {
  assert.deepEqual(medianInterval(3), [1, 3], 'too few rounds for 90 %: the whole range');
  assert.deepEqual(medianInterval(5), [1, 5]);
  assert.deepEqual(medianInterval(8), [2, 7]);
  assert.deepEqual(medianInterval(9), [2, 8]);
  assert.deepEqual(medianInterval(11), [3, 9]);
  // One slow round of nine (the machine's, not the target's) does not hide a verdict any more…
  const nine = [1.02, 1.04, 0.98, 1.01, 1.6, 1.03, 0.99, 1.05, 1.0];
  const v = spreadVerdict(nine, 1.1);
  assert.equal(v.pass, true);
  assert.equal(v.text, '1.02 (0.98–1.60; 90 % interval of the median 0.99–1.05)');
  // …but two do; and with one round under the target the interval can still lie wholly over it: FAIL.
  assert.equal(spreadVerdict([...nine.slice(0, 8), 1.7], 1.1).noise, true);
  assert.equal(spreadVerdict([1.3, 1.2, 1.15, 1.4, 1.12, 1.25, 1.3, 1.11, 1.05], 1.1).pass, false, 'one round under');
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chunksOf, runJobs, type InControlJob } from '../bench/arl.js';

test("the ARL bench cuts a class's pairs into one run of consecutive prompts per process, none lost or repeated", () => {
  assert.deepEqual(chunksOf(300_000, 2), [
    { from: 0, pairs: 150_000 },
    { from: 150_000, pairs: 150_000 },
  ]);
  assert.deepEqual(chunksOf(10, 3), [
    { from: 0, pairs: 4 },
    { from: 4, pairs: 3 },
    { from: 7, pairs: 3 },
  ]);
  assert.deepEqual(chunksOf(2, 8), [
    { from: 0, pairs: 1 },
    { from: 1, pairs: 1 },
  ]);
  assert.deepEqual(chunksOf(5, 1), [{ from: 0, pairs: 5 }]);
});

test('the in-control counts are the same from worker processes as in this process', async () => {
  // A floor far below the f16-sized noise makes every alert fire, so the counts are not all 0.
  const cal = { sFa: 2.6e-3, sF16: 3.7e-3, sBatch: 4.4e-7, perNat: 1.17, localPerNat: 1.19 };
  const job = (chunk: number, from: number, auto: boolean): InControlJob => ({
    className: 'f16 weights',
    auto,
    cal,
    seed: 1,
    maxTokens: 4,
    alpha: 0.001,
    repeatEvery: 5,
    config: { analysis: { noiseFloor: 1e-4 }, calibration: { minFloor: 1e-4 } },
    from,
    pairs: 60,
    chunk,
  });
  const jobs = [job(0, 0, false), job(1, 60, false), job(0, 0, true)];
  const quiet = (): void => {};
  const here = await runJobs(jobs, 1, quiet);
  const forked = await runJobs(jobs, 2, quiet);
  assert.deepEqual(forked, here);
  assert.ok(here[0]!.cusum > 0 && here[0]!.self > 0, `the alerts fired: ${JSON.stringify(here[0])}`);
  assert.ok(here[0]!.peakS > 5, `S went past h = 5 where the CUSUM fired: ${here[0]!.peakS}`);
});

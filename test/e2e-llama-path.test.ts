/**
 * The path check on real numerics: a clean llama.cpp engine (`logprobe engine --llama`, its own
 * process, threads 1), 60 mirrored requests, each backend's decode-time logprobs of its own
 * tokens against the same tokens scored fresh (llama-server's `/completion`, `cache_prompt:
 * false`, one prefill per position). The spread measured here is the one docs/detection.md
 * states; none is above the floor. Then llama's decode-state fault (the state carried into decode
 * corrupted, the prompt's prefill clean): the path check sees it on one server alone.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { spawnLlamaEngine } from '@logprobe/engine';
import { E2E_PROMPTS, llamaSkip, sendAlternating } from './helpers/llama-e2e.js';
import { startLogprobe } from './helpers/logprobe.js';
import type { AlertTransition } from '../src/core/detector.js';
import type { MirroredPair } from '../src/pair/types.js';

const skip = llamaSkip;

async function run(t: { after(fn: () => unknown): void }, fault: string | undefined, n: number) {
  const [candidate, baseline] = await Promise.all([
    spawnLlamaEngine({ seed: 1, api: 'llamacpp', ...(fault ? { fault } : {}) }),
    spawnLlamaEngine({ seed: 1, api: 'llamacpp' }),
  ]);
  t.after(() => Promise.all([candidate.stop(), baseline.stop()]));
  const pairs: MirroredPair[] = [];
  const alerts: AlertTransition[] = [];
  const lp = await startLogprobe(
    {
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1, concurrency: 1, maxTokens: 16 },
      alert: { window: 20, minRequests: 5, fireFraction: 0.5, forSeconds: 0 },
    },
    { listeners: { onPair: (p) => pairs.push(p), onAlert: (a) => alerts.push(a) } },
  );
  t.after(() => lp.close());
  for (let i = 0; i < n; i++) {
    await sendAlternating(lp.proxyUrl, `${E2E_PROMPTS[i % E2E_PROMPTS.length]} ${i}`, i, 16);
    await lp.runtime.mirror!.idle();
  }
  return { pairs, alerts };
}

test(
  'a clean llama.cpp engine pair: decode and prefill of the same tokens agree under the floor on 60 requests, on both sides',
  { skip },
  async (t) => {
    const r = await run(t, undefined, 60);
    const paths = r.pairs.flatMap((p) => p.paths ?? []);
    assert.equal(paths.length, 120, 'both sides of every pair checked');
    assert.deepEqual(
      paths.filter((p) => p.outcome !== 'ok').map((p) => [p.backend, p.outcome, p.reason]),
      [],
    );
    assert.equal(paths.filter((p) => p.verdict === 'path_inconsistent').length, 0);
    const shifts = paths.flatMap((p) => p.analysis!.shifts.filter((s): s is number => s !== null));
    const sorted = [...shifts].sort((a, b) => a - b);
    const q = (x: number) => sorted[Math.min(sorted.length - 1, Math.floor(x * sorted.length))]!;
    const mix: Record<string, number> = {};
    for (const p of paths) mix[p.verdict!] = (mix[p.verdict!] ?? 0) + 1;
    t.diagnostic(
      `decode vs prefill on llama.cpp: ${shifts.length} positions, verdicts ${JSON.stringify(mix)}, median ${q(0.5).toExponential(2)}, p99 ${q(0.99).toExponential(2)}, max ${sorted.at(-1)!.toExponential(2)} nats`,
    );
    assert.ok(sorted.at(-1)! < 0.01, `the spread stays under a tenth of the default floor (max ${sorted.at(-1)})`);
    assert.deepEqual(
      r.alerts.filter((a) => a.alert === 'LogprobPathInconsistency'),
      [],
    );
  },
);

test(
  'llama.cpp with its decode state corrupted (decode-state:3): the candidate disagrees with its own prefill, the baseline does not',
  { skip },
  async (t) => {
    const r = await run(t, 'decode-state:3', 12);
    const cand = r.pairs.flatMap((p) => (p.paths ?? []).filter((x) => x.backend === 'candidate'));
    const base = r.pairs.flatMap((p) => (p.paths ?? []).filter((x) => x.backend === 'baseline'));
    assert.equal(cand.length, 12);
    const bad = cand.filter((p) => p.verdict === 'path_inconsistent').length;
    t.diagnostic(`decode-state:3: ${bad} of 12 candidate path pairs path_inconsistent`);
    assert.ok(bad >= 10, `${bad} of 12`);
    assert.ok(base.every((p) => p.verdict !== 'path_inconsistent'));
    assert.ok(
      r.alerts.some((a) => a.alert === 'LogprobPathInconsistency' && a.backend === 'candidate' && a.to === 'firing'),
    );
  },
);

/**
 * The cache path on real llama.cpp numerics (#16): engines are `logprobe engine --llama --api
 * llamacpp` processes (threads 1) playing llama-server with its prompt cache on and
 * `--slot-save-path` (so `/slots/0?action=erase` empties it: `mirror.repeat.flush`). A repeat probe
 * sends the mirrored copy twice: the first run computes the prompt (cold), the second reuses it
 * from the cache (warm), as `timings.prompt_n` says.
 *
 * - `cache-hit:2`: the KV cell of prompt token 2 is erased from what a cache hit restores — clean
 *   cold, wrong warm. Self-inconsistent on ≥ 90% of the cold→warm pairs, LogprobSelfInconsistency
 *   within the window's minimum, also with the floor calibrated (`noiseFloor: auto`); and with one
 *   engine alone (baseline-free).
 * - Clean engines, flash attention and f16 weights with the prompt cache on: no self_inconsistent
 *   verdict over 200 repeat pairs, no alert — the real noise of cache reuse stays silent.
 *
 * Each client request waits for its mirrored pair: with one slot, a client request between a
 * probe's two runs would take the slot (the engine reports it and such a pair is not judged).
 * Needs the built CLI (`npm test` builds first).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { request } from 'undici';
import { spawnLlamaEngine, type LlamaEngineProcess } from '@logprobe/engine';
import { E2E_PROMPTS, llamaSkip, sendAlternating } from './helpers/llama-e2e.js';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import type { ConfigInput } from '../src/config/schema.js';
import type { MirroredPair } from '../src/pair/types.js';
import type { AlertTransition } from '../src/core/detector.js';
import { probeShape } from '../src/core/self.js';

const skip = llamaSkip;

/** A llama-server stand-in with its prompt cache and the slot actions. */
async function engine(t: { after(fn: () => unknown): void }, fault: string | null): Promise<LlamaEngineProcess> {
  const slots = mkdtempSync(join(tmpdir(), 'logprobe-slots-'));
  const e = await spawnLlamaEngine({ seed: 1, fault, api: 'llamacpp', args: ['--slot-save-path', slots] });
  t.after(async () => {
    await e.stop();
    rmSync(slots, { recursive: true, force: true });
  });
  return e;
}

const ALERT = { window: 20, minRequests: 5, fireFraction: 0.5, forSeconds: 0 };

/** n client requests through logprobe, each waiting for its mirrored pair and probes. */
async function probe(
  candidate: LlamaEngineProcess,
  baseline: LlamaEngineProcess | null,
  n: number,
  config: ConfigInput,
) {
  const pairs: MirroredPair[] = [];
  const alerts: AlertTransition[] = [];
  const lp = await startLogprobe(
    {
      ...config,
      candidate: { url: candidate.url },
      baseline: baseline ? { url: baseline.url } : null,
      alert: ALERT,
      mirror: { sampleRate: 1, concurrency: 1, maxTokens: 16, ...config.mirror },
    },
    { listeners: { onPair: (p) => pairs.push(p), onAlert: (a) => alerts.push(a) } },
  );
  try {
    for (let i = 0; i < n; i++) {
      await sendAlternating(lp.proxyUrl, `${E2E_PROMPTS[i % E2E_PROMPTS.length]} ${i}`, i, 16);
      await lp.runtime.mirror!.idle();
    }
    const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
    const repeats = (backend: string) => pairs.flatMap((p) => p.repeats ?? []).filter((r) => r.backend === backend);
    return { pairs, alerts, metrics, repeats };
  } finally {
    await lp.close();
  }
}

test(
  'cache-hit:2 on llama.cpp: the candidate disagrees with itself cold vs warm on ≥ 90% of its probes, the baseline never; LogprobSelfInconsistency within the window minimum, also under noiseFloor auto',
  { skip },
  async (t) => {
    const [candidate, baseline] = await Promise.all([engine(t, 'cache-hit:2'), engine(t, null)]);
    for (const analysis of [{}, { noiseFloor: 'auto' as const }]) {
      const r = await probe(candidate, baseline, 24, {
        analysis,
        calibration: { minSamples: 5, margin: 3, minFloor: 0.02 },
        mirror: { repeat: { rate: 1, backends: ['candidate', 'baseline'], flush: true } },
      });
      const cs = r.repeats('candidate');
      const probes = cs.filter((x) => probeShape(x.cached) === 'cold_warm' && x.cached.first === 0);
      assert.ok(
        probes.length >= 20,
        `cold→warm probes: ${probes.length} of ${cs.length} (${JSON.stringify(cs.map((x) => x.cached))})`,
      );
      const inconsistent = probes.filter((x) => x.verdict === 'self_inconsistent').length;
      t.diagnostic(
        `${analysis.noiseFloor ?? 'fixed 0.1'}: self_inconsistent on ${inconsistent} of ${probes.length} cold→warm candidate probes`,
      );
      assert.ok(inconsistent / probes.length >= 0.9, `self_inconsistent on ${inconsistent} of ${probes.length}`);
      assert.equal(
        r.repeats('baseline').filter((x) => x.verdict === 'self_inconsistent').length,
        0,
        'the clean baseline agrees with itself',
      );
      const fired = r.alerts.find((a) => a.alert === 'LogprobSelfInconsistency' && a.to === 'firing');
      assert.ok(fired, 'LogprobSelfInconsistency fired');
      assert.equal(fired.backend, 'candidate');
      assert.ok(
        fired.evidence.requestsInWindow <= ALERT.minRequests + 2,
        `fired on ${fired.evidence.requestsInWindow} repeat pairs`,
      );
      if (analysis.noiseFloor === 'auto') {
        const floor = metricValue(r.metrics, 'logprobe_noise_floor_nats', { model: 'm' })!;
        const base = metricValue(r.metrics, 'logprobe_noise_floor_observed_nats', { backend: 'baseline', model: 'm' })!;
        const cand = metricValue(r.metrics, 'logprobe_noise_floor_observed_nats', {
          backend: 'candidate',
          model: 'm',
        })!;
        assert.ok(Number.isFinite(base), `the baseline's repeats were measured (observed p99 ${base})`);
        assert.ok(
          Math.abs(floor - Math.max(0.02, base * 3)) < 1e-9,
          `the floor (${floor}) = max(minFloor, baseline p99 ${base} × margin), never from the candidate's ${cand}`,
        );
      }
    }
  },
);

test(
  'cache-hit:2 on llama.cpp with one engine alone (baseline-free): every mirrored request a probe, LogprobSelfInconsistency fires',
  { skip },
  async (t) => {
    const candidate = await engine(t, 'cache-hit:2');
    const r = await probe(candidate, null, 12, { mirror: { repeat: { flush: true } } });
    const cs = r.repeats('candidate');
    assert.equal(cs.length, 12);
    const probes = cs.filter((x) => probeShape(x.cached) === 'cold_warm');
    assert.ok(
      probes.filter((x) => x.verdict === 'self_inconsistent').length >= 0.9 * probes.length && probes.length >= 10,
      JSON.stringify(cs.map((x) => [x.cached, x.verdict])),
    );
    assert.ok(
      r.alerts.some((a) => a.alert === 'LogprobSelfInconsistency' && a.backend === 'candidate' && a.to === 'firing'),
    );
  },
);

test(
  'clean, flash attention and f16 weights with the prompt cache on: no self_inconsistent verdict over 200 repeat pairs, no alert',
  { skip },
  async (t) => {
    const baseline = await engine(t, null);
    // 100 clean requests (candidate and baseline probed: 200 pairs), then 25 each for flash attention and f16 (50 each).
    for (const [fault, n] of [
      [null, 100],
      ['flash-attention', 25],
      ['weights:f16', 25],
    ] as const) {
      const candidate = await engine(t, fault);
      const r = await probe(candidate, baseline, n, {
        mirror: { repeat: { rate: 1, backends: ['candidate', 'baseline'], flush: true } },
      });
      const all = [...r.repeats('candidate'), ...r.repeats('baseline')];
      assert.equal(all.length, 2 * n);
      const warm = all.filter((x) => probeShape(x.cached) === 'cold_warm' && (x.cached.second ?? 0) > 0);
      assert.ok(
        warm.length >= 0.9 * all.length,
        `${fault ?? 'clean'}: ${warm.length} of ${all.length} probes cold→warm`,
      );
      const shifts = all.map((x) => x.analysis?.maxShift ?? 0);
      t.diagnostic(
        `${fault ?? 'clean'}: ${all.length} repeat pairs, verdicts ${JSON.stringify(Object.fromEntries(['identical', 'noise', 'self_inconsistent', 'incomparable'].map((v) => [v, all.filter((x) => x.verdict === v).length])))}, largest shift between runs ${Math.max(...shifts).toExponential(2)}`,
      );
      assert.deepEqual(
        all
          .filter((x) => x.verdict !== 'identical' && x.verdict !== 'noise')
          .map((x) => [x.verdict, x.analysis?.maxShift]),
        [],
        `${fault ?? 'clean'}: no self_inconsistent and no incomparable repeat pair`,
      );
      assert.ok(!r.alerts.some((a) => a.alert === 'LogprobSelfInconsistency'), `${fault ?? 'clean'}: no self alert`);
      await candidate.stop();
    }
  },
);

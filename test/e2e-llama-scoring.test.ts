/**
 * Teacher-forced scoring and the locus on real llama.cpp numerics (#15): engines are `logprobe
 * engine --llama` processes (threads 1) playing vLLM (token-id prompts, `prompt_logprobs`,
 * `/tokenize`) or llama-server (`/tokenize`, `/apply-template`, `/completion` with `n_probs`),
 * detected by the `auto` profile. Each client request waits for its mirrored pair.
 *
 * - `zero-layer:1` (a compute fault): ≥ 90% of the pairs global_shift over every scored
 *   position, the prompt's own positions shifted → locus compute.
 * - `decode-state:3` (the state carried into decode corrupted after the prompt is evaluated): ≥ 90%
 *   global_shift with locus decode_state.
 * - Clean, flash attention, f16 weights, batch size 8 with `scoring.when: always`: no shifted
 *   verdict over 200 pairs.
 *
 * Needs the built CLI (`npm test` builds first).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { spawnLlamaEngine, type LlamaEngineProcess } from '@logprobe/engine';
import { E2E_PROMPTS, llamaSkip, sendAlternating } from './helpers/llama-e2e.js';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import { request } from 'undici';
import type { MirroredPair } from '../src/pair/types.js';

const skip = llamaSkip;
type Api = 'vllm' | 'llamacpp';

async function engine(
  t: { after(fn: () => unknown): void },
  fault: string | null,
  api: Api,
): Promise<LlamaEngineProcess> {
  const e = await spawnLlamaEngine({ seed: 1, fault, api });
  t.after(() => e.stop());
  return e;
}

/** n client requests through logprobe (every one mirrored and scored as `when` says). */
async function mirror(
  candidate: LlamaEngineProcess,
  baseline: LlamaEngineProcess,
  n: number,
  when: 'diverged' | 'always',
) {
  const pairs: MirroredPair[] = [];
  const lp = await startLogprobe(
    {
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1, concurrency: 1, maxTokens: 16 },
      analysis: { scoring: { when } },
      alert: { window: 20, minRequests: 10, forSeconds: 0 },
    },
    { listeners: { onPair: (p) => pairs.push(p) } },
  );
  try {
    for (let i = 0; i < n; i++) {
      await sendAlternating(lp.proxyUrl, `${E2E_PROMPTS[i % E2E_PROMPTS.length]} ${i}`, i, 16);
      await lp.runtime.mirror!.idle();
    }
    const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
    return { pairs, metrics };
  } finally {
    await lp.close();
  }
}

const tally = (pairs: MirroredPair[], f: (p: MirroredPair) => string) =>
  pairs.reduce<Record<string, number>>((acc, p) => ((acc[f(p)] = (acc[f(p)] ?? 0) + 1), acc), {});

/** The pairs not scored, counted by route, verdict, outcome and reason (a diagnostic line). */
const notScored = (pairs: MirroredPair[]): string =>
  `not scored: ${JSON.stringify(
    tally(
      pairs.filter((p) => p.analysis?.scored?.outcome !== 'ok'),
      (p) => `${p.route} ${p.analysis?.verdict} ${p.analysis?.scored?.outcome}: ${p.analysis?.scored?.reason}`,
    ),
  )}`;

for (const [fault, api, locus] of [
  ['zero-layer:1', 'vllm', 'compute'],
  ['decode-state:3', 'llamacpp', 'decode_state'],
] as const) {
  test(
    `${fault} (${api} API): ≥ 90% of the pairs global_shift over the scored positions, locus ${locus}`,
    { skip },
    async (t) => {
      const [candidate, baseline] = await Promise.all([engine(t, fault, api), engine(t, null, api)]);
      const { pairs, metrics } = await mirror(candidate, baseline, 20, 'diverged');
      const verdicts = tally(pairs, (p) => p.analysis?.verdict ?? 'none');
      const loci = tally(pairs, (p) => p.analysis?.locus ?? 'none');
      const scored = pairs.filter((p) => p.analysis?.scored?.outcome === 'ok');
      t.diagnostic(notScored(pairs));
      t.diagnostic(
        `${fault}: verdicts ${JSON.stringify(verdicts)}, loci ${JSON.stringify(loci)}, scored ${scored.length} of ${pairs.length}, positions scored per pair ${(scored.reduce((s, p) => s + (p.analysis?.scored?.comparable ?? 0), 0) / Math.max(1, scored.length)).toFixed(1)}`,
      );
      assert.equal(pairs.length, 20);
      assert.ok(
        (verdicts['global_shift'] ?? 0) >= 18,
        `global_shift on ${verdicts['global_shift'] ?? 0} of 20: ${JSON.stringify(verdicts)}`,
      );
      assert.ok((loci[locus] ?? 0) >= 18, `locus ${locus} on ${loci[locus] ?? 0} of 20: ${JSON.stringify(loci)}`);
      // Every pair scored (chat ones included), but one that never diverged: it needs no scoring.
      const notNeeded = pairs.filter(
        (p) =>
          p.analysis?.scored?.outcome === 'skipped' &&
          p.analysis.scored.reason?.startsWith('not needed: no divergence'),
      ).length;
      assert.equal(scored.length + notNeeded, 20, `scored ${scored.length}, not needed ${notNeeded}`);
      assert.equal(
        metricValue(metrics, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }),
        1,
        'LogprobGlobalShift fires',
      );
    },
  );
}

test(
  'clean, flash attention, f16 weights and batch size 8 with scoring always: no shifted verdict over 200 pairs',
  { skip },
  async (t) => {
    const baseline = await engine(t, null, 'vllm');
    for (const [fault, n] of [
      [null, 80],
      ['flash-attention', 40],
      ['weights:f16', 40],
      ['batch:8', 40],
    ] as const) {
      const candidate = await engine(t, fault, 'vllm');
      const { pairs } = await mirror(candidate, baseline, n, 'always');
      const verdicts = tally(pairs, (p) => p.analysis?.verdict ?? 'none');
      // An identical pair needs no scoring (every position is equal already): it is skipped, and said so.
      const scored = pairs.filter(
        (p) =>
          p.analysis?.scored?.outcome === 'ok' ||
          (p.analysis?.verdict === 'identical' && p.analysis.scored?.outcome === 'skipped'),
      ).length;
      t.diagnostic(notScored(pairs));
      const maxShift = Math.max(
        ...pairs.map((p) => Math.max(p.analysis?.scored?.maxShift ?? 0, p.analysis?.maxShift ?? 0)),
      );
      t.diagnostic(
        `${fault ?? 'clean'}: ${JSON.stringify(verdicts)}, scored ${scored} of ${n}, largest shift ${maxShift.toExponential(2)}`,
      );
      assert.equal(pairs.length, n);
      assert.equal(scored, n, `${fault ?? 'clean'}: scored (or identical) ${scored} of ${n}`);
      for (const v of ['global_shift', 'local_shift', 'early_shift', 'tokenizer_mismatch', 'incomparable'])
        assert.equal(verdicts[v] ?? 0, 0, `${fault ?? 'clean'}: ${v} ${JSON.stringify(verdicts)}`);
      await candidate.stop();
    }
  },
);

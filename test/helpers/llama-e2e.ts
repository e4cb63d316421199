/**
 * End-to-end runs on llama.cpp engine processes: a candidate with a fault behind logprobe, in
 * front of a shared clean baseline. Shared by the e2e-llama and demo-llama tests.
 */
import assert from 'node:assert/strict';
import { request } from 'undici';
import type { ConfigInput } from '../../src/config/schema.js';
import { spawnLlamaEngine, type LlamaEngineProcess } from '@logprobe/engine';
import { startLogprobe } from './logprobe.js';
import { metricValue } from './sim.js';

/** llama.cpp's prebuilt binaries are used on x64 Linux; elsewhere the tests skip unless CI is set. */
export const llamaSkip: string | false =
  (process.platform === 'linux' && process.arch === 'x64') || process.env['CI']
    ? false
    : `llama.cpp engines run on x64 Linux here (this is ${process.platform}-${process.arch}); set CI=1 to run them anyway`;

/** Client prompts of the e2e runs. */
export const E2E_PROMPTS: readonly string[] = [
  'The quick brown fox',
  'Once upon a time, in a small village by the sea,',
  'def fibonacci(n):',
  'Why do floating point sums depend on the order of addition?',
  'Artificial intelligence is',
  'The capital of France is',
];

const VERDICTS = [
  'incomparable',
  'prompt_mismatch',
  'tokenizer_mismatch',
  'identical',
  'noise',
  'early_shift',
  'global_shift',
  'local_shift',
] as const;

/**
 * Sends one client request through a proxy, alternating completions (even i) and chat (odd i),
 * and asserts the client got a 200.
 */
export async function sendAlternating(proxyUrl: string, prompt: string, i: number, maxTokens: number): Promise<void> {
  const chat = i % 2 === 1;
  const res = await request(`${proxyUrl}${chat ? '/v1/chat/completions' : '/v1/completions'}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(
      chat
        ? { model: 'm', messages: [{ role: 'user', content: prompt }], max_tokens: maxTokens }
        : { model: 'm', prompt, max_tokens: maxTokens },
    ),
  });
  assert.equal(res.statusCode, 200);
  await res.body.dump();
}

/** What a run through logprobe showed. */
export interface E2ERun {
  /** Mirrored pairs per verdict (verdicts that occurred only). */
  verdicts: Record<string, number>;
  /** The mirrored request (1-based) at which LogprobGlobalShift / LogprobSustainedShift fired, or null. */
  globalFiredAt: number | null;
  sustainedFiredAt: number | null;
  /** The final /metrics exposition. */
  metrics: string;
}

/**
 * Starts a candidate engine process with `fault`, puts logprobe in front (sampleRate 1, one pair
 * at a time, 24 tokens; `config` adds the alert/analysis/calibration settings of the test), sends
 * `n` client requests one by one, waiting for each mirrored pair, and stops both.
 */
export async function mirrorThrough(
  baseline: LlamaEngineProcess,
  fault: string,
  n: number,
  config: ConfigInput = {},
): Promise<E2ERun> {
  const candidate = await spawnLlamaEngine({ seed: 1, fault });
  try {
    const lp = await startLogprobe({
      ...config,
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1, concurrency: 1, maxTokens: 24 },
    });
    try {
      let globalFiredAt: number | null = null;
      let sustainedFiredAt: number | null = null;
      for (let i = 0; i < n; i++) {
        await sendAlternating(lp.proxyUrl, `${E2E_PROMPTS[i % E2E_PROMPTS.length]} ${i}`, i, 24);
        await lp.runtime.mirror!.idle();
        const state = lp.runtime.mirror!.detectorState;
        if (globalFiredAt === null && state.global.phase === 'firing') globalFiredAt = i + 1;
        if (sustainedFiredAt === null && state.sustained.phase === 'firing') sustainedFiredAt = i + 1;
      }
      const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
      const verdicts = Object.fromEntries(
        VERDICTS.map((v) => [
          v,
          metricValue(metrics, 'logprobe_verdicts_total', { verdict: v, kind: 'pair' }) ?? 0,
        ]).filter(([, c]) => c !== 0),
      );
      return { verdicts, globalFiredAt, sustainedFiredAt, metrics };
    } finally {
      await lp.close();
    }
  } finally {
    await candidate.stop();
  }
}

/**
 * A prompt the two sides render differently (issue #36): llama.cpp engines (`logprobe engine
 * --llama`, real numerics, their own processes) as llama-server, the candidate started with
 * `--chat-template llama2` and the baseline with its model's own template — a serving template
 * that differs from the trusted one. Every chat pair is `prompt_mismatch` (not a shift), the
 * first differing prompt token of each side is named from the engines' /tokenize and
 * /detokenize, and LogprobPromptMismatch fires; with the same template on both sides, none.
 * The client is the official `openai` npm client.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { request } from 'undici';
import { spawnLlamaEngine } from '@logprobe/engine';
import { E2E_PROMPTS, llamaSkip } from './helpers/llama-e2e.js';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import type { AlertTransition } from '../src/core/detector.js';
import type { MirroredPair } from '../src/pair/types.js';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from './helpers/capture.js';
import { runCli } from './helpers/cli.js';

const N = 30;

async function run(t: { after(fn: () => unknown): void }, candidateTemplate: 'llama2' | undefined) {
  const [candidate, baseline] = await Promise.all([
    spawnLlamaEngine({
      seed: 1,
      api: 'llamacpp',
      ...(candidateTemplate ? { chatTemplate: candidateTemplate } : {}),
    }),
    spawnLlamaEngine({ seed: 1, api: 'llamacpp' }),
  ]);
  t.after(() => Promise.all([candidate.stop(), baseline.stop()]));
  const pairs: MirroredPair[] = [];
  const alerts: AlertTransition[] = [];
  const dir = tempDir(t);
  const lp = await startLogprobe(
    {
      capture: { enabled: true, dir },
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1, concurrency: 1, maxTokens: 12 },
      path: { rate: 0 },
      alert: { window: 20, minRequests: 10, fireFraction: 0.5, forSeconds: 0 },
    },
    { listeners: { onPair: (p) => pairs.push(p), onAlert: (a) => alerts.push(a) } },
  );
  t.after(() => lp.close());
  const client = new OpenAI({ baseURL: `${lp.proxyUrl}/v1`, apiKey: 'sk-test', maxRetries: 0 });
  for (let i = 0; i < N; i++) {
    const r = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: `${E2E_PROMPTS[i % E2E_PROMPTS.length]} ${i}` }],
      max_tokens: 12,
    });
    assert.ok(r.choices[0]?.message, 'the client got an answer');
    await lp.runtime.mirror!.idle();
  }
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  await lp.close();
  return { pairs, alerts, metrics, files: readdirSync(dir).map((f) => join(dir, f)) };
}

test(
  'llama-server with --chat-template llama2 against its default template: prompt_mismatch on the chat pairs, the first differing tokens named, LogprobPromptMismatch fires',
  { skip: llamaSkip },
  async (t) => {
    const r = await run(t, 'llama2');
    assert.equal(r.pairs.length, N, 'every client request mirrored');
    const mismatched = r.pairs.filter((p) => p.analysis?.verdict === 'prompt_mismatch');
    t.diagnostic(`${mismatched.length} of ${N} pairs prompt_mismatch`);
    assert.ok(mismatched.length >= 0.9 * N, `at least 90% prompt_mismatch (${mismatched.length} of ${N})`);
    // Nothing mismatched is scored (its prompts differ: teacher forcing would compare nothing).
    for (const p of mismatched) assert.notEqual(p.analysis!.scored?.outcome, 'ok');
    const m = mismatched[0]!.analysis!.promptMismatch!;
    assert.notEqual(m.candidateTokens, m.baselineTokens);
    assert.equal(typeof m.at, 'number', 'the first differing prompt position is named');
    assert.ok(m.candidate && m.baseline, "each side's token there");
    assert.notDeepEqual(m.candidate, m.baseline);
    assert.ok(typeof m.candidate.text === 'string' || typeof m.baseline.text === 'string', 'spelled by the engines');
    const explanation = mismatched[0]!.analysis!.explanation;
    assert.match(explanation, /first differ at prompt token \d+: the candidate read /);
    t.diagnostic(explanation);
    const fired = r.alerts.filter((a) => a.alert === 'LogprobPromptMismatch' && a.to === 'firing');
    assert.equal(fired.length, 1, 'LogprobPromptMismatch fired');
    assert.equal(fired[0]!.model, 'm');
    assert.deepEqual(
      r.alerts.filter((a) => a.alert === 'LogprobGlobalShift' || a.alert === 'LogprobSustainedShift'),
      [],
      'no shift alert: two prompts are not a shift',
    );
    assert.equal(metricValue(r.metrics, 'logprobe_alert_firing', { alert: 'LogprobPromptMismatch', model: 'm' }), 1);
    const counted = ['hit', 'miss', 'unknown']
      .map(
        (cache) =>
          metricValue(r.metrics, 'logprobe_verdicts_total', {
            route: '/v1/chat/completions',
            verdict: 'prompt_mismatch',
            kind: 'pair',
            model: 'm',
            cache,
          }) ?? 0,
      )
      .reduce((a, b) => a + b, 0);
    assert.equal(counted, mismatched.length, 'counted in logprobe_verdicts_total');
    // Offline: the capture keeps the verdict and where the prompts differ; analyze says both.
    const json = await runCli(['analyze', '--json', ...r.files], { timeoutMs: 60_000 });
    assert.equal(json.code, 0, json.stderr);
    const offline = json.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { verdict: string; promptMismatch?: { at?: number } });
    assert.equal(offline.filter((o) => o.verdict === 'prompt_mismatch').length, mismatched.length);
    assert.equal(offline[0]!.promptMismatch?.at, m.at);
    const text = await runCli(['analyze', ...r.files], { timeoutMs: 60_000 });
    assert.match(text.stdout, /prompt_mismatch/);
    assert.match(text.stdout, /first differ at prompt token \d+/);
  },
);

test('the same template on both sides: no prompt_mismatch, no alert', { skip: llamaSkip }, async (t) => {
  const r = await run(t, undefined);
  assert.equal(r.pairs.length, N);
  assert.equal(r.pairs.filter((p) => p.analysis?.verdict === 'prompt_mismatch').length, 0);
  assert.ok(
    r.pairs.every((p) => p.analysis !== null),
    'every pair compared',
  );
  assert.deepEqual(
    r.alerts.filter((a) => a.alert === 'LogprobPromptMismatch'),
    [],
  );
});

/**
 * Two clean llama.cpp engines, each `logprobe engine --llama` in its own process (threads 1),
 * behind logprobe: real numerics are deterministic across processes, so every mirrored pair is
 * `identical` and nothing alerts. Needs the built CLI (`npm test` builds first).
 */
import assert from 'node:assert/strict';
import { llamaSkip } from './helpers/llama-e2e.js';
import { test } from 'node:test';
import { request } from 'undici';
import { spawnLlamaEngine } from '@logprobe/engine';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';

const skip = llamaSkip;

test(
  'two clean llama.cpp engines in separate processes: every mirrored pair is identical, no alert',
  { skip },
  async (t) => {
    const [baseline, candidate] = await Promise.all([spawnLlamaEngine({ seed: 1 }), spawnLlamaEngine({ seed: 1 })]);
    t.after(() => Promise.all([baseline.stop(), candidate.stop()]));
    assert.notEqual(baseline.pid, candidate.pid);
    const lp = await startLogprobe({
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1, concurrency: 1, maxTokens: 24 },
      alert: { window: 20, minRequests: 10, forSeconds: 0 },
    });
    t.after(() => lp.close());
    const prompts = [
      'The quick brown fox',
      'Once upon a time, in a small village by the sea,',
      'def fibonacci(n):',
      'Artificial intelligence is',
    ];
    for (let i = 0; i < 20; i++) {
      const chat = i % 2 === 0;
      const prompt = `${prompts[i % prompts.length]} ${i}`;
      const res = await request(`${lp.proxyUrl}${chat ? '/v1/chat/completions' : '/v1/completions'}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        // The client samples; the mirrored copy is greedy with logprobs.
        body: JSON.stringify(
          chat
            ? {
                model: 'm',
                messages: [{ role: 'user', content: prompt }],
                max_tokens: 24,
                temperature: 0.8,
                stream: i % 4 === 0,
              }
            : { model: 'm', prompt, max_tokens: 24, temperature: 0.7 },
        ),
      });
      assert.equal(res.statusCode, 200);
      await res.body.dump();
    }
    await lp.runtime.mirror!.idle();
    const m = await (await request(`${lp.adminUrl}/metrics`)).body.text();
    assert.equal(metricValue(m, 'logprobe_mirror_total', { outcome: 'ok' }), 20);
    assert.equal(metricValue(m, 'logprobe_verdicts_total', { verdict: 'identical' }), 20, 'every pair bitwise equal');
    assert.equal(metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }), 0);
    assert.equal(metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobSustainedShift' }), 0);
    assert.equal(metricValue(m, 'logprobe_window_global_shift_ratio'), 0);
    assert.equal(metricValue(m, 'logprobe_cusum_statistic'), 0);
  },
);

import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import type { BackendResult } from '../../src/backend/dispatch.js';
import type { MirroredPair } from '../../src/pair/types.js';
import { compare, DEFAULT_THRESHOLDS } from '../../src/core/index.js';

/** A fresh temporary directory, removed after the test. */
export function tempDir(t: { after(fn: () => void): void }, prefix = 'logprobe-capture-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Every line of every capture file in `dir` (gzip or plain), in file-name order. */
export function captureLines(dir: string): string[] {
  const lines: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const raw = readFileSync(join(dir, name));
    const text = (name.endsWith('.gz') ? gunzipSync(raw) : raw).toString('utf8');
    for (const l of text.split('\n')) if (l !== '') lines.push(l);
  }
  return lines;
}

/** Every byte of every file in `dir`, decompressed, as one string (for "the secret is nowhere"). */
export function allText(dir: string): string {
  return readdirSync(dir)
    .sort()
    .map((name) => {
      const raw = readFileSync(join(dir, name));
      return (name.endsWith('.gz') ? gunzipSync(raw) : raw).toString('utf8');
    })
    .join('\n');
}

/** A chat completion body with logprobs for the given tokens (top-2 per step). */
export function chatBody(tokens: Array<[string, number]>): Record<string, unknown> {
  return {
    object: 'chat.completion',
    model: 'sim-model',
    system_fingerprint: 'fp_test',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: tokens.map(([t]) => t).join('') },
        logprobs: {
          content: tokens.map(([token, logprob]) => ({
            token,
            logprob,
            bytes: null,
            top_logprobs: [
              { token, logprob, bytes: null },
              { token: ' x', logprob: logprob - 2, bytes: null },
            ],
          })),
        },
        finish_reason: 'length',
      },
    ],
  };
}

function result(body: unknown): BackendResult {
  return { status: 200, latencyMs: 12.345, body, serverHeaders: { server: 'sim/1.0' }, error: null };
}

/** A realistic mirrored pair (a chat request, both sides answering with logprobs), `shift` nats apart. */
export function makePair(
  i: number,
  options: { shift?: number; headers?: Record<string, string>; request?: Record<string, unknown> } = {},
): MirroredPair {
  const base: Array<[string, number]> = [' The', ' sky', ' is', ' blue', '.'].map((t, k) => [t, -0.1 - 0.05 * k]);
  const cand: Array<[string, number]> = base.map(([t, lp]) => [t, lp - (options.shift ?? 0)]);
  const candidate = chatBody(cand);
  const baseline = chatBody(base);
  const analysis = compare(candidate, baseline, DEFAULT_THRESHOLDS);
  return {
    id: `req-${i}`,
    ts: new Date(Date.UTC(2026, 10, 29, 7, 0, i)).toISOString(),
    route: '/v1/chat/completions',
    path: '/v1/chat/completions',
    request: options.request ?? {
      model: 'm',
      messages: [{ role: 'user', content: `question ${i}` }],
      temperature: 0,
      logprobs: true,
      top_logprobs: 2,
      max_tokens: 5,
    },
    clientHeaders: { 'user-agent': 'test/1', 'content-type': 'application/json', ...(options.headers ?? {}) },
    candidate: result(candidate),
    baseline: result(baseline),
    outcome: 'ok',
    analysis,
    noiseFloor: DEFAULT_THRESHOLDS.noiseFloor,
  };
}

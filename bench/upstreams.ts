import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { start, type Proc } from './lib/proc.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The client workload: a short chat completion, and the same as a stream. */
export const MAX_TOKENS = 8;
export function chatBody(stream: boolean, paced = false): string {
  return JSON.stringify({
    model: 'bench',
    messages: [{ role: 'user', content: 'Write one short sentence about proxies.' }],
    max_tokens: MAX_TOKENS,
    ...(stream ? { stream: true } : {}),
    // The fixed upstream spaces SSE events out for this user only (the inter-chunk figure).
    ...(paced ? { user: 'bench-paced' } : {}),
  });
}

export interface Upstream {
  url: string;
  proc: Proc;
}

/** `logprobe engine --sim` on a free port, unlimited concurrency; `extra`: more engine flags. */
export async function startSim(name: string, seed: number, extra: string[] = []): Promise<Upstream> {
  const { proc, match } = await start({
    name,
    cmd: 'node',
    args: ['bin/logprobe.js', 'engine', '--sim', '--port', '0', '--seed', String(seed), ...extra],
    cwd: ROOT,
    ready: /listening on (http:\/\/\S+)/,
  });
  return { url: match[1] as string, proc };
}

/**
 * Captures one JSON and one SSE answer of the simulated engine, with logprobs, so the fixed
 * upstream serves real engine bytes that the mirror can parse and compare.
 */
export async function captureResponses(simUrl: string, outDir: string): Promise<{ json: string; sse: string }> {
  const ask = async (stream: boolean): Promise<string> => {
    const body = {
      ...(JSON.parse(chatBody(stream)) as Record<string, unknown>),
      logprobs: true,
      top_logprobs: 5,
      temperature: 0,
      seed: 1234,
    };
    const res = await fetch(`${simUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    if (!res.ok) throw new Error(`sim engine answered ${res.status}`);
    return res.text();
  };
  const json = join(outDir, 'canned.json');
  const sse = join(outDir, 'canned.sse');
  writeFileSync(json, await ask(false));
  writeFileSync(sse, await ask(true));
  return { json, sse };
}

/** bench/upstream.ts: the fixed-response upstream, SSE events 2 ms apart for paced requests. */
export async function startFixed(name: string, canned: { json: string; sse: string }): Promise<Upstream> {
  const { proc, match } = await start({
    name,
    cmd: 'node',
    args: ['--import', 'tsx', 'bench/upstream.ts', '--json', canned.json, '--sse', canned.sse, '--gap-ms', '2'],
    cwd: ROOT,
    ready: /listening on (http:\/\/\S+)/,
  });
  return { url: match[1] as string, proc };
}

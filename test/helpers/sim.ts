import { request } from 'undici';
import { startEngineServer, type EngineServerHandle } from '@logprobe/engine';
import { createSimModel, type SimOptions } from '@logprobe/engine';

/**
 * Starts a simulated engine on port 0 (unlimited concurrency: it is cheap and synchronous).
 * `requestSeedBase` fixes the per-request seeds (random by default), so a noisy engine's draws
 * repeat run to run when its requests arrive in one order.
 */
export function startSim(
  options: SimOptions & { faults?: string | string[]; requestSeedBase?: number } = {},
): Promise<EngineServerHandle> {
  const { faults, requestSeedBase, ...sim } = options;
  return startEngineServer({
    model: createSimModel({ seed: 11, ...sim }),
    concurrency: 0,
    faults,
    ...(requestSeedBase !== undefined ? { requestSeedBase } : {}),
  });
}

/** Reads one metric sample from a Prometheus text exposition; undefined when absent. */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  let total: number | undefined;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got: Record<string, string> = {};
    for (const part of (m[3] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) got[part[1]!] = part[2]!;
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) total = (total ?? 0) + Number(m[4]);
  }
  return total;
}

/**
 * One non-streaming client request through a proxy: chat for even `i`, completions for odd `i`,
 * 24 tokens. Returns the status once the body has been read.
 */
export async function sendChatOrCompletion(
  proxyUrl: string,
  i: number,
  prompts: { chat: string; completion: string },
): Promise<number> {
  const chat = i % 2 === 0;
  const body = chat
    ? { model: 'sim', messages: [{ role: 'user', content: prompts.chat }], max_tokens: 24 }
    : { model: 'sim', prompt: prompts.completion, max_tokens: 24 };
  const res = await request(`${proxyUrl}${chat ? '/v1/chat/completions' : '/v1/completions'}`, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' },
  });
  await res.body.text();
  return res.statusCode;
}

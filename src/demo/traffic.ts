import { request } from 'undici';

/** A few prompts in the shape real clients send (any text suits the byte-level llama.cpp model too). */
export const DEMO_PROMPTS: readonly string[] = [
  'Explain why the sky is blue in two sentences.',
  'Write a haiku about a server that never sleeps.',
  'The capital of France is',
  'List three uses of a key-value cache in a transformer.',
  'Artificial intelligence is',
  'Translate to German: the model output is almost the same.',
  'Once upon a time, in a data center far away,',
  'Summarise the difference between prefill and decode.',
  'def fibonacci(n):',
  'The quick brown fox',
  'Why do floating point sums depend on the order of addition?',
  'Give me a name for a cat that likes GPUs.',
];

/** Options of {@link runTraffic}. */
export interface TrafficOptions {
  proxyUrl: string;
  /** Requests per second. */
  rate: number;
  /** Stops when this resolves or after `maxRequests`. */
  signal: AbortSignal;
  maxRequests?: number;
  model?: string;
  /** `max_tokens` of each request. Default 48. */
  maxTokens?: number;
  onResponse?: (info: { index: number; status: number; stream: boolean; route: string; error?: string }) => void;
}

/**
 * A client that behaves like a user's: non-greedy sampling, a mix of routes, some streams. It is
 * the proxy's client path; the mirror copies these requests behind its back.
 */
export async function runTraffic(options: TrafficOptions): Promise<number> {
  let sent = 0;
  const inflight = new Set<Promise<void>>();
  const interval = 1000 / options.rate;
  const maxTokens = options.maxTokens ?? 48;
  while (!options.signal.aborted && (options.maxRequests === undefined || sent < options.maxRequests)) {
    const index = sent++;
    const prompt = DEMO_PROMPTS[index % DEMO_PROMPTS.length] as string;
    const chat = index % 2 === 0;
    const stream = index % 3 === 0;
    const route = chat ? '/v1/chat/completions' : '/v1/completions';
    const body = chat
      ? {
          model: options.model ?? 'demo',
          messages: [{ role: 'user', content: prompt }],
          temperature: 0.8,
          top_p: 0.95,
          max_tokens: maxTokens,
          stream,
        }
      : { model: options.model ?? 'demo', prompt, temperature: 0.7, max_tokens: maxTokens, stream };
    const p = (async () => {
      try {
        const res = await request(options.proxyUrl + route, {
          method: 'POST',
          body: JSON.stringify(body),
          headers: { 'content-type': 'application/json', authorization: 'Bearer sk-demo-client-key' },
        });
        await res.body.dump();
        options.onResponse?.({ index, status: res.statusCode, stream, route });
      } catch (err) {
        options.onResponse?.({ index, status: 0, stream, route, error: (err as Error).message });
      }
    })();
    inflight.add(p);
    void p.finally(() => inflight.delete(p));
    await new Promise<void>((resolve) => {
      const onAbort = (): void => {
        clearTimeout(t);
        resolve();
      };
      const t = setTimeout(() => {
        options.signal.removeEventListener('abort', onAbort);
        resolve();
      }, interval);
      options.signal.addEventListener('abort', onAbort, { once: true });
    });
  }
  await Promise.all(inflight);
  return sent;
}

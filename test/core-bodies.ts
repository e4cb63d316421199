/**
 * Builders for response bodies in every wire format, used by the core and CLI tests. A step is
 * given as `[token, logprob, top]` with `top` as `[token, logprob]` pairs (in the order the server
 * would send them).
 */
export type Pair = [string, number | null];
export type Spec = { token: string; logprob: number | null; top: Pair[]; id?: number; topIds?: number[] };

/** OpenAI chat, non-streaming. */
export function chatBody(steps: Spec[], opts: { model?: string; content?: string } = {}): Record<string, unknown> {
  return {
    id: 'chatcmpl-test',
    object: 'chat.completion',
    created: 1,
    model: opts.model ?? 'test-model',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: opts.content ?? steps.map((s) => s.token).join('') },
        logprobs: { content: steps.map(chatItem), refusal: null },
        finish_reason: 'length',
      },
    ],
  };
}

function chatItem(s: Spec): Record<string, unknown> {
  const item: Record<string, unknown> = {
    token: s.token,
    logprob: s.logprob,
    bytes: [...Buffer.from(s.token, 'utf8')],
    top_logprobs: s.top.map(([token, logprob], j) => {
      const e: Record<string, unknown> = { token, logprob, bytes: [...Buffer.from(token, 'utf8')] };
      if (s.topIds) e.id = s.topIds[j];
      return e;
    }),
  };
  if (s.id !== undefined) item.id = s.id;
  return item;
}

/** OpenAI/vLLM legacy completions, non-streaming (top lists as dicts in the given order). */
export function completionsBody(
  steps: Spec[],
  textOffset: 'cumulative' | 'sglang' = 'cumulative',
): Record<string, unknown> {
  let offset = 0;
  const offsets = steps.map((s) => {
    const o = textOffset === 'sglang' ? -1 : offset;
    offset += s.token.length;
    return o;
  });
  return {
    id: 'cmpl-test',
    object: 'text_completion',
    created: 1,
    model: 'test-model',
    choices: [
      {
        index: 0,
        text: steps.map((s) => s.token).join(''),
        logprobs: {
          tokens: steps.map((s) => s.token),
          token_logprobs: steps.map((s) => s.logprob),
          top_logprobs: steps.map((s) => Object.fromEntries(s.top)),
          text_offset: offsets,
        },
        finish_reason: 'length',
      },
    ],
  };
}

/** llama.cpp's `/v1/completions`: chat-shaped items with ids on the completions route. */
export function llamaCompletionsBody(steps: Spec[]): Record<string, unknown> {
  return {
    id: 'cmpl-llama',
    object: 'text_completion',
    created: 1,
    model: 'gguf',
    choices: [
      {
        index: 0,
        text: steps.map((s) => s.token).join(''),
        logprobs: { content: steps.map(chatItem) },
        finish_reason: 'length',
      },
    ],
  };
}

/** SGLang native `/generate` with `[logprob, id, text]` tuples. */
export function sglangNativeBody(steps: Spec[], withText = true): Record<string, unknown> {
  return {
    text: steps.map((s) => s.token).join(''),
    meta_info: {
      id: 'x',
      finish_reason: { type: 'length', length: steps.length },
      output_token_logprobs: steps.map((s) => [s.logprob, s.id ?? 0, withText ? s.token : null]),
      output_top_logprobs: steps.map((s) => s.top.map(([t, lp], j) => [lp, s.topIds?.[j] ?? 0, withText ? t : null])),
    },
  };
}

/** An SSE stream from chunk objects, optionally with `[DONE]` and CRLF line ends. */
export function sse(chunks: unknown[], opts: { done?: boolean; crlf?: boolean } = {}): string {
  const nl = opts.crlf ? '\r\n' : '\n';
  const events = chunks.map((c) => `data: ${JSON.stringify(c)}${nl}${nl}`);
  if (opts.done !== false) events.push(`data: [DONE]${nl}${nl}`);
  return events.join('');
}

/** An OpenAI chat stream: an empty first chunk, one chunk per token, a finish chunk, a usage chunk. */
export function chatStream(steps: Spec[]): string {
  const head = { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'test-model' };
  const chunks: unknown[] = [
    {
      ...head,
      choices: [
        {
          index: 0,
          delta: { role: 'assistant', content: '' },
          logprobs: { content: [], refusal: null },
          finish_reason: null,
        },
      ],
    },
    ...steps.map((s) => ({
      ...head,
      choices: [
        {
          index: 0,
          delta: { content: s.token },
          logprobs: { content: [chatItem(s)], refusal: null },
          finish_reason: null,
        },
      ],
    })),
    { ...head, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'length' }] },
    {
      ...head,
      choices: [],
      usage: { prompt_tokens: 3, completion_tokens: steps.length, total_tokens: 3 + steps.length },
    },
  ];
  return sse(chunks);
}

/** A legacy completions stream: one chunk per token, then a trailing chunk with empty arrays. */
export function completionsStream(steps: Spec[], perChunk = 1): string {
  const head = { id: 'cmpl', object: 'text_completion', created: 1, model: 'test-model' };
  const chunks: unknown[] = [];
  for (let i = 0; i < steps.length; i += perChunk) {
    const part = steps.slice(i, i + perChunk);
    chunks.push({
      ...head,
      choices: [
        {
          index: 0,
          text: part.map((s) => s.token).join(''),
          logprobs: {
            tokens: part.map((s) => s.token),
            token_logprobs: part.map((s) => s.logprob),
            top_logprobs: part.map((s) => Object.fromEntries(s.top)),
            text_offset: part.map(() => 0),
          },
          finish_reason: null,
        },
      ],
    });
  }
  chunks.push({
    ...head,
    choices: [
      {
        index: 0,
        text: '',
        logprobs: { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] },
        finish_reason: 'length',
      },
    ],
  });
  return sse(chunks);
}

/** A step whose top list is the chosen token plus alternatives. */
export function step(token: string, logprob: number | null, alternatives: Pair[] = []): Spec {
  return { token, logprob, top: [[token, logprob], ...alternatives] };
}

/**
 * The worked example: ten positions; positions 0..4 keep the same tokens with candidate −
 * baseline differences −0.20, +0.28, −0.36, +0.51, −0.15; at position 5 the baseline prefers
 * " Artificial" over " artificial" by 0.45 and the candidate picks " artificial"; after that the
 * texts go their own ways.
 */
export function workedExample(): { candidate: Spec[]; baseline: Spec[] } {
  const words = [' The', ' field', ' is', ' called', ' the'];
  const base = [-0.9, -1.1, -0.4, -1.3, -0.6];
  const diffs = [-0.2, 0.28, -0.36, 0.51, -0.15];
  const baseline: Spec[] = words.map((w, i) =>
    step(w, base[i]!, [
      [' a', -2.5],
      [' an', -3.1],
    ]),
  );
  const candidate: Spec[] = words.map((w, i) =>
    step(w, base[i]! + diffs[i]!, [
      [' a', -2.5 + diffs[i]! / 2],
      [' an', -3.1],
    ]),
  );
  baseline.push(
    step(' Artificial', -0.52, [
      [' artificial', -0.97],
      [' AI', -3.0],
    ]),
  );
  candidate.push(
    step(' artificial', -0.6, [
      [' Artificial', -0.83],
      [' AI', -3.1],
    ]),
  );
  for (const w of [' Intelligence', ' research', ' lab', ' .']) baseline.push(step(w, -0.3, [[' x', -4]]));
  for (const w of [' intelligence', ' is', ' a', ' field']) candidate.push(step(w, -0.35, [[' y', -4]]));
  return { candidate, baseline };
}

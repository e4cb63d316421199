import { readJsonLines } from '../capture/reader.js';
import { requestKind, rewriteForMirror, type RewriteOptions } from '../backend/rewrite.js';
import { noInput } from '../errors/index.js';
import type { PairCopy } from '../pair/pipeline.js';

/**
 * One canary probe: a request logprobe sends on its own, with no client behind it. A probe file
 * is JSON lines of `{"route", "body", "id"?, "gap"?, "model"?}` — the prompt-set line of `replay`
 * and `record` (src/replay/input.ts), so the same file records a reference golden file with
 * `logprobe record PROBES --backend TRUSTED`. `gap` is the trusted side's top-1/top-2 gap at the
 * first generated token when `canary build` measured it (a border input has a small one). The
 * body's `max_tokens` is the probe's length (at most `canary.maxTokens`, which a body naming none
 * gets): 1 for a first-token probe, more for a decode probe ({@link isDecodeProbe}).
 */
export interface CanaryProbe {
  id: string;
  route: '/v1/completions' | '/v1/chat/completions';
  /** The request before the canary's rewrite: `prompt` (completions) or `messages` (chat), and any other field. */
  body: Record<string, unknown>;
  /** The trusted side's top-1/top-2 gap at the first token, nats (null: not measured). */
  gap: number | null;
  /** The model it was built for; absent: whichever model the canary probes. */
  model?: string;
}

/**
 * The built-in probe set, for `canary: {enabled: true}` with no file: prompts whose next token is
 * a near-tie on most instruction-tuned models (a pick among equals, a coin, a number, a colour):
 * border inputs in the sense of B3IT (arXiv 2602.11083), where any change of the logits moves
 * the top-2 gap and can flip the argmax. `canary build` measures and ranks them for one server.
 *
 * Two lengths, as `canary build` writes them: first-token probes ask one token (`max_tokens: 1`:
 * the border input's whole worth, at the least cost); decode probes name no length and generate
 * `canary.maxTokens`, because a bug of the decode steps alone (a KV cell lost after the prompt,
 * bench `decode-state:0`) leaves the first token — computed by the prefill — clean. The decode
 * probes sit among the others, the first second in line, so a short run sees both.
 */
export const DEFAULT_PROBES: readonly CanaryProbe[] = [
  completion('pick-number', 'I am thinking of a number between 1 and 10. The number is', 1),
  completion('coin', 'I flipped a coin and it landed on', null),
  completion('colour', 'My favourite colour is', 1),
  completion('letter', 'A random letter of the alphabet:', 1),
  completion('weekday', 'The best day of the week is', 1),
  chat('chat-number', 'Pick a number from 1 to 5. Reply with the number only.', 1),
  completion('fruit', 'The fruit I like most is the', null),
  completion('yes-no', 'Question: Is it going to rain tomorrow? Answer (yes or no):', 1),
  completion('animal', 'If I could be any animal, I would be a', 1),
  chat('chat-word', 'Say one English word, any word. Reply with the word only.', 1),
  chat('chat-side', 'Heads or tails? Reply with one word.', 1),
  chat('chat-city', 'Name a city in Europe. Reply with the name only.', null),
];

/**
 * A probe body at `maxTokens` tokens (`max_tokens`; any `max_completion_tokens` dropped), or naming
 * no length (null: `canary.maxTokens` applies — a decode probe).
 */
export function withLength(body: Readonly<Record<string, unknown>>, maxTokens: number | null): Record<string, unknown> {
  const { max_tokens: _t, max_completion_tokens: _c, ...rest } = body;
  return maxTokens === null ? rest : { ...rest, max_tokens: maxTokens };
}

function completion(id: string, prompt: string, maxTokens: 1 | null): CanaryProbe {
  return { id, route: '/v1/completions', body: withLength({ prompt }, maxTokens), gap: null };
}

function chat(id: string, content: string, maxTokens: 1 | null): CanaryProbe {
  return {
    id,
    route: '/v1/chat/completions',
    body: withLength({ messages: [{ role: 'user', content }] }, maxTokens),
    gap: null,
  };
}

/** A decode probe: its body names no length above one token, so it generates `canary.maxTokens` (a first-token probe asks 1). */
export function isDecodeProbe(p: CanaryProbe): boolean {
  const v = p.body.max_tokens ?? p.body.max_completion_tokens;
  return typeof v !== 'number' || v > 1;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** One probe-file line as a probe, or why it is not one (the reason names the field). */
export function parseProbe(value: unknown, fallbackId: string): CanaryProbe | { error: string } {
  if (!isObject(value)) return { error: 'not a probe (a JSON object with "route" and "body")' };
  const route = value.route;
  if (route !== '/v1/completions' && route !== '/v1/chat/completions')
    return { error: `"route": expected /v1/completions or /v1/chat/completions, got ${JSON.stringify(route)}` };
  let body: Record<string, unknown>;
  if (value.body !== undefined) {
    if (!isObject(value.body)) return { error: '"body": expected a JSON object' };
    body = value.body;
  } else {
    const { route: _r, id: _i, gap: _g, model: _m, ...rest } = value;
    body = rest;
  }
  if (requestKind(route) === 'chat' && !Array.isArray(body.messages))
    return { error: '"body.messages": a chat probe needs a list of messages' };
  if (requestKind(route) === 'completions' && typeof body.prompt !== 'string' && !Array.isArray(body.prompt))
    return { error: '"body.prompt": a completions probe needs a prompt (text or token ids)' };
  if (value.gap !== undefined && value.gap !== null && (typeof value.gap !== 'number' || !(value.gap >= 0)))
    return { error: '"gap": expected a number ≥ 0 or null' };
  if (value.model !== undefined && typeof value.model !== 'string') return { error: '"model": expected a string' };
  if (value.id !== undefined && typeof value.id !== 'string') return { error: '"id": expected a string' };
  return {
    id: typeof value.id === 'string' ? value.id : fallbackId,
    route,
    body,
    gap: typeof value.gap === 'number' ? value.gap : null,
    ...(typeof value.model === 'string' ? { model: value.model } : {}),
  };
}

/**
 * The probes of a probe file (JSON lines, plain or gzip), or the built-in set for `null`. A bad
 * line is an error naming `FILE:LINE` and the field (a probe set is small and deliberate: a
 * silently skipped probe would weaken the check without a word).
 */
export async function loadProbes(file: string | null): Promise<CanaryProbe[]> {
  if (file === null) return [...DEFAULT_PROBES];
  const out: CanaryProbe[] = [];
  for await (const line of readJsonLines(file)) {
    if (line.error !== undefined) throw noInput(`${line.file}:${line.line}: ${line.error}`);
    const p = parseProbe(line.value, `${line.line}`);
    if ('error' in p) throw noInput(`${line.file}:${line.line}: ${p.error}`);
    out.push(p);
  }
  if (out.length === 0) throw noInput(`${file}: no probes`);
  return out;
}

/** What a canary copy is rewritten with: the mirror's rewrite at the canary's length and width. */
export interface CanaryCopyOptions extends RewriteOptions {
  /** The model to name in the copy (the probe's own wins); null: as the probe says, or none. */
  model: string | null;
}

/**
 * A probe as the copy the pair pipeline sends: greedy, top-`topLogprobs` logprobs, as long as its
 * body's `max_tokens` asks, at most `maxTokens` (`canary.maxTokens`; a body that names none gets it).
 */
export function probeCopy(p: CanaryProbe, o: CanaryCopyOptions): PairCopy {
  const kind = p.route === '/v1/chat/completions' ? 'chat' : 'completions';
  const model = p.model ?? o.model;
  const raw = { ...p.body, ...(model !== null && p.body.model === undefined ? { model } : {}) };
  return { path: p.route, kind, body: rewriteForMirror(kind, raw, o), clientHeaders: {}, secrets: [] };
}

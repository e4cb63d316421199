import type { ParsedResponse } from '../types.js';
import { assemble } from './assemble.js';
import { isObject } from './values.js';
import { parseJson } from './json.js';
import { jsonLines, looksLikeSse, sseChunks } from './sse.js';

const decoder = new TextDecoder('utf-8');

/**
 * Parses a response body into token steps. Never throws.
 *
 * Accepts an already-parsed JSON value (a body, or an array of stream chunks), a string or
 * `Uint8Array` holding JSON, an SSE stream (`data: …` events, `[DONE]`) or JSON lines. Recognises
 * OpenAI/vLLM/SGLang completions and chat (streamed or not), llama.cpp's chat-shaped logprobs on
 * its completions route and its native `completion_probabilities`, and SGLang's native
 * `meta_info` tuples.
 *
 * A body that cannot be used yields `steps: []` and an `error` saying why; `format` tells a
 * non-response (`unknown`) and an error envelope (`error`) from a response without logprobs.
 */
export function parseResponse(body: unknown): ParsedResponse {
  try {
    return parseUnsafe(body);
  } catch (err) {
    // Only hostile inputs get here (getters that throw, cyclic objects): still an answer.
    return failed(`unreadable body (${err instanceof Error ? err.message : String(err)})`);
  }
}

function parseUnsafe(body: unknown): ParsedResponse {
  if (body instanceof Uint8Array) return parseText(decoder.decode(body));
  if (typeof body === 'string') return parseText(body);
  return parseValue(body, false);
}

function parseText(text: string): ParsedResponse {
  if (text.trim() === '') return failed('empty body');
  if (looksLikeSse(text)) {
    const list = sseChunks(text);
    if (list.chunks.length === 0)
      return failed(list.bad > 0 ? 'SSE stream without JSON events' : 'SSE stream without events');
    return assemble(list.chunks, true);
  }
  let value: unknown;
  try {
    value = parseJson(text);
  } catch (err) {
    const lines = jsonLines(text);
    if (lines) return assemble(lines.chunks, true);
    // One line: JSON.parse quotes the offending text, which may hold newlines.
    const reason = err instanceof Error ? err.message.replace(/\s+/g, ' ').slice(0, 120) : 'invalid JSON';
    return failed(`neither JSON nor an SSE stream (${reason})`);
  }
  return parseValue(value, false);
}

function parseValue(value: unknown, stream: boolean): ParsedResponse {
  if (Array.isArray(value)) {
    if (value.length === 0 || !value.every(isObject)) return failed('a JSON array that is not a list of stream chunks');
    return assemble(value, true);
  }
  if (!isObject(value)) return failed(`not a completion response (a JSON ${value === null ? 'null' : typeof value})`);
  return assemble([value], stream);
}

function failed(error: string): ParsedResponse {
  return { format: 'unknown', stream: false, steps: [], text: '', flags: [], error };
}

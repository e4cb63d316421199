import { createParser } from 'eventsource-parser';
import { parseJson } from './json.js';

/** What an SSE body or a file of JSON lines held. */
export interface ChunkList {
  /** The parsed JSON payloads, in order. */
  chunks: unknown[];
  /** Whether `data: [DONE]` was seen. */
  done: boolean;
  /** Payloads that were not JSON (counted, skipped). */
  bad: number;
}

const SSE_FIELD = /^(data|event|id|retry):|^:/;

/**
 * True when the text's first non-empty line is an SSE field (`data:`, `event:`, `id:`, `retry:`)
 * or comment (`:`), i.e. a saved event stream rather than a JSON document.
 */
export function looksLikeSse(text: string): boolean {
  let i = 0;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 10 || c === 13 || c === 32 || c === 9 || c === 0xfeff) i++;
    else break;
  }
  return SSE_FIELD.test(text.slice(i, i + 8));
}

/**
 * Splits a saved SSE stream into its JSON payloads with eventsource-parser (CRLF, multi-line
 * `data:`, comments and a missing final blank line all handled there). `[DONE]` ends the list.
 */
export function sseChunks(text: string): ChunkList {
  const out: ChunkList = { chunks: [], done: false, bad: 0 };
  const parser = createParser({
    onEvent: (ev) => {
      if (out.done) return;
      const data = ev.data.trim();
      if (data === '[DONE]') {
        out.done = true;
        return;
      }
      if (data === '') return;
      try {
        out.chunks.push(parseJson(data));
      } catch {
        out.bad++;
      }
    },
  });
  parser.feed(text);
  // A stream saved without its final blank line still ends its last event.
  parser.feed('\n\n');
  return out;
}

/**
 * Parses newline-delimited JSON (chunks saved one per line). Returns `null` unless every
 * non-empty line is JSON and there are at least two of them.
 */
export function jsonLines(text: string): ChunkList | null {
  const lines = text.split(/\r?\n/).filter((l) => l.trim() !== '');
  if (lines.length < 2) return null;
  const chunks: unknown[] = [];
  for (const line of lines) {
    try {
      chunks.push(parseJson(line));
    } catch {
      return null;
    }
  }
  return { chunks, done: false, bad: 0 };
}

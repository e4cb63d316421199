/**
 * Helpers for the engine-sim tests: a simulated engine server closed after the test, and plain
 * HTTP calls returning the raw text (the tests look at bytes, not at a client's reading of them).
 */
import type { TestContext } from 'node:test';
import { startEngineServer, type EngineServerHandle, type EngineServerOptions } from '../../src/openai-server.js';
import { createSimModel, type SimOptions } from '../../src/sim/model.js';

/** Starts a sim engine on port 0, closed in `t.after`. */
export async function startSim(
  t: TestContext,
  sim: SimOptions = {},
  server: Omit<EngineServerOptions, 'model'> = {},
): Promise<EngineServerHandle> {
  const handle = await startEngineServer({ model: createSimModel(sim), ...server });
  t.after(() => handle.close());
  return handle;
}

/** A response as text, with its parsed JSON when it is JSON. */
export interface RawResponse {
  status: number;
  contentType: string | null;
  text: string;
  json: any;
}

/** POSTs a JSON body. */
export async function post(base: string, path: string, body: unknown): Promise<RawResponse> {
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: unknown = undefined;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON: a stream, or a garbage fault
  }
  return { status: res.status, contentType: res.headers.get('content-type'), text, json };
}

/** The `data:` payloads of an SSE body, in order (`[DONE]` included, as a string). */
export function sseData(text: string): string[] {
  return text
    .split('\n\n')
    .filter((e) => e.trim() !== '')
    .map((e) => {
      const line = e.split('\n').find((l) => l.startsWith('data: '));
      if (!line) throw new Error(`an SSE event without data: ${JSON.stringify(e)}`);
      return line.slice('data: '.length);
    });
}

/** POSTs a streaming request and returns the parsed chunks (without `[DONE]`) and the raw text. */
export async function postStream(
  base: string,
  path: string,
  body: Record<string, unknown>,
): Promise<{ status: number; contentType: string | null; text: string; chunks: any[] }> {
  const res = await post(base, path, { ...body, stream: true });
  const data = sseData(res.text);
  const done = data.at(-1) === '[DONE]';
  return {
    status: res.status,
    contentType: res.contentType,
    text: res.text,
    chunks: (done ? data.slice(0, -1) : data).map((d) => JSON.parse(d)),
  };
}

/**
 * The key structure of a JSON value: object keys in order with their structures, arrays as the
 * structure of their first element, and every primitive (null included) as '*' — what "the same
 * shape" means when values differ.
 */
export function shape(v: unknown): unknown {
  if (Array.isArray(v)) return v.length === 0 ? '[]' : [shape(v[0])];
  if (v !== null && typeof v === 'object') return Object.entries(v).map(([k, x]) => [k, shape(x)]);
  return '*';
}

/** Greedy completions body for a prompt. */
export function greedyCompletion(prompt: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'sim', prompt, max_tokens: 24, temperature: 0, logprobs: 5, ...extra };
}

/**
 * The completions `top_logprobs` dicts of a raw chunk or body, as ordered [key, logprob] lists.
 * Read from the text because JSON.parse moves integer-like keys ("1", "42") to the front.
 */
export function rawTopDicts(raw: string): Array<Array<[string, number]>> {
  const list = raw.match(/"top_logprobs":\[(.*?)\],"text_offset"/)?.[1];
  if (list === undefined) throw new Error('no completions top_logprobs in the body');
  return [...list.matchAll(/\{(.*?)\}(?=,\{|$)/g)].map((m) =>
    [...(m[1] ?? '').matchAll(/("(?:[^"\\]|\\.)*"):(-?[0-9.eE+-]+)/g)].map((e): [string, number] => [
      JSON.parse(e[1] as string) as string,
      Number(e[2]),
    ]),
  );
}

/**
 * Like `shape`, but primitives become their JSON type ('number', 'string', 'boolean', 'null'):
 * "the same fields with the same types", for comparing with a recorded body.
 */
export function typedShape(v: unknown): unknown {
  if (Array.isArray(v)) return v.length === 0 ? '[]' : [typedShape(v[0])];
  if (v !== null && typeof v === 'object') return Object.entries(v).map(([k, x]) => [k, typedShape(x)]);
  return v === null ? 'null' : typeof v;
}

/** GETs a path; the response as text and JSON, with its headers. */
export async function get(base: string, path: string, method = 'GET'): Promise<RawResponse & { headers: Headers }> {
  const res = await fetch(base + path, { method });
  const text = await res.text();
  let json: unknown = undefined;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: res.status, contentType: res.headers.get('content-type'), text, json, headers: res.headers };
}

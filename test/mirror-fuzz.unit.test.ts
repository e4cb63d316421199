/**
 * Property tests over hostile input for the mirror's pure parts: `parseResponse` (src/core) never
 * throws and always returns a well-formed result; `rewriteForMirror` never throws, never mutates
 * its input and always yields the greedy, logprobs-on, non-streaming, single-choice copy its
 * contract promises; the mirror's intake (bytes → JSON.parse → rewrite → JSON.stringify) holds
 * for arbitrary bodies. The chunked walker and head parsing are tested elsewhere.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { parseResponse, type ParsedResponse } from '../src/core/index.js';
import { rewriteForMirror, type RequestKind, type RewriteOptions } from '../src/backend/rewrite.js';

const RUNS = { numRuns: 400 };

// ---------------------------------------------------------------------------------------------
// (a) parseResponse

const FIXTURES = [
  'openai_chat_nonstream_top_logprobs2.json',
  'openai_chat_stream_logprobs.sse',
  'openai_completions_stream_logprobs5.sse',
].map((name) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url), 'utf8'));
const FORMATS = new Set([
  'completions',
  'chat',
  'llamacpp-completions',
  'llamacpp-native',
  'sglang-native',
  'error',
  'unknown',
]);

/** The shape every result has, whatever came in. */
function assertWellFormed(r: ParsedResponse): void {
  assert.ok(FORMATS.has(r.format), `format ${r.format}`);
  assert.equal(typeof r.stream, 'boolean');
  assert.equal(typeof r.text, 'string');
  assert.ok(Array.isArray(r.flags) && r.flags.every((f) => typeof f === 'string'));
  assert.ok(Array.isArray(r.steps));
  if (r.format === 'unknown' || r.format === 'error') {
    assert.equal(r.steps.length, 0, 'no steps from a non-response');
    assert.equal(typeof r.error, 'string', 'a non-response says why');
  }
  if (r.error !== undefined) assert.equal(typeof r.error, 'string');
  for (const s of r.steps) {
    assert.equal(typeof s.token, 'string');
    assert.ok(
      s.logprob === null || (Number.isFinite(s.logprob) && s.logprob > -9999 && s.logprob <= 1),
      `logprob ${s.logprob}`,
    );
    assert.ok(Array.isArray(s.top));
    for (let i = 0; i < s.top.length; i++) {
      const [tok, lp] = s.top[i]!;
      assert.equal(typeof tok, 'string');
      assert.ok(Number.isFinite(lp) || lp === -Infinity, `top logprob ${lp}`);
      if (i > 0) assert.ok(s.top[i - 1]![1] >= lp, 'top sorted, largest first');
    }
    if (s.topIds !== undefined) assert.equal(s.topIds.length, s.top.length);
    if (s.id !== undefined) assert.ok(Number.isSafeInteger(s.id) && s.id >= 0);
  }
}

function parses(body: unknown): void {
  let r: ParsedResponse;
  try {
    r = parseResponse(body);
  } catch (err) {
    assert.fail(`parseResponse threw ${String(err)} for ${JSON.stringify(body)?.slice(0, 200)}`);
  }
  assertWellFormed(r);
}

test('parseResponse never throws over arbitrary JSON values (as values and as text)', () => {
  fc.assert(
    fc.property(fc.jsonValue({ maxDepth: 6 }), (v) => {
      parses(v);
      parses(JSON.stringify(v));
      parses(new TextEncoder().encode(JSON.stringify(v)));
    }),
    RUNS,
  );
});

test('parseResponse never throws over arbitrary strings, bytes and values', () => {
  fc.assert(
    fc.property(
      fc.oneof(
        fc.string({ unit: 'grapheme', maxLength: 200 }),
        fc.string({ unit: 'binary', maxLength: 200 }),
        fc.stringMatching(/^(data: [^\n]*\n\n?){0,6}$/),
        fc.uint8Array({ maxLength: 300 }),
        fc.anything({ maxDepth: 4 }),
      ),
      (v) => parses(v),
    ),
    RUNS,
  );
});

/** Text-level mutations: deletions, insertions, replacements, truncation, duplication. */
const textMutation = fc.oneof(
  fc.record({ op: fc.constant('delete' as const), at: fc.nat(), len: fc.nat(40) }),
  fc.record({
    op: fc.constant('insert' as const),
    at: fc.nat(),
    text: fc.oneof(
      fc.string({ maxLength: 12 }),
      fc.constantFrom('{', '}', '[', ']', '"', ',', ':', '\n\n', 'data: ', '\\', 'null', '-9999', 'NaN', '\u0000'),
    ),
  }),
  fc.record({ op: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({ op: fc.constant('duplicate' as const), at: fc.nat(), len: fc.nat(200) }),
);

type TextMutation = { op: 'delete' | 'insert' | 'truncate' | 'duplicate'; at: number; len?: number; text?: string };

function mutateText(text: string, ops: readonly TextMutation[]): string {
  let t = text;
  for (const m of ops) {
    const at = t.length === 0 ? 0 : m.at % (t.length + 1);
    if (m.op === 'delete') t = t.slice(0, at) + t.slice(at + (m.len ?? 1));
    else if (m.op === 'insert') t = t.slice(0, at) + (m.text ?? '') + t.slice(at);
    else if (m.op === 'truncate') t = t.slice(0, at);
    else t = t.slice(0, at) + t.slice(at, at + (m.len ?? 1)) + t.slice(at);
  }
  return t;
}

test('parseResponse never throws over mutated real response bodies (text mutations)', () => {
  fc.assert(
    fc.property(
      fc.constantFrom(...FIXTURES),
      fc.array(textMutation, { minLength: 1, maxLength: 6 }),
      (fixture, ops) => {
        parses(mutateText(fixture, ops));
      },
    ),
    RUNS,
  );
});

/** Every path to a value inside `v` (keys and indexes). */
function paths(
  v: unknown,
  prefix: Array<string | number> = [],
  out: Array<Array<string | number>> = [],
): Array<Array<string | number>> {
  out.push(prefix);
  if (Array.isArray(v)) v.forEach((x, i) => paths(x, [...prefix, i], out));
  else if (v !== null && typeof v === 'object') for (const [k, x] of Object.entries(v)) paths(x, [...prefix, k], out);
  return out;
}

/** A copy of `v` with the value at `path` replaced (or removed when `replacement` is undefined). */
function replaceAt(v: unknown, path: Array<string | number>, replacement: unknown): unknown {
  if (path.length === 0) return replacement;
  const copy: unknown = structuredClone(v);
  let cur = copy as Record<string | number, unknown>;
  for (const k of path.slice(0, -1)) cur = cur[k] as Record<string | number, unknown>;
  const last = path[path.length - 1]!;
  if (replacement === undefined) {
    if (Array.isArray(cur)) cur.splice(last as number, 1);
    else delete cur[last];
  } else cur[last] = replacement;
  return copy;
}

/** The fixtures as values: the JSON body, and each stream as its list of chunks. */
const FIXTURE_VALUES: unknown[] = FIXTURES.map((text) =>
  text.trimStart().startsWith('data:')
    ? text
        .split('\n')
        .filter((l) => l.startsWith('data: ') && !l.includes('[DONE]'))
        .map((l) => JSON.parse(l.slice(6)) as unknown)
    : (JSON.parse(text) as unknown),
);

const hostileValue = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.constantFrom(
    null,
    -9999,
    -Infinity,
    Number.NaN,
    1e308,
    -3.4028234663852886e38,
    2,
    '',
    'token_id:12',
    'token_id:99999999999999999999',
    [],
    {},
    [null],
    [[1, 2, 3]],
    { message: 1 },
  ),
);

test('parseResponse never throws over mutated real response bodies (structural mutations, as values, JSON and SSE)', () => {
  fc.assert(
    fc.property(
      fc.nat(FIXTURE_VALUES.length - 1),
      fc.array(fc.tuple(fc.nat(), fc.option(hostileValue, { nil: undefined })), { minLength: 1, maxLength: 4 }),
      (which, edits) => {
        let v = FIXTURE_VALUES[which];
        for (const [pick, replacement] of edits) {
          const all = paths(v);
          v = replaceAt(v, all[pick % all.length]!, replacement);
        }
        parses(v);
        parses(JSON.stringify(v) ?? '');
        if (Array.isArray(v)) parses(v.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n');
      },
    ),
    RUNS,
  );
});

test('parseResponse answers hostile and pathological inputs without throwing', () => {
  const deep = 100_000;
  const throwing = new Proxy(
    {},
    {
      get: () => {
        throw new Error('boom');
      },
      ownKeys: () => {
        throw new Error('boom');
      },
    },
  );
  const cyclic: Record<string, unknown> = { choices: [] };
  (cyclic.choices as unknown[]).push({ index: 0, message: cyclic, logprobs: cyclic });
  const cases: unknown[] = [
    `${'['.repeat(deep)}${']'.repeat(deep)}`,
    `{"error":${'{"a":'.repeat(deep)}1${'}'.repeat(deep)}}`,
    `{"choices":[{"index":0,"logprobs":{"content":${'['.repeat(deep)}${']'.repeat(deep)}}}]}`,
    'data: ' + '{"a":'.repeat(deep) + '1' + '}'.repeat(deep) + '\n\n',
    throwing,
    cyclic,
    { choices: [throwing] },
    '\ufeff' + FIXTURES[0],
    FIXTURES[1]!.replace(/\n/g, '\r\n'),
    FIXTURES[2]!.replace(/\n\n/g, '\n'),
  ];
  for (const c of cases) parses(c);
});

// ---------------------------------------------------------------------------------------------
// (b) rewriteForMirror

const OPTIONS = fc.record({
  topLogprobs: fc.integer({ min: 1, max: 20 }),
  maxTokens: fc.integer({ min: 1, max: 4096 }),
  seed: fc.integer(),
  extraParams: fc.constant({}),
}) satisfies fc.Arbitrary<RewriteOptions>;

const KNOWN = [
  'model',
  'messages',
  'prompt',
  'temperature',
  'top_p',
  'n',
  'stream',
  'stream_options',
  'max_tokens',
  'max_completion_tokens',
  'logprobs',
  'top_logprobs',
  'presence_penalty',
  'frequency_penalty',
  'repetition_penalty',
  'logit_bias',
  'best_of',
  'echo',
  'seed',
  'user',
  'stop',
] as const;
/** Values a field may hold on the wire: numbers near the edges, any JSON. */
const fieldValue = fc.oneof(
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.integer(),
  fc.constantFrom(0, -0, 0.5, 0.999, 1, 1.5, 1e-300, 1e308, -1, 2 ** 53 + 2, null, true, false, '64', ''),
  fc.jsonValue({ maxDepth: 3 }),
);
/** A JSON object with the request's known fields (any values) and arbitrary others. */
const requestBody = fc
  .tuple(
    fc.dictionary(fc.constantFrom(...KNOWN), fieldValue, { maxKeys: 14 }),
    fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5 }),
  )
  .map(([known, other]) => JSON.parse(JSON.stringify({ ...other, ...known })) as Record<string, unknown>);
const kind = fc.constantFrom<RequestKind>('chat', 'completions');

/** Fields the rewrite sets or removes; every other field is the client's. */
const TOUCHED = new Set([
  'temperature',
  'top_p',
  'n',
  'stream',
  'stream_options',
  'logit_bias',
  'best_of',
  'echo',
  'presence_penalty',
  'frequency_penalty',
  'repetition_penalty',
  'seed',
  'logprobs',
  'top_logprobs',
  'max_tokens',
  'max_completion_tokens',
]);

function deepFreeze<T>(v: T): T {
  if (v !== null && typeof v === 'object') {
    for (const x of Object.values(v)) deepFreeze(x);
    Object.freeze(v);
  }
  return v;
}

/** The rewrite's contract (rewrite.ts), checked on one output. */
function assertContract(
  k: RequestKind,
  input: Record<string, unknown>,
  out: Record<string, unknown>,
  o: RewriteOptions,
): void {
  assert.equal(out.temperature, 0);
  assert.equal(out.top_p, 1);
  assert.equal(out.n, 1);
  assert.equal(out.stream, false);
  for (const gone of ['stream_options', 'logit_bias', 'best_of', 'echo'])
    assert.ok(!Object.hasOwn(out, gone), `${gone} removed`);
  assert.equal(out.presence_penalty, 0);
  assert.equal(out.frequency_penalty, 0);
  assert.equal(out.repetition_penalty, 1);
  assert.equal(out.seed, o.seed);
  const positiveCap = (v: unknown, name: string) =>
    assert.ok(
      Number.isSafeInteger(v) && (v as number) >= 1 && (v as number) <= o.maxTokens,
      `${name} ${String(v)} within 1..${o.maxTokens}`,
    );
  if (k === 'chat') {
    assert.equal(out.logprobs, true);
    assert.equal(out.top_logprobs, o.topLogprobs);
    // Exactly one length field, capped.
    if (input.max_completion_tokens !== undefined) {
      positiveCap(out.max_completion_tokens, 'max_completion_tokens');
      assert.ok(!Object.hasOwn(out, 'max_tokens'));
    } else {
      positiveCap(out.max_tokens, 'max_tokens');
      assert.ok(!Object.hasOwn(out, 'max_completion_tokens'));
    }
  } else {
    assert.equal(out.logprobs, o.topLogprobs);
    positiveCap(out.max_tokens, 'max_tokens');
  }
  // A client value smaller than the cap is kept (the mirror does not generate more than asked).
  const asked =
    k === 'chat' && input.max_completion_tokens !== undefined ? input.max_completion_tokens : input.max_tokens;
  if (typeof asked === 'number' && Number.isSafeInteger(asked) && asked >= 1 && asked <= o.maxTokens) {
    assert.equal(
      k === 'chat' && input.max_completion_tokens !== undefined ? out.max_completion_tokens : out.max_tokens,
      asked,
    );
  }
  // Everything else is the client's, untouched.
  for (const key of Object.keys(input)) {
    if (TOUCHED.has(key) || (k === 'completions' && key === 'max_completion_tokens')) continue;
    assert.deepEqual(out[key], input[key], `${key} kept`);
  }
  for (const key of Object.keys(out)) assert.ok(Object.hasOwn(input, key) || TOUCHED.has(key), `${key} not invented`);
}

test('rewriteForMirror never throws, never mutates its input and always keeps its contract', () => {
  fc.assert(
    fc.property(kind, requestBody, OPTIONS, (k, body, o) => {
      const before = structuredClone(body);
      // Frozen: a write to the input (at any depth) throws in strict mode.
      const out = rewriteForMirror(k, deepFreeze(body), o);
      assert.deepEqual(body, before, 'input unchanged');
      assertContract(k, before, out, o);
      assert.notEqual(out, body, 'a new object');
    }),
    { numRuns: 600 },
  );
});

test('rewriteForMirror: extraParams are merged last and win over everything', () => {
  const extra = fc
    .dictionary(fc.oneof(fc.constantFrom(...KNOWN), fc.string({ minLength: 1 })), fc.jsonValue({ maxDepth: 2 }), {
      maxKeys: 4,
    })
    .filter((d) => !Object.hasOwn(d, '__proto__'));
  fc.assert(
    fc.property(kind, requestBody, OPTIONS, extra, (k, body, o, extraParams) => {
      const out = rewriteForMirror(k, body, { ...o, extraParams });
      for (const [key, v] of Object.entries(extraParams)) assert.deepEqual(out[key], v, key);
    }),
    RUNS,
  );
});

test('rewriteForMirror: a fractional or tiny max_tokens still gives a positive cap', () => {
  const o: RewriteOptions = { topLogprobs: 5, maxTokens: 64, seed: 1, extraParams: {} };
  for (const v of [0.5, 0.999, 1e-300, Number.MIN_VALUE]) {
    assert.equal(rewriteForMirror('completions', { prompt: 'x', max_tokens: v }, o).max_tokens, 64, `max_tokens ${v}`);
    assert.equal(rewriteForMirror('chat', { messages: [], max_tokens: v }, o).max_tokens, 64, `chat max_tokens ${v}`);
    assert.equal(
      rewriteForMirror('chat', { messages: [], max_completion_tokens: v }, o).max_completion_tokens,
      64,
      `max_completion_tokens ${v}`,
    );
  }
  assert.equal(rewriteForMirror('completions', { prompt: 'x', max_tokens: 1.9 }, o).max_tokens, 1);
});

test('rewriteForMirror: a "__proto__" key in the body stays a plain field and pollutes nothing', () => {
  const body = JSON.parse('{"__proto__":{"polluted":1,"temperature":3},"prompt":"x"}') as Record<string, unknown>;
  const out = rewriteForMirror('completions', body, { topLogprobs: 5, maxTokens: 64, seed: 1, extraParams: {} });
  assert.equal(out.temperature, 0);
  assert.equal((out as { polluted?: unknown }).polluted, undefined);
  assert.equal(({} as { polluted?: unknown }).polluted, undefined);
  assert.ok(Object.hasOwn(out, '__proto__'), 'kept as an own field');
  assert.equal(Object.getPrototypeOf(out), Object.prototype);
  assert.match(JSON.stringify(out), /"__proto__":\{"polluted":1,"temperature":3\}/);
});

// ---------------------------------------------------------------------------------------------
// (c) the mirror's intake: bytes → JSON.parse → (object?) → rewrite → JSON.stringify

type Intake = { skipped: true } | { skipped: false; payload: string };

/** What the mirror does with a kept body (src/mirror/mirror.ts: accept, then process). */
function intake(k: RequestKind, bytes: Buffer, o: RewriteOptions): Intake {
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.toString('utf8'));
  } catch {
    return { skipped: true };
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return { skipped: true };
  const body = rewriteForMirror(k, parsed as Record<string, unknown>, o);
  return { skipped: false, payload: JSON.stringify(body) };
}

const goodBody = fc.oneof(
  fc.record({
    model: fc.string(),
    messages: fc.array(
      fc.record({ role: fc.constantFrom('user', 'system', 'assistant'), content: fc.string({ unit: 'grapheme' }) }),
      { maxLength: 3 },
    ),
    max_tokens: fieldValue,
    stream: fc.boolean(),
  }),
  fc.record({
    model: fc.string(),
    prompt: fc.oneof(fc.string({ unit: 'grapheme' }), fc.array(fc.integer({ min: 0, max: 50_000 }))),
    max_tokens: fieldValue,
    temperature: fieldValue,
  }),
);
/** Arbitrary request bodies as bytes: JSON of any shape, mutated good bodies, text, raw bytes. */
const bodyBytes = fc.oneof(
  requestBody.map((b) => Buffer.from(JSON.stringify(b))),
  fc.jsonValue({ maxDepth: 4 }).map((v) => Buffer.from(JSON.stringify(v) ?? '')),
  fc
    .tuple(goodBody, fc.array(textMutation, { maxLength: 4 }))
    .map(([b, ops]) => Buffer.from(mutateText(JSON.stringify(b), ops))),
  fc.string({ unit: 'binary', maxLength: 200 }).map((s) => Buffer.from(s)),
  fc.uint8Array({ maxLength: 200 }).map((a) => Buffer.from(a)),
  fc.tuple(goodBody, fc.uint8Array({ minLength: 1, maxLength: 8 }), fc.nat()).map(([b, junk, at]) => {
    // Invalid UTF-8 inside a JSON string: decoded to U+FFFD, still JSON.
    const text = Buffer.from(JSON.stringify({ ...b, note: 'XX' }));
    const i = text.indexOf('XX');
    return Buffer.concat([text.subarray(0, i), Buffer.from(junk.map((x) => x | 0x80)), text.subarray(i + 2)]).subarray(
      0,
      at % 3 === 0 ? undefined : text.length + junk.length,
    );
  }),
);

test('mirror intake: every body is skipped or becomes a payload that keeps the contract; the client bytes are never touched', () => {
  fc.assert(
    fc.property(kind, bodyBytes, OPTIONS, (k, bytes, o) => {
      const copy = Buffer.from(bytes);
      const r = intake(k, bytes, o);
      assert.deepEqual(bytes, copy, 'client bytes unchanged');
      if (r.skipped) return;
      assert.equal(typeof r.payload, 'string');
      const back = JSON.parse(r.payload) as Record<string, unknown>;
      assert.equal(JSON.stringify(back), r.payload, 'the payload round-trips');
      // The input as JSON sees it after a round trip (-0 is written as 0).
      const input = JSON.parse(JSON.stringify(JSON.parse(bytes.toString('utf8')))) as Record<string, unknown>;
      assertContract(k, input, back, o);
    }),
    { numRuns: 600 },
  );
});

test('mirror intake: a -0 in a client field is sent as 0 (JSON has no -0), everything else as parsed', () => {
  const r = intake('completions', Buffer.from('{"prompt":"x","x":-0,"y":[-0.0]}'), {
    topLogprobs: 5,
    maxTokens: 64,
    seed: 1,
    extraParams: {},
  });
  assert.ok(!r.skipped);
  assert.match(r.payload, /"x":0,"y":\[0\]/);
});

test('mirror intake: a 100k-deep body parses; serialising the copy throws on Node 20 (the mirror must catch it, see test/reliability-input) and round-trips on Node 26', () => {
  const deep = Buffer.from(`{"model":"m","messages":${'['.repeat(100_000)}${']'.repeat(100_000)}}`);
  // Parsing is iterative in V8 and succeeds. Serialising recurses in Node 20's V8 (11.3) and
  // throws; Node 26's V8 (14.6) serialises it without running out of stack.
  assert.doesNotThrow(() => JSON.parse(deep.toString('utf8')));
  const run = () => intake('chat', deep, { topLogprobs: 5, maxTokens: 64, seed: 1, extraParams: {} });
  if (Number(process.versions.node.split('.')[0]) < 26) {
    assert.throws(run, RangeError);
  } else {
    const r = run();
    assert.ok(!r.skipped);
    assert.ok(r.payload.includes(`"messages":${'['.repeat(100_000)}${']'.repeat(100_000)}`), 'the nesting kept whole');
  }
});

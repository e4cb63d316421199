import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  LogprobLimits,
  parseLogprobLimit,
  requestedLogprobs,
  sendWithinLimits,
  withinLogprobs,
} from '../src/backend/limits.js';
import type { Backend } from '../src/core/types.js';
import type { BackendResult } from '../src/backend/dispatch.js';
import { parseJson } from '../src/core/parse/json.js';
import { parseResponse } from '../src/core/index.js';

describe('parseLogprobLimit reads the cap out of real refusals', () => {
  const cases: Array<[string, number, unknown, number | null]> = [
    [
      'vLLM (current), nested envelope',
      400,
      {
        error: {
          message:
            'Requested sample logprobs of 21, which is greater than max allowed: 20 (parameter=logprobs, value=21)',
          type: 'BadRequestError',
          param: 'logprobs',
          code: 400,
        },
      },
      20,
    ],
    [
      'vLLM (older), flat envelope',
      400,
      {
        object: 'error',
        message: 'Requested sample logprobs of 20, which is greater than max of 5',
        type: 'BadRequestError',
        param: null,
        code: 400,
      },
      5,
    ],
    ['vLLM, as text', 400, 'Requested sample logprobs of 8, which is greater than max allowed: 0', 0],
    [
      'OpenAI chat',
      400,
      {
        error: {
          message: "Invalid 'top_logprobs': integer above maximum value. Expected a value <= 20, but got 25 instead.",
          type: 'invalid_request_error',
          param: 'top_logprobs',
          code: 'integer_above_max_value',
        },
      },
      20,
    ],
    [
      'Together',
      400,
      {
        message: "5 is greater than the maximum of 1 - 'logprobs'",
        type: 'invalid_request_error',
        param: 'logprobs',
        code: null,
      },
      1,
    ],
    [
      'Fireworks',
      400,
      { error: { object: 'error', type: 'invalid_request_error', message: 'logprobs must be between 0 and 5: 20' } },
      5,
    ],
    [
      'FastAPI / pydantic 422',
      422,
      {
        detail: [
          {
            type: 'less_than_equal',
            loc: ['body', 'top_logprobs'],
            msg: 'Input should be less than or equal to 20',
            input: 25,
            ctx: { le: 20 },
          },
        ],
      },
      20,
    ],
    [
      'logprobe engine (sim)',
      400,
      {
        error: {
          message: "'top_logprobs' must be ≤ 20, got 25",
          type: 'invalid_request_error',
          param: 'top_logprobs',
          code: null,
        },
      },
      20,
    ],
    ['key=value style', 400, 'logprobs=25 exceeds max_logprobs=20.', 20],
    ['a range', 400, { error: { message: 'top_logprobs must be in [0, 8]' } }, 8],
    // Not a logprobs cap: no retry.
    [
      'a 500 with the same text',
      500,
      { error: { message: 'Requested sample logprobs of 21, which is greater than max allowed: 20' } },
      null,
    ],
    [
      'prompt logprobs (lowering the sample logprobs would not help)',
      400,
      { error: { message: 'Requested prompt logprobs of 21, which is greater than max allowed: 20' } },
      null,
    ],
    ['another parameter', 400, { error: { message: 'max_tokens must be at most 4096' } }, null],
    [
      'the context length',
      400,
      { error: { message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens." } },
      null,
    ],
    ['a logprobs error without a number', 400, { error: { message: '`top_logprobs` must be an integer.' } }, null],
    ['a sign error', 400, { error: { message: '`logprobs` must be a positive value.' } }, null],
    ['an empty body', 400, null, null],
    ['no body', 400, '', null],
  ];
  for (const [name, status, body, expected] of cases) {
    test(`${name} → ${String(expected)}`, () => assert.equal(parseLogprobLimit(status, body), expected));
  }
});

describe('the copy within a cap', () => {
  test('chat lowers top_logprobs, completions lowers the integer logprobs, nothing else changes', () => {
    const chat = { messages: [], logprobs: true, top_logprobs: 5, max_tokens: 9 };
    assert.deepEqual(requestedLogprobs(chat), { field: 'top_logprobs', k: 5 });
    assert.deepEqual(withinLogprobs(chat, 2), { messages: [], logprobs: true, top_logprobs: 2, max_tokens: 9 });
    const completions = { prompt: 'x', logprobs: 5 };
    assert.deepEqual(requestedLogprobs(completions), { field: 'logprobs', k: 5 });
    assert.deepEqual(withinLogprobs(completions, 3), { prompt: 'x', logprobs: 3 });
    assert.deepEqual(withinLogprobs(completions, 9), completions, 'never raised');
    assert.equal(completions.logprobs, 5, 'the original is not touched');
    assert.equal(requestedLogprobs({ prompt: 'x' }), null);
  });

  test('a cap only goes down, per backend and field; both backends are sent the smallest', () => {
    const l = new LogprobLimits();
    assert.equal(l.effective('top_logprobs', 5), 5);
    assert.equal(l.learn('baseline', 'top_logprobs', 3), true);
    assert.equal(l.learn('baseline', 'top_logprobs', 4), false);
    assert.equal(l.learn('baseline', 'top_logprobs', 3), false);
    assert.equal(l.learn('candidate', 'top_logprobs', 2), true);
    assert.equal(l.effective('top_logprobs', 5), 2);
    assert.equal(l.effective('logprobs', 5), 5, 'OpenAI caps the two fields differently');
  });
});

function ok(body: unknown): BackendResult {
  return { status: 200, latencyMs: 1, body, serverHeaders: {}, error: null };
}

/** A fake pair of backends; `caps` says what each accepts. Records what each was sent. */
function fakeBackends(caps: Partial<Record<Backend, number>>, down: Partial<Record<Backend, boolean>> = {}) {
  const sent: Record<Backend, number[]> = { candidate: [], baseline: [] };
  const send = async (backend: Backend, payload: string): Promise<BackendResult> => {
    const k = (JSON.parse(payload) as { top_logprobs: number }).top_logprobs;
    sent[backend].push(k);
    if (down[backend])
      return { status: 0, latencyMs: 1, body: null, serverHeaders: {}, error: 'ECONNREFUSED: refused' };
    const cap = caps[backend];
    if (cap !== undefined && k > cap) {
      return {
        ...ok({ error: { message: `Requested sample logprobs of ${k}, which is greater than max allowed: ${cap}` } }),
        status: 400,
      };
    }
    return ok({ k, backend });
  };
  return { sent, send };
}

describe('sendWithinLimits', () => {
  const body = { messages: [], logprobs: true, top_logprobs: 5 };

  test("no cap: one call each, the caller's payload as is", async () => {
    const payloads: string[] = [];
    const r = await sendWithinLimits({
      body,
      payload: 'PAYLOAD',
      limits: new LogprobLimits(),
      send: async (_b, p) => (payloads.push(p), ok({})),
    });
    assert.deepEqual(payloads, ['PAYLOAD', 'PAYLOAD']);
    assert.equal(r.body, body);
  });

  test('a capped baseline is retried once within its cap, the candidate re-sent at the same width, later copies within it from the start', async () => {
    const limits = new LogprobLimits();
    const { sent, send } = fakeBackends({ baseline: 2 });
    const learned: unknown[] = [];
    const first = await sendWithinLimits({ body, limits, send, onLearned: (...a) => learned.push(a) });
    assert.equal(first.baseline.status, 200);
    assert.deepEqual(first.baseline.body, { k: 2, backend: 'baseline' });
    assert.deepEqual(first.candidate.body, { k: 2, backend: 'candidate' }, 'both sides over the same top-k');
    assert.equal(first.body.top_logprobs, 2, 'the body both got');
    assert.deepEqual(learned, [['baseline', 'top_logprobs', 2, 5]]);
    await sendWithinLimits({ body, limits, send, onLearned: (...a) => learned.push(a) });
    assert.deepEqual(sent, { candidate: [5, 2, 2], baseline: [5, 2, 2] });
    assert.equal(learned.length, 1, 'learned once');
    assert.equal(body.top_logprobs, 5, "the caller's body is not touched");
  });

  test('copies racing the first refusal each retry once; the cap is reported once', async () => {
    const limits = new LogprobLimits();
    const { sent, send } = fakeBackends({ candidate: 3 });
    let learned = 0;
    const pairs = await Promise.all(
      [1, 2, 3].map(() => sendWithinLimits({ body, limits, send, onLearned: () => learned++ })),
    );
    assert.ok(pairs.every((p) => p.candidate.status === 200 && p.baseline.status === 200));
    assert.equal(learned, 1);
    assert.deepEqual(sent.candidate.sort(), [3, 3, 3, 5, 5, 5]);
  });

  test('a refusal of the lowered copy is returned, not retried again', async () => {
    const limits = new LogprobLimits();
    let calls = 0;
    const r = await sendWithinLimits({
      body,
      limits,
      send: async (backend) => {
        if (backend === 'candidate') return ok({});
        calls++;
        return {
          ...ok({ error: { message: 'Requested sample logprobs of 9, which is greater than max allowed: 1' } }),
          status: 400,
        };
      },
    });
    assert.equal(calls, 2);
    assert.equal(r.baseline.status, 400);
  });

  test('the other side is not re-sent when it failed anyway', async () => {
    const { sent, send } = fakeBackends({ baseline: 2 }, { candidate: true });
    const r = await sendWithinLimits({ body, limits: new LogprobLimits(), send });
    assert.deepEqual(sent, { candidate: [5], baseline: [5, 2] });
    assert.notEqual(r.candidate.error, null);
  });

  test('a cap at or above the request is not acted on', async () => {
    const { sent, send } = fakeBackends({});
    const limits = new LogprobLimits();
    const r = await sendWithinLimits({
      body,
      limits,
      send: async (b, p) =>
        b === 'baseline' ? { ...ok({ error: { message: 'top_logprobs must be <= 20' } }), status: 400 } : send(b, p),
    });
    assert.equal(r.baseline.status, 400);
    assert.equal(limits.get('baseline', 'top_logprobs'), undefined);
    assert.deepEqual(sent.candidate, [5]);
  });
});

describe('non-standard JSON numbers (Python json.dumps) are read as sentinels, not as garbage', () => {
  test('parseJson: NaN → null, ±Infinity → ±Infinity, strings untouched, other garbage still throws', () => {
    assert.deepEqual(parseJson('{"a":NaN,"b":-Infinity,"c":[Infinity, 1]}'), {
      a: null,
      b: -Infinity,
      c: [Infinity, 1],
    });
    assert.deepEqual(parseJson('{"t":"NaN \\" Infinity","v":NaN}'), { t: 'NaN " Infinity', v: null });
    assert.throws(() => parseJson('{"a":NaN,'), SyntaxError);
    assert.throws(() => parseJson('{"a":nan}'), SyntaxError);
  });

  test('a chat body with a bare NaN and -Infinity parses, the values flagged', () => {
    const text =
      '{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ab"},"logprobs":{"content":[' +
      '{"token":"a","logprob":NaN,"top_logprobs":[{"token":"a","logprob":-0.1},{"token":"x","logprob":-Infinity}]},' +
      '{"token":"b","logprob":-Infinity,"top_logprobs":[{"token":"b","logprob":-0.2}]}]}}]}';
    const p = parseResponse(text);
    assert.equal(p.format, 'chat');
    assert.equal(p.steps.length, 2);
    assert.equal(p.steps[0]!.logprob, null);
    assert.ok(p.steps[0]!.flags?.includes('nullLogprob'));
    assert.ok(p.steps[0]!.flags?.includes('sentinelInTop'));
    assert.ok(p.steps[1]!.flags?.includes('sentinel'));
  });

  test('an SSE event with a bare NaN is kept, not counted bad', () => {
    const p = parseResponse(
      'data: {"object":"text_completion","choices":[{"index":0,"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[NaN],"top_logprobs":[{"a":-0.5}]}}]}\n\ndata: [DONE]\n\n',
    );
    assert.equal(p.format, 'completions');
    assert.equal(p.steps.length, 1);
    assert.equal(p.steps[0]!.logprob, null);
  });
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parseResponse, type TokenStep } from '../src/core/index.js';
import {
  chatBody,
  chatStream,
  completionsBody,
  completionsStream,
  llamaCompletionsBody,
  sglangNativeBody,
  sse,
  step,
  type Spec,
} from './core-bodies.js';

const fixture = (name: string): Buffer => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));
const tokens = (steps: TokenStep[]): string[] => steps.map((s) => s.token);

test('OpenAI chat fixture: nine steps, sorted tops, bytes, text and model', () => {
  const p = parseResponse(fixture('openai_chat_nonstream_top_logprobs2.json'));
  assert.equal(p.format, 'chat');
  assert.equal(p.stream, false);
  assert.equal(p.error, undefined);
  assert.equal(p.model, 'gpt-4o-mini');
  assert.equal(p.text, 'Hello! How can I assist you today?');
  assert.deepEqual(tokens(p.steps), ['Hello', '!', ' How', ' can', ' I', ' assist', ' you', ' today', '?']);
  assert.equal(p.steps[4]!.logprob, -3.7697225e-6);
  assert.deepEqual(p.steps[0]!.top, [
    ['Hello', -0.31725305],
    ['Hi', -1.3190403],
  ]);
  assert.deepEqual(p.steps[0]!.bytes, [72, 101, 108, 108, 111]);
  assert.deepEqual(p.flags, []);
});

test('OpenAI chat stream fixture: empty first chunk, finish chunk and usage chunk add no steps', () => {
  const p = parseResponse(fixture('openai_chat_stream_logprobs.sse'));
  assert.equal(p.format, 'chat');
  assert.equal(p.stream, true);
  assert.equal(p.text, 'Foo!');
  assert.equal(p.systemFingerprint, 'fp_5050236cbd');
  assert.deepEqual(tokens(p.steps), ['Foo', '!']);
  assert.deepEqual(
    p.steps.map((s) => s.logprob),
    [-0.0025094282, -0.26638845],
  );
  assert.deepEqual(p.steps[1]!.top, []);
  assert.equal(p.steps[1]!.flags, undefined, 'an empty top list is not a missing one');
});

test('OpenAI completions stream fixture: sampled-first dicts are sorted, the trailing empty chunk adds nothing', () => {
  const p = parseResponse(fixture('openai_completions_stream_logprobs5.sse'));
  assert.equal(p.format, 'completions');
  assert.equal(p.steps.length, 16);
  assert.equal(p.text, '\n\nI am an AI language model and I do not have personal experiences or the');
  const language = p.steps[5]!;
  assert.equal(language.token, ' language');
  assert.equal(language.logprob, -4.2176867);
  assert.deepEqual(language.top[0], [' and', -0.03018677]);
  assert.deepEqual(language.top[1], [' language', -4.2176867]);
  for (const s of p.steps) {
    assert.equal(s.top.length, 5);
    for (let j = 1; j < s.top.length; j++) assert.ok(s.top[j - 1]![1] >= s.top[j]![1]);
  }
  assert.deepEqual(p.flags, [], 'five keys everywhere: nothing collapsed');
});

test('vLLM completions: N+1 entries (sampled outside the top-N) are not a collapse; a lost key is', () => {
  const steps: Spec[] = [
    {
      token: ' a',
      logprob: -0.1,
      top: [
        [' a', -0.1],
        [' b', -2.0],
      ],
    },
    // sampled token outside the top-2: vLLM adds it first, three keys
    {
      token: ' z',
      logprob: -5.0,
      top: [
        [' z', -5.0],
        [' c', -0.2],
        [' d', -1.9],
      ],
    },
    // two ids decoded to " e": one key lost, the dict holds one entry instead of two
    { token: ' e', logprob: -0.3, top: [[' e', -0.3]] },
  ];
  const p = parseResponse(completionsBody(steps));
  assert.equal(p.steps[0]!.flags, undefined);
  assert.equal(p.steps[1]!.flags, undefined);
  assert.deepEqual(
    p.steps[1]!.top.map((e) => e[0]),
    [' c', ' d', ' z'],
  );
  assert.deepEqual(p.steps[2]!.flags, ['collapsedTopK']);
  assert.ok(p.flags.includes('collapsedTopK'));
});

test('SGLang completions: text_offset −1 is ignored; a chosen token missing from its own dict is a collapse', () => {
  const steps: Spec[] = [
    {
      token: 'x',
      logprob: -0.5,
      top: [
        ['x', -0.5],
        ['y', -1.2],
      ],
    },
    {
      token: 'true',
      logprob: -0.4,
      top: [
        ['false', -1.5],
        ['maybe', -2.5],
      ],
    },
  ];
  const p = parseResponse(completionsBody(steps, 'sglang'));
  assert.deepEqual(tokens(p.steps), ['x', 'true']);
  assert.equal(p.steps[0]!.flags, undefined);
  assert.deepEqual(p.steps[1]!.flags, ['collapsedTopK']);
});

test('vLLM token_id:N tokens become ids, in the chosen token and in the top dict', () => {
  const body = completionsBody([
    {
      token: 'token_id:791',
      logprob: -0.2,
      top: [
        ['token_id:791', -0.2],
        ['token_id:12', -2.1],
      ],
    },
  ]);
  const p = parseResponse(body);
  const s = p.steps[0]!;
  assert.equal(s.id, 791);
  assert.deepEqual(s.topIds, [791, 12]);
  assert.ok(s.flags?.includes('tokenIdPlaceholder'));
});

test('vLLM return_token_ids: choice.token_ids become step ids', () => {
  const body = completionsBody([step(' a', -0.1), step(' b', -0.2)]);
  (body.choices as Array<Record<string, unknown>>)[0]!.token_ids = [64, 65];
  const p = parseResponse(body);
  assert.deepEqual(
    p.steps.map((s) => s.id),
    [64, 65],
  );
});

test('vLLM chat lists the sampled token first even when it is not the largest: the top list is sorted', () => {
  const p = parseResponse(
    chatBody([
      {
        token: ' no',
        logprob: -1.4,
        top: [
          [' no', -1.4],
          [' yes', -0.3],
          [' maybe', -2.0],
        ],
      },
    ]),
  );
  assert.deepEqual(p.steps[0]!.top, [
    [' yes', -0.3],
    [' no', -1.4],
    [' maybe', -2.0],
  ]);
  assert.equal(p.steps[0]!.logprob, -1.4);
});

test('sentinels become flagged values: −9999, float lowest, null, NaN', () => {
  const p = parseResponse(
    chatBody([
      { token: '', logprob: -9999.0, top: [] },
      {
        token: 'a',
        logprob: -3.4028234663852886e38,
        top: [
          ['a', -3.4028234663852886e38],
          ['b', -9999],
        ],
      },
      { token: 'c', logprob: null, top: [['c', -0.1]] },
      { token: 'd', logprob: Number.NaN, top: [['d', Number.NaN]] },
    ]),
  );
  assert.deepEqual(
    p.steps.map((s) => s.logprob),
    [null, null, null, null],
  );
  assert.deepEqual(p.steps[0]!.flags, ['sentinel']);
  assert.deepEqual(p.steps[1]!.flags, ['sentinel', 'sentinelInTop']);
  assert.deepEqual(p.steps[1]!.top, [
    ['a', -Infinity],
    ['b', -Infinity],
  ]);
  assert.deepEqual(p.steps[2]!.flags, ['nullLogprob']);
  assert.deepEqual(p.steps[3]!.flags, ['nullLogprob', 'sentinelInTop']);
});

test('missing lists: no top_logprobs is flagged, a chat body with logprobs: null has no steps and says so', () => {
  const body = completionsBody([step('a', -0.1)]);
  const lp = (body.choices as Array<{ logprobs: Record<string, unknown> }>)[0]!.logprobs;
  delete lp.top_logprobs;
  const p = parseResponse(body);
  assert.deepEqual(p.steps[0]!.flags, ['missingTop']);
  const none = chatBody([step('a', -0.1)]);
  (none.choices as Array<Record<string, unknown>>)[0]!.logprobs = null;
  const q = parseResponse(none);
  assert.equal(q.format, 'chat');
  assert.deepEqual(q.steps, []);
  assert.equal(q.error, 'no logprobs in the response');
});

test("llama.cpp's completions route carries chat-shaped logprobs with ids", () => {
  const p = parseResponse(
    llamaCompletionsBody([
      {
        token: ' Paris',
        logprob: -0.05,
        id: 12095,
        top: [
          [' Paris', -0.05],
          [' the', -3.1],
        ],
        topIds: [12095, 279],
      },
      { token: '.', logprob: -3.4028234663852886e38, id: 13, top: [['.', -3.4028234663852886e38]], topIds: [13] },
    ]),
  );
  assert.equal(p.format, 'llamacpp-completions');
  assert.equal(p.text, ' Paris.');
  assert.equal(p.steps[0]!.id, 12095);
  assert.deepEqual(p.steps[0]!.topIds, [12095, 279]);
  assert.equal(p.steps[1]!.logprob, null);
  assert.ok(p.steps[1]!.flags?.includes('sentinel'));
});

test("llama.cpp's native completion_probabilities with post_sampling_probs are converted to logs", () => {
  const p = parseResponse({
    content: ' hi',
    completion_probabilities: [
      {
        id: 5,
        token: ' hi',
        bytes: [32, 104, 105],
        prob: 0.5,
        top_probs: [
          { id: 5, token: ' hi', prob: 0.5 },
          { id: 6, token: ' ho', prob: 0 },
        ],
      },
    ],
  });
  assert.equal(p.format, 'llamacpp-native');
  assert.equal(p.steps[0]!.logprob, Math.log(0.5));
  assert.deepEqual(p.steps[0]!.top, [
    [' hi', Math.log(0.5)],
    [' ho', -Infinity],
  ]);
  assert.ok(p.steps[0]!.flags?.includes('probability'));
});

test("SGLang's native meta_info tuples [logprob, id, text]: ids, and text null as an empty token", () => {
  const spec: Spec[] = [
    {
      token: ' Paris',
      logprob: -0.73046875,
      id: 12095,
      top: [
        [' Paris', -0.73046875],
        [' a', -2.734375],
      ],
      topIds: [12095, 2130],
    },
    {
      token: '.',
      logprob: -0.9765625,
      id: 13,
      top: [
        ['.', -0.9765625],
        [',', -1.7265625],
      ],
      topIds: [13, 11],
    },
  ];
  const p = parseResponse(sglangNativeBody(spec, false));
  assert.equal(p.format, 'sglang-native');
  assert.equal(p.text, ' Paris.');
  assert.deepEqual(
    p.steps.map((s) => [s.token, s.id, s.logprob]),
    [
      ['', 12095, -0.73046875],
      ['', 13, -0.9765625],
    ],
  );
  assert.deepEqual(p.steps[1]!.topIds, [13, 11]);
  const withText = parseResponse(sglangNativeBody(spec, true));
  assert.deepEqual(tokens(withText.steps), [' Paris', '.']);
});

test('the SGLang native real excerpt (first input position null) parses its output tuples', () => {
  const p = parseResponse({
    text: ' Paris. It',
    meta_info: {
      input_token_logprobs: [[null, 6722, null]],
      output_token_logprobs: [
        [-0.73046875, 12095, null],
        [-0.9765625, 13, null],
        [-1.3984375, 1084, null],
      ],
      output_top_logprobs: [
        [
          [-0.73046875, 12095, null],
          [-2.734375, 2130, null],
        ],
        null,
        [[-1.3984375, 1084, null]],
      ],
    },
  });
  assert.equal(p.steps.length, 3);
  assert.deepEqual(p.steps[1]!.flags, ['missingTop']);
  assert.deepEqual(p.steps[0]!.topIds, [12095, 2130]);
});

test('streams assemble to the same steps as the non-streaming body', () => {
  const spec = [step(' one', -0.1, [[' two', -2]]), step(' three', -0.4, [[' four', -1.5]]), step('!', -0.01)];
  const plainChat = parseResponse(chatBody(spec));
  const streamChat = parseResponse(chatStream(spec));
  assert.deepEqual(streamChat.steps, plainChat.steps);
  assert.equal(streamChat.text, ' one three!');
  const plainCmpl = parseResponse(completionsBody(spec));
  for (const perChunk of [1, 2, 3]) {
    const streamed = parseResponse(completionsStream(spec, perChunk));
    assert.deepEqual(streamed.steps, plainCmpl.steps, `${perChunk} tokens per chunk`);
    assert.equal(streamed.format, 'completions');
  }
});

test('SSE framing: CRLF, no [DONE], no final blank line, comments, bytes input', () => {
  const spec = [step('a', -0.1), step('b', -0.2)];
  const body = completionsBody(spec);
  const crlf = sse([body], { crlf: true });
  assert.deepEqual(tokens(parseResponse(crlf).steps), ['a', 'b']);
  const noDone = sse([body], { done: false }).trimEnd();
  assert.deepEqual(tokens(parseResponse(noDone).steps), ['a', 'b']);
  const comment = `: keep-alive\n\n${sse([body])}`;
  assert.deepEqual(tokens(parseResponse(comment).steps), ['a', 'b']);
  assert.deepEqual(tokens(parseResponse(new TextEncoder().encode(chatStream(spec))).steps), ['a', 'b']);
});

test('a stream error event ends the response as an error', () => {
  const p = parseResponse(
    sse([
      {
        error: {
          message: 'Requested sample logprobs of 21, which is greater than max allowed: 20',
          type: 'BadRequestError',
          code: 400,
        },
      },
    ]),
  );
  assert.equal(p.format, 'error');
  assert.match(p.error ?? '', /greater than max allowed/);
  const flat = parseResponse({ object: 'error', message: 'bad', type: 'invalid_request_error', code: 400 });
  assert.equal(flat.format, 'error');
});

test('non-responses say what is wrong and never throw', () => {
  assert.match(parseResponse('').error ?? '', /empty/);
  assert.match(parseResponse('hello there').error ?? '', /neither JSON nor an SSE stream/);
  assert.match(parseResponse({ foo: 1 }).error ?? '', /not a completion response/);
  assert.match(parseResponse('42').error ?? '', /not a completion response/);
  assert.match(parseResponse('data: not json\n\n').error ?? '', /without JSON events/);
  assert.equal(parseResponse({ choices: [] }).error, 'no logprobs in the response');
  const cyclic: Record<string, unknown> = { choices: [] };
  Object.defineProperty(cyclic, 'model', {
    get() {
      throw new Error('boom');
    },
    enumerable: true,
  });
  assert.match(parseResponse(cyclic).error ?? '', /unreadable body \(boom\)/);
});

test('a duplicated token in a top list is flagged', () => {
  const p = parseResponse(
    llamaCompletionsBody([
      {
        token: 'x',
        logprob: -0.1,
        id: 1,
        top: [
          ['x', -0.1],
          ['y', -1],
          ['y', -2],
        ],
        topIds: [1, 2, 3],
      },
    ]),
  );
  assert.deepEqual(p.steps[0]!.flags, ['duplicateTopKeys']);
});

test('only choice 0 is read', () => {
  const body = chatBody([step('a', -0.1)]);
  const choices = body.choices as unknown[];
  const other = structuredClone(chatBody([step('b', -0.2)]).choices as Array<Record<string, unknown>>)[0]!;
  other.index = 1;
  choices.unshift(other);
  const p = parseResponse(body);
  assert.deepEqual(tokens(p.steps), ['a']);
  assert.ok(p.flags.includes('multipleChoices'));
});

test('a positive logprob beyond rounding is not a logprob; tiny positive noise is kept', () => {
  const p = parseResponse(chatBody([step('a', 1e308), step('b', 2e-3)]));
  assert.equal(p.steps[0]!.logprob, null);
  assert.deepEqual(p.steps[0]!.flags, ['nullLogprob', 'sentinelInTop']);
  assert.equal(p.steps[1]!.logprob, 2e-3);
});

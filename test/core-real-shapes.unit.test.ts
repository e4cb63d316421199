/**
 * Shapes real servers put on the wire (docs/engines.md, "Shapes real servers print"): each body
 * below is written here, in the shape a vLLM, SGLang, LMDeploy or TGI server was seen to print
 * (the public threads are cited in the docs), and is read to what it means — a placeholder is no
 * logprob and no alternative's value: it never makes a gap, a flip's gap or a shift — or refused
 * with a one-line reason naming the field. Pure: parsers and `compare` only.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  compare,
  DEFAULT_THRESHOLDS,
  engineSequence,
  parseResponse,
  readSequences,
  type Comparison,
  type TokenStep,
} from '../src/core/index.js';
import { forcedStep } from '../src/backend/engines/steps.js';

const FLOAT32_LOWEST = '-3.4028234663852886e+38';

/** The fields of a step that a test states, in a stable shape. */
function view(s: TokenStep): Record<string, unknown> {
  const out: Record<string, unknown> = { token: s.token, logprob: s.logprob, top: s.top };
  if (s.id !== undefined) out.id = s.id;
  if (s.topIds !== undefined) out.topIds = s.topIds;
  if (s.bytes !== undefined) out.bytes = s.bytes;
  if (s.flags !== undefined) out.flags = s.flags;
  return out;
}

/** No figure of a comparison holds a value read off a placeholder (−9999 or float lowest), nor a non-finite number. */
function assertNoPlaceholderValue(r: Comparison): void {
  const text = JSON.stringify(r);
  assert.doesNotMatch(text, /Infinity|NaN/);
  for (const row of r.positions) {
    for (const v of [row.candidate, row.baseline, row.diff, row.shift, row.gap, row.kl]) {
      if (v !== null && v !== undefined)
        assert.ok(Math.abs(v) < 100, `a figure read off a placeholder: ${v} at ${row.i}`);
    }
  }
  if (r.flip?.gap !== null && r.flip?.gap !== undefined)
    assert.ok(Math.abs(r.flip.gap) < 100, `flip gap ${r.flip.gap}`);
}

// --- vLLM -------------------------------------------------------------------------------------

test('vLLM on ROCm, completions: most of a top dict at -9999.0 — placeholders hold no value, make no gap, and the dict lost no keys', () => {
  // logprobs: 6; four of the six slots are the clamp placeholder, under tokens that mean nothing.
  const body = `{"id":"cmpl-7f3a","object":"text_completion","created":1760000000,"model":"gemma-3-4b-it",
    "choices":[{"index":0,"text":"Once upon","logprobs":{"text_offset":[0,4],
      "token_logprobs":[-0.21,-0.0071],
      "tokens":["Once"," upon"],
      "top_logprobs":[
        {"Once":-0.21,"The":-1.9,"<unused41>":-9999.0,"<unused7>":-9999.0,"":-9999.0,"▁":-9999.0},
        {" upon":-0.0071," there":-5.2,"<unused3>":-9999.0,"<unused12>":-9999.0,"<unused0>":-9999.0,"<unused9>":-9999.0}]},
      "finish_reason":"length","stop_reason":null,"prompt_logprobs":null}],
    "usage":{"prompt_tokens":9,"total_tokens":11,"completion_tokens":2,"prompt_tokens_details":null}}`;
  const p = parseResponse(body);
  assert.equal(p.format, 'completions');
  assert.equal(p.error, undefined);
  assert.deepEqual(p.steps.map(view), [
    {
      token: 'Once',
      logprob: -0.21,
      // The `▁` key reads as a space (a SentencePiece piece); placeholders stay last, valueless.
      top: [
        ['Once', -0.21],
        ['The', -1.9],
        ['<unused41>', -Infinity],
        ['<unused7>', -Infinity],
        ['', -Infinity],
        [' ', -Infinity],
      ],
      flags: ['sentinelInTop'],
    },
    {
      token: ' upon',
      logprob: -0.0071,
      top: [
        [' upon', -0.0071],
        [' there', -5.2],
        ['<unused3>', -Infinity],
        ['<unused12>', -Infinity],
        ['<unused0>', -Infinity],
        ['<unused9>', -Infinity],
      ],
      flags: ['sentinelInTop'],
    },
  ]);
  assert.ok(!p.flags.includes('collapsedTopK'), 'six keys each: nothing collapsed');
  // Against a healthy twin: the gaps are the finite top-1 − top-2, never 9999-ish; no shift.
  const healthy = body.replace(/"<unused\d+>":-9999\.0|"":-9999\.0|"▁":-9999\.0/g, (m) =>
    m.replace('-9999.0', '-12.5'),
  );
  const r = compare(body, healthy, DEFAULT_THRESHOLDS);
  assertNoPlaceholderValue(r);
  assert.deepEqual(
    r.positions.map((x) => x.gap),
    [-0.21 - -1.9, -0.0071 - -5.2],
  );
  assert.equal(r.shifted, 0);
  assert.equal(r.maxShift, 0);
  assert.equal(r.verdict, 'noise', 'not identical (one side has placeholders), not a shift');
});

test('vLLM chat: a special token whose logprob the server lost comes as token "", -9999.0, bytes [], top_logprobs [] — no logprob, no alternatives', () => {
  const body = `{"id":"chatcmpl-51d0","object":"chat.completion","created":1760000001,"model":"Ministral-8B-Instruct-2410",
    "choices":[{"index":0,"message":{"role":"assistant","reasoning_content":null,"content":"[]","tool_calls":[]},
      "logprobs":{"content":[
        {"token":"[","logprob":-0.052,"bytes":[91],"top_logprobs":[{"token":"[","logprob":-0.052,"bytes":[91]},{"token":"[]","logprob":-2.98,"bytes":[91,93]}]},
        {"token":"]","logprob":0.0,"bytes":[93],"top_logprobs":[{"token":"]","logprob":0.0,"bytes":[93]}]},
        {"token":"","logprob":-9999.0,"bytes":[],"top_logprobs":[]}]},
      "finish_reason":"stop","stop_reason":null}],
    "usage":{"prompt_tokens":6,"total_tokens":9,"completion_tokens":3,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}`;
  const p = parseResponse(body);
  assert.equal(p.format, 'chat');
  assert.equal(p.text, '[]');
  assert.deepEqual(view(p.steps[1]!), { token: ']', logprob: 0, top: [[']', 0]], bytes: [93] });
  assert.deepEqual(view(p.steps[2]!), { token: '', logprob: null, top: [], bytes: [], flags: ['sentinel'] });
  // The same answer from a server that kept the value: aligned to the end, the placeholder makes
  // no diff, no shift, no gap; the pair is noise, not a shift.
  const kept = body.replace(
    '{"token":"","logprob":-9999.0,"bytes":[],"top_logprobs":[]}',
    '{"token":"","logprob":-0.0004,"bytes":[],"top_logprobs":[{"token":"","logprob":-0.0004,"bytes":[]},{"token":"\\n","logprob":-8.1,"bytes":[10]}]}',
  );
  const r = compare(body, kept, DEFAULT_THRESHOLDS);
  assertNoPlaceholderValue(r);
  assert.equal(r.firstDivergence, null);
  assert.deepEqual([r.positions[2]!.candidate, r.positions[2]!.diff, r.positions[2]!.shift], [null, null, null]);
  assert.equal(r.verdict, 'noise');
  // On the baseline's side, at a divergence, it leaves the flip without a gap (never 9999).
  const other = kept
    .replace('"content":"[]"', '"content":"[]\\n"')
    .replace(
      '{"token":"","logprob":-0.0004,"bytes":[],"top_logprobs":[{"token":"","logprob":-0.0004,"bytes":[]},',
      '{"token":"\\n","logprob":-8.1,"bytes":[10],"top_logprobs":[{"token":"","logprob":-0.0004,"bytes":[]},',
    );
  const f = compare(other, body, DEFAULT_THRESHOLDS);
  assert.equal(f.firstDivergence, 2);
  assert.equal(f.flip?.gap, null);
  assert.equal(f.flip?.class, 'gray');
  assert.notEqual(f.verdict, 'local_shift');
  assert.notEqual(f.verdict, 'early_shift');
  assertNoPlaceholderValue(f);
});

test('vLLM completions: N+1 entries when the sampled token is outside the top N, and a dict with fewer than asked', () => {
  // logprobs: 3. Position 0: the sampled " cat" is not in the top 3, so it is added (listed first,
  // as vLLM does). Position 2: two keys only — one was lost (two ids decoded to one string).
  const body = `{"id":"cmpl-22","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" cat sat on",
    "logprobs":{"tokens":[" cat"," sat"," on"],"token_logprobs":[-4.4,-0.31,-0.09],
      "top_logprobs":[{" cat":-4.4," dog":-0.7," bird":-1.6," fish":-2.2},{" sat":-0.31," ran":-1.5," is":-2.75},{" on":-0.09," down":-2.6}],
      "text_offset":[0,4,8]},"finish_reason":"length"}]}`;
  const p = parseResponse(body);
  assert.deepEqual(
    p.steps.map((s) => s.top),
    [
      [
        [' dog', -0.7],
        [' bird', -1.6],
        [' fish', -2.2],
        [' cat', -4.4],
      ],
      [
        [' sat', -0.31],
        [' ran', -1.5],
        [' is', -2.75],
      ],
      [
        [' on', -0.09],
        [' down', -2.6],
      ],
    ],
  );
  // The +1 is not counted as asked-for: positions 0 and 1 are whole, position 2 lost a key.
  assert.deepEqual(
    p.steps.map((s) => s.flags ?? []),
    [[], [], ['collapsedTopK']],
  );
  // The baseline's gap at 0 is read between its real top-1 and top-2, not against the +1 entry.
  const r = compare(body, body, DEFAULT_THRESHOLDS);
  assert.equal(r.verdict, 'identical');
  assert.ok(Math.abs(r.positions[0]!.gap! - 0.9) < 1e-12);
});

test('chat top lists shorter or longer than asked are read as sent (the spec allows fewer; SGLang sent 3 for top_logprobs: 1)', () => {
  const fewer = `{"object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},
    "logprobs":{"content":[{"token":"Hi","logprob":-0.12,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.12,"bytes":[72,105]}]}]},"finish_reason":"length"}]}`;
  const more = `{"object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},
    "logprobs":{"content":[{"token":"Hi","logprob":-0.12,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.12,"bytes":[72,105]},{"token":"Hello","logprob":-2.4,"bytes":[72,101,108,108,111]},{"token":"Hey","logprob":-3.3,"bytes":[72,101,121]}]}]},"finish_reason":"length"}]}`;
  assert.deepEqual(parseResponse(fewer).steps.map(view), [
    { token: 'Hi', logprob: -0.12, top: [['Hi', -0.12]], bytes: [72, 105] },
  ]);
  assert.deepEqual(parseResponse(more).steps[0]!.top, [
    ['Hi', -0.12],
    ['Hello', -2.4],
    ['Hey', -3.3],
  ]);
  assert.equal(parseResponse(more).steps[0]!.flags, undefined);
  const r = compare(more, fewer, DEFAULT_THRESHOLDS);
  assert.equal(r.verdict, 'noise');
  assert.equal(r.maxShift, 0);
});

test('completions with echo: the first prompt position is null in token_logprobs and top_logprobs — no logprob, no list', () => {
  const body = `{"id":"cmpl-e1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"Boil the water.",
    "logprobs":{"text_offset":[0,4,8,14],"token_logprobs":[null,-6.25,-0.83,-1.4],"tokens":["Boil"," the"," water","."],
      "top_logprobs":[null,{" the":-6.25," an":-0.4,",":-2.1},{" water":-0.83," pot":-1.1},{".":-1.4,",":-0.6}]},"finish_reason":"length"}]}`;
  const p = parseResponse(body);
  assert.deepEqual(view(p.steps[0]!), { token: 'Boil', logprob: null, top: [], flags: ['nullLogprob', 'missingTop'] });
  assert.equal(p.steps[1]!.logprob, -6.25);
  assert.deepEqual(p.steps[1]!.top[0], [' an', -0.4]);
  assert.equal(p.steps.length, 4);
});

test('vLLM prompt_logprobs: null first, then objects keyed by the id as a string — read by id; a key that is no id is refused naming the field', () => {
  const body = {
    id: 'cmpl-p',
    object: 'text_completion',
    model: 'm',
    choices: [
      {
        index: 0,
        text: '',
        logprobs: null,
        finish_reason: 'length',
        prompt_token_ids: [128000, 791, 6864],
        prompt_logprobs: [
          null,
          {
            '791': { logprob: -3.5, rank: 2, decoded_token: 'The' },
            '40': { logprob: -1.25, rank: 1, decoded_token: 'I' },
          },
          {
            '6864': { logprob: -7.75, rank: 9, decoded_token: ' capital' },
            '1176': { logprob: -2.0, rank: 1, decoded_token: ' first' },
            '0': { logprob: -9999.0, rank: 2, decoded_token: '!' },
          },
        ],
      },
    ],
  };
  const seq = engineSequence(JSON.parse(JSON.stringify(body)));
  assert.ok(typeof seq !== 'string', String(seq));
  assert.equal(seq.source, 'prompt_logprobs');
  assert.deepEqual(seq.steps.map(view), [
    {
      token: 'The',
      logprob: -3.5,
      id: 791,
      top: [
        ['I', -1.25],
        ['The', -3.5],
      ],
      topIds: [40, 791],
    },
    {
      token: ' capital',
      logprob: -7.75,
      id: 6864,
      top: [
        [' first', -2],
        [' capital', -7.75],
        ['!', -Infinity],
      ],
      topIds: [1176, 6864, 0],
      flags: ['sentinelInTop'],
    },
  ]);
  const bad = JSON.parse(JSON.stringify(body));
  bad.choices[0].prompt_logprobs[2] = { capital: { logprob: -7.75 } };
  assert.equal(engineSequence(bad), 'prompt_logprobs[2]: key "capital" is not a token id');
  const list = JSON.parse(JSON.stringify(body));
  list.choices[0].prompt_logprobs[1] = [[-3.5, 791]];
  assert.equal(engineSequence(list), 'prompt_logprobs[1]: expected an object keyed by token id, got a list');
  const file = readSequences(JSON.stringify(bad));
  assert.deepEqual(file.problems, [
    'the file: neither a token-logprob sequence nor a response with logprobs (prompt_logprobs[2]: key "capital" is not a token id)',
  ]);
});

test('scoring steps: a forced step whose alternatives hold -9999.0 or float lowest keeps them valueless, the forced token by its id', () => {
  const s = forcedStep(6864, ' capital', -9999.0, [
    { id: 1176, text: ' first', logprob: -2.0 },
    { id: 6864, text: ' capital', logprob: -9999.0 },
    { id: 3, text: '', logprob: Number(FLOAT32_LOWEST) },
  ]);
  assert.deepEqual(view(s), {
    token: ' capital',
    logprob: null,
    id: 6864,
    top: [
      [' first', -2],
      [' capital', -Infinity],
      ['', -Infinity],
    ],
    topIds: [1176, 6864, 3],
    flags: ['sentinel', 'sentinelInTop'],
  });
});

test('vLLM streamed completions: the last chunk carries prompt_token_ids, token_ids and usage as null before [DONE]', () => {
  const chunk = (text: string, lp: number, top: string, ids: number[]) =>
    `data: {"id":"cmpl-s","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":${JSON.stringify(text)},"logprobs":{"text_offset":[0],"token_logprobs":[${lp}],"tokens":[${JSON.stringify(text)}],"top_logprobs":[${top}]},"finish_reason":null,"stop_reason":null,"token_ids":${JSON.stringify(ids)},"prompt_token_ids":null}],"usage":null}\n\n`;
  const stream =
    chunk(' Paris', -0.04, '{" Paris":-0.04," Lyon":-4.1}', [12366]) +
    chunk('.', -0.6, '{".":-0.6,",":-1.2}', [13]) +
    'data: {"id":"cmpl-s","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null,"prompt_token_ids":null}],"usage":null}\n\n' +
    'data: [DONE]\n\n';
  const p = parseResponse(stream);
  assert.equal(p.stream, true);
  assert.equal(p.error, undefined);
  assert.equal(p.text, ' Paris.');
  assert.deepEqual(
    p.steps.map((s) => [s.token, s.id, s.logprob]),
    [
      [' Paris', 12366, -0.04],
      ['.', 13, -0.6],
    ],
  );
});

test('vLLM chat with return_token_ids: token_ids null (a server bug) and the extra vLLM fields — read by text, nothing invented', () => {
  const body = `{"id":"chatcmpl-9","object":"chat.completion","created":1,"model":"gpt-oss-20b","prompt_logprobs":null,"prompt_token_ids":[200006,17360,200008],"kv_transfer_params":null,
    "choices":[{"index":0,"message":{"role":"assistant","content":"Yes","reasoning_content":"Short.","tool_calls":[]},
      "logprobs":{"content":[{"token":"Short","logprob":-1.1,"bytes":[83,104,111,114,116],"top_logprobs":[{"token":"Short","logprob":-1.1,"bytes":[83,104,111,114,116]}]},
        {"token":".","logprob":-0.2,"bytes":[46],"top_logprobs":[{"token":".","logprob":-0.2,"bytes":[46]}]},
        {"token":"Yes","logprob":-0.05,"bytes":[89,101,115],"top_logprobs":[{"token":"Yes","logprob":-0.05,"bytes":[89,101,115]}]}]},
      "finish_reason":"stop","stop_reason":null,"token_ids":null}],
    "usage":{"prompt_tokens":3,"total_tokens":6,"completion_tokens":3,"prompt_tokens_details":null}}`;
  const p = parseResponse(body);
  assert.equal(p.format, 'chat');
  assert.equal(p.text, 'Yes');
  // Logprobs cover the reasoning tokens too; no ids were given, none are made up.
  assert.deepEqual(
    p.steps.map((s) => [s.token, s.id]),
    [
      ['Short', undefined],
      ['.', undefined],
      ['Yes', undefined],
    ],
  );
  const withIds = body.replace('"token_ids":null', '"token_ids":[17045,13,13022]');
  assert.deepEqual(
    parseResponse(withIds).steps.map((s) => s.id),
    [17045, 13, 13022],
  );
  const r = compare(body, withIds, DEFAULT_THRESHOLDS);
  assert.equal(r.verdict, 'identical', 'one side without ids: matched by text');
  assert.ok(!r.notes.includes('tokens matched by id'));
});

test('older vLLM chat: logprobs in the completions shape with SentencePiece pieces, -1.19e-07 and 0.0 — the same tokens as a decoded answer', () => {
  const old = `{"id":"cmpl-old","object":"chat.completion","created":1,"model":"Llama-2-7b-chat-hf",
    "choices":[{"index":0,"message":{"role":"assistant","content":" Hello there"},
      "logprobs":{"text_offset":[0,6],"token_logprobs":[-1.19e-07,0.0],"tokens":["▁Hello","▁there"],
        "top_logprobs":[{"▁Hello":-1.19e-07,"▁Hi":-16.2},{"▁there":0.0,"!":-18.0}]},"finish_reason":"length"}]}`;
  const p = parseResponse(old);
  assert.equal(p.format, 'chat');
  assert.deepEqual(p.steps.map(view), [
    {
      token: ' Hello',
      logprob: -1.19e-7,
      top: [
        [' Hello', -1.19e-7],
        [' Hi', -16.2],
      ],
    },
    {
      token: ' there',
      logprob: 0,
      top: [
        [' there', 0],
        ['!', -18],
      ],
    },
  ]);
  const decoded = `{"object":"chat.completion","model":"Llama-2-7b-chat-hf","choices":[{"index":0,"message":{"role":"assistant","content":" Hello there"},
    "logprobs":{"content":[{"token":" Hello","logprob":-1.2e-07,"bytes":[32,72,101,108,108,111],"top_logprobs":[{"token":" Hello","logprob":-1.2e-07,"bytes":[32,72,101,108,108,111]},{"token":" Hi","logprob":-16.19,"bytes":[32,72,105]}]},
      {"token":" there","logprob":0.0,"bytes":[32,116,104,101,114,101],"top_logprobs":[{"token":" there","logprob":0.0,"bytes":[32,116,104,101,114,101]},{"token":"!","logprob":-18.01,"bytes":[33]}]}],"refusal":null},"finish_reason":"length"}]}`;
  const r = compare(old, decoded, DEFAULT_THRESHOLDS);
  assert.equal(r.firstDivergence, null);
  assert.equal(r.verdict, 'noise');
});

test('key order inside a logprob entry is not relied on (token/bytes/logprob vs logprob/token/bytes)', () => {
  const a = `{"object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"logprobs":{"content":[{"token":"ok","logprob":-0.3,"bytes":[111,107],"top_logprobs":[{"token":"ok","logprob":-0.3,"bytes":[111,107]},{"token":"no","logprob":-1.7,"bytes":[110,111]}]}]}}]}`;
  const b = `{"choices":[{"logprobs":{"content":[{"top_logprobs":[{"bytes":[110,111],"logprob":-1.7,"token":"no"},{"logprob":-0.3,"bytes":[111,107],"token":"ok"}],"bytes":[111,107],"logprob":-0.3,"token":"ok"}]},"message":{"content":"ok","role":"assistant"},"index":0}],"model":"m","object":"chat.completion"}`;
  assert.deepEqual(parseResponse(b).steps, parseResponse(a).steps);
  assert.equal(compare(a, b, DEFAULT_THRESHOLDS).verdict, 'identical');
});

// --- SGLang -----------------------------------------------------------------------------------

test('SGLang streamed chat: alternatives at float32 lowest (-3.4028234663852886e+38, a clamped -inf) hold no value', () => {
  const chunk = (token: string, lp: number, tops: string) =>
    `data: {"id":"4f1c","object":"chat.completion.chunk","created":1,"model":"qwen","choices":[{"index":0,"delta":{"role":null,"content":${JSON.stringify(token)}},"logprobs":{"content":[{"token":${JSON.stringify(token)},"bytes":${JSON.stringify([...Buffer.from(token)])},"logprob":${lp},"top_logprobs":[${tops}]}]},"finish_reason":null,"matched_stop":null}],"usage":null}\n\n`;
  const stream =
    chunk(
      'Sure',
      -0.01,
      `{"token":"Sure","bytes":[83,117,114,101],"logprob":-0.01},{"token":"Yes","bytes":[89,101,115],"logprob":${FLOAT32_LOWEST}}`,
    ) +
    chunk('!', -0.5, `{"token":"!","bytes":[33],"logprob":-0.5},{"token":",","bytes":[44],"logprob":-1.0}`) +
    'data: [DONE]\n\n';
  const p = parseResponse(stream);
  assert.equal(p.format, 'chat');
  assert.deepEqual(p.steps.map(view), [
    {
      token: 'Sure',
      logprob: -0.01,
      top: [
        ['Sure', -0.01],
        ['Yes', -Infinity],
      ],
      bytes: [83, 117, 114, 101],
      flags: ['sentinelInTop'],
    },
    {
      token: '!',
      logprob: -0.5,
      top: [
        ['!', -0.5],
        [',', -1],
      ],
      bytes: [33],
    },
  ]);
  // Against a server that reports "Yes" at -6: no shift, no gap from the clamped value.
  const real = stream.replace(FLOAT32_LOWEST, '-6.0');
  const r = compare(stream, real, DEFAULT_THRESHOLDS);
  assertNoPlaceholderValue(r);
  assert.equal(r.maxShift, 0);
  assert.equal(r.verdict, 'noise');
});

test('SGLang /generate: [logprob, id, text|null] tuples, [null, id, null] first input entry, input_top_logprobs[0] null, finish_reason an object', () => {
  const body = {
    text: ' Rome. It',
    meta_info: {
      id: '0b6e3c2d9a',
      finish_reason: { type: 'length', length: 3 },
      prompt_tokens: 4,
      completion_tokens: 3,
      cached_tokens: 0,
      input_token_logprobs: [
        [null, 785, null],
        [-2.5, 6722, null],
        [-0.875, 315, null],
        [-1.625, 12095, null],
      ],
      output_token_logprobs: [
        [-0.3125, 21718, null],
        [-1.0, 13, null],
        [-1.5, 1084, null],
      ],
      input_top_logprobs: [
        null,
        [
          [-1.5, 374, null],
          [-2.5, 6722, null],
        ],
        [[-0.875, 315, null]],
        [[-1.625, 12095, null]],
      ],
      output_top_logprobs: [
        [
          [-0.3125, 21718, null],
          [-2.0, 12366, null],
        ],
        [
          [-1.0, 13, null],
          [-1.25, 11, null],
        ],
        [
          [-1.5, 1084, null],
          [Number(FLOAT32_LOWEST), 0, null],
        ],
      ],
    },
  };
  const p = parseResponse(JSON.stringify(body));
  assert.equal(p.format, 'sglang-native');
  assert.equal(p.text, ' Rome. It');
  assert.deepEqual(p.steps.map(view), [
    {
      token: '',
      logprob: -0.3125,
      id: 21718,
      top: [
        ['', -0.3125],
        ['', -2],
      ],
      topIds: [21718, 12366],
      flags: ['duplicateTopKeys'],
    },
    {
      token: '',
      logprob: -1,
      id: 13,
      top: [
        ['', -1],
        ['', -1.25],
      ],
      topIds: [13, 11],
      flags: ['duplicateTopKeys'],
    },
    {
      token: '',
      logprob: -1.5,
      id: 1084,
      top: [
        ['', -1.5],
        ['', -Infinity],
      ],
      topIds: [1084, 0],
      flags: ['sentinelInTop', 'duplicateTopKeys'],
    },
  ]);
  // Without text the ids identify the tokens: the pair is compared by id.
  const r = compare(body, body, DEFAULT_THRESHOLDS);
  assert.equal(r.verdict, 'identical');
  assert.ok(r.notes.includes('tokens matched by id'));
  assertNoPlaceholderValue(r);
  // The prompt side: the [null, id, null] entry is not a position.
  const seq = engineSequence(body);
  assert.ok(typeof seq !== 'string');
  assert.equal(seq.source, 'input_token_logprobs');
  assert.deepEqual(
    seq.steps.map((s) => [s.id, s.logprob, s.topIds]),
    [
      [6722, -2.5, [374, 6722]],
      [315, -0.875, [315]],
      [12095, -1.625, [12095]],
    ],
  );
});

test('SGLang chat: fullwidth "！", a replaced byte fragment " �" (bytes 32, 239, 191, 189) and "!\\n\\n" — the replacement bytes are not the token\'s', () => {
  const item = (token: string, lp: number) => ({ token, bytes: [...Buffer.from(token)], logprob: lp });
  const body = {
    id: 'a1',
    object: 'chat.completion',
    model: 'qwen',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: '好！ �!\n\n' },
        logprobs: {
          content: [
            { ...item('好', -0.2), top_logprobs: [item('好', -0.2)] },
            { ...item('！', -0.4), top_logprobs: [item('！', -0.4), item('!', -1.3), item('。', -2.6)] },
            { ...item(' \uFFFD', -3.1), top_logprobs: [item(' \uFFFD', -3.1)] },
            { ...item('!\n\n', -0.9), top_logprobs: [item('!\n\n', -0.9)] },
          ],
        },
        finish_reason: 'stop',
        matched_stop: 151645,
      },
    ],
  };
  const p = parseResponse(JSON.stringify(body));
  assert.deepEqual(p.steps[1]!.bytes, [239, 188, 129]);
  assert.equal(p.steps[1]!.top.length, 3);
  assert.equal(p.steps[2]!.token, ' \uFFFD');
  assert.equal(p.steps[2]!.bytes, undefined, 'the UTF-8 of U+FFFD says nothing about which fragment it was');
  assert.deepEqual(p.steps[3]!.bytes, [33, 10, 10]);
});

// --- LMDeploy ---------------------------------------------------------------------------------

test('LMDeploy /generate: [logprob, id] pairs without a text slot are read by id', () => {
  const body = {
    text: ' blue',
    meta_info: {
      finish_reason: { type: 'length' },
      output_token_logprobs: [[-0.0625, 6437]],
      output_top_logprobs: [
        [
          [-0.0625, 6437],
          [-3.25, 2579],
        ],
      ],
    },
  };
  const p = parseResponse(body);
  assert.deepEqual(p.steps.map(view), [
    {
      token: '',
      logprob: -0.0625,
      id: 6437,
      top: [
        ['', -0.0625],
        ['', -3.25],
      ],
      topIds: [6437, 2579],
      flags: ['duplicateTopKeys'],
    },
  ]);
});

test('LMDeploy chat: alternatives without the chosen token, spelled as byte-level pieces (Ġ, Ċ) — read as the text they stand for', () => {
  const body = `{"id":"1","object":"chat.completion","created":1,"model":"internlm",
    "choices":[{"index":0,"message":{"role":"assistant","content":" the\\n"},
      "logprobs":{"content":[
        {"token":" the","bytes":[32,116,104,101],"logprob":-0.25,"top_logprobs":[{"token":"Ġa","bytes":[196,160,97],"logprob":-1.75},{"token":"Ġthe","bytes":[196,160,116,104,101],"logprob":-0.25}]},
        {"token":"\\n","bytes":[10],"logprob":-0.5,"top_logprobs":[{"token":"Ċ","bytes":[196,138],"logprob":-0.5},{"token":".","bytes":[46],"logprob":-1.5}]}]},
      "finish_reason":"length"}]}`;
  const p = parseResponse(body);
  assert.deepEqual(
    p.steps.map((s) => s.top),
    [
      [
        [' the', -0.25],
        [' a', -1.75],
      ],
      [
        ['\n', -0.5],
        ['.', -1.5],
      ],
    ],
  );
  // Against a vLLM answer with the same values: the alternatives match, no lower bound, noise.
  const vllm = `{"object":"chat.completion","model":"internlm","choices":[{"index":0,"message":{"role":"assistant","content":" the\\n"},
    "logprobs":{"content":[{"token":" the","logprob":-0.25,"bytes":[32,116,104,101],"top_logprobs":[{"token":" the","logprob":-0.25,"bytes":[32,116,104,101]},{"token":" a","logprob":-1.7,"bytes":[32,97]}]},
      {"token":"\\n","logprob":-0.5,"bytes":[10],"top_logprobs":[{"token":"\\n","logprob":-0.5,"bytes":[10]},{"token":".","logprob":-1.5,"bytes":[46]}]}]},"finish_reason":"length"}]}`;
  const r = compare(body, vllm, DEFAULT_THRESHOLDS);
  assert.equal(r.verdict, 'noise');
  assert.ok(Math.abs(r.maxShift! - 0.05) < 1e-12, `maxShift ${r.maxShift}`);
});

// --- TGI --------------------------------------------------------------------------------------

test('TGI chat: object "text_completion", id "", no bytes, an integer 0 logprob', () => {
  const body = `{"object":"text_completion","id":"","created":1719000000,"model":"mistral-7b","system_fingerprint":"2.0.4-sha-f426a33",
    "choices":[{"index":0,"message":{"role":"assistant","content":"Yes."},
      "logprobs":{"content":[{"token":"Yes","logprob":0,"top_logprobs":[{"token":"Yes","logprob":0},{"token":"No","logprob":-17.5}]},
        {"token":".","logprob":-0.75,"top_logprobs":[{"token":".","logprob":-0.75},{"token":"!","logprob":-1.0}]}]},
      "finish_reason":"eos_token"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`;
  const p = parseResponse(body);
  assert.equal(p.format, 'chat');
  assert.equal(p.systemFingerprint, '2.0.4-sha-f426a33');
  assert.deepEqual(p.steps.map(view), [
    {
      token: 'Yes',
      logprob: 0,
      top: [
        ['Yes', 0],
        ['No', -17.5],
      ],
    },
    {
      token: '.',
      logprob: -0.75,
      top: [
        ['.', -0.75],
        ['!', -1],
      ],
    },
  ]);
  const other = body
    .replace('"logprob":0,', '"logprob":-2.4e-06,')
    .replace('{"token":"Yes","logprob":0}', '{"token":"Yes","logprob":-2.4e-06}');
  assert.equal(compare(body, other, DEFAULT_THRESHOLDS).verdict, 'noise');
});

// --- End to end: a pair where one side carries placeholders -----------------------------------

/** A healthy greedy chat answer (top 4) and the same answer from a server printing placeholders. */
function placeholderPair(): { healthy: string; broken: string } {
  const words = [' The', ' sky', ' is', ' blue', '.'];
  const alts = [' A', ' It', ' was', ' grey', '!'];
  const value = (i: number) => -0.05 - 0.1 * i;
  const item = (i: number, broken: boolean) => {
    const w = words[i]!;
    // Position 2: the broken server lost the chosen value too; the others keep it.
    const chosen = broken && i === 2 ? -9999.0 : value(i) + (broken ? 0.0004 : 0);
    const top = [
      { token: w, logprob: chosen },
      { token: alts[i]!, logprob: value(i) - 1.5 + (broken ? -0.0003 : 0) },
      { token: broken ? '' : ' and', logprob: broken ? -9999.0 : -6.5 },
      { token: broken ? '<pad>' : ' so', logprob: broken ? Number(FLOAT32_LOWEST) : -7.25 },
    ];
    return { token: w, logprob: chosen, bytes: [...Buffer.from(w)], top_logprobs: top };
  };
  const body = (broken: boolean) => {
    const content = words.map((_, i) => item(i, broken));
    // The end-of-turn token: the broken server lost its logprob (vLLM's special-token fallback).
    content.push(
      broken
        ? { token: '', logprob: -9999.0, bytes: [], top_logprobs: [] }
        : { token: '', logprob: -0.002, bytes: [], top_logprobs: [{ token: '', logprob: -0.002, bytes: [] }] as never },
    );
    return JSON.stringify({
      id: 'chatcmpl-e2e',
      object: 'chat.completion',
      model: 'm',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: words.join('') },
          logprobs: { content },
          finish_reason: 'stop',
          stop_reason: null,
        },
      ],
    });
  };
  return { healthy: body(false), broken: body(true) };
}

test('end to end: a candidate printing placeholders against a healthy baseline is noise, not a shift — in both directions', () => {
  const { healthy, broken } = placeholderPair();
  for (const [c, b] of [
    [broken, healthy],
    [healthy, broken],
  ] as const) {
    const r = compare(c, b, DEFAULT_THRESHOLDS);
    assertNoPlaceholderValue(r);
    assert.equal(r.firstDivergence, null);
    assert.equal(r.flip, null);
    assert.equal(r.comparable, 6);
    assert.equal(r.shifted, 0);
    assert.ok(r.maxShift! < 0.001, `maxShift ${r.maxShift}`);
    assert.equal(r.verdict, 'noise');
    // Position 2 (the lost chosen value) and 5 (the lost special token) have no diff.
    assert.deepEqual(
      r.positions.map((x) => x.diff === null),
      [false, false, true, false, false, true],
    );
  }
  // Each baseline's gaps are its real top-1 − top-2 (the broken one's placeholders are last).
  const h = compare(broken, healthy, DEFAULT_THRESHOLDS);
  for (const row of h.positions.slice(0, 5)) assert.ok(Math.abs(row.gap! - 1.5) < 1e-9, `gap ${row.gap} at ${row.i}`);
  const r = compare(healthy, broken, DEFAULT_THRESHOLDS);
  for (const row of r.positions.slice(0, 5))
    if (row.i !== 2) assert.ok(Math.abs(row.gap! - 1.5007) < 1e-9, `gap ${row.gap} at ${row.i}`);
  assert.equal(
    r.positions[2]!.gap,
    null,
    "the chosen value lost: top-1 is the alternative's, top-2 a placeholder — no gap",
  );
  assert.equal(r.positions[5]!.gap, null);
});

test('end to end: a flip to a token the baseline listed only as a placeholder has no gap (gray, not systematic); unlisted, the gap is a lower bound', () => {
  const chat = (tokens: Array<[string, number, Array<[string, number | string]>]>) =>
    `{"object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":""},"logprobs":{"content":[${tokens
      .map(
        ([t, lp, top]) =>
          `{"token":${JSON.stringify(t)},"logprob":${lp},"top_logprobs":[${top.map(([x, v]) => `{"token":${JSON.stringify(x)},"logprob":${v}}`).join(',')}]}`,
      )
      .join(',')}]}}]}`;
  const head: Array<[string, number, Array<[string, number | string]>]> = [
    [
      ' one',
      -0.1,
      [
        [' one', -0.1],
        [' a', -2.5],
      ],
    ],
    [
      ' two',
      -0.2,
      [
        [' two', -0.2],
        [' b', -2.75],
      ],
    ],
    [
      ' three',
      -0.3,
      [
        [' three', -0.3],
        [' c', -3.0],
      ],
    ],
  ];
  const baseline = chat([
    ...head,
    [
      ' four',
      -0.4,
      [
        [' four', -0.4],
        [' five', -9999.0],
        [' six', -1.5],
      ],
    ],
  ]);
  const candidate = chat([
    ...head,
    [
      ' five',
      -0.45,
      [
        [' five', -0.45],
        [' four', -0.5],
      ],
    ],
  ]);
  const r = compare(candidate, baseline, DEFAULT_THRESHOLDS);
  assert.equal(r.firstDivergence, 3);
  assert.deepEqual(
    { gap: r.flip?.gap, lowerBound: r.flip?.lowerBound, class: r.flip?.class },
    { gap: null, lowerBound: false, class: 'gray' },
  );
  assert.equal(r.shifted, 0);
  assert.equal(r.verdict, 'noise');
  assertNoPlaceholderValue(r);
  // The same baseline not listing " five" at all: lp_b(five) ≤ −1.5, a lower bound of 1.1 — systematic.
  const unlisted = chat([
    ...head,
    [
      ' four',
      -0.4,
      [
        [' four', -0.4],
        [' six', -1.5],
      ],
    ],
  ]);
  const u = compare(candidate, unlisted, DEFAULT_THRESHOLDS);
  assert.equal(u.flip?.lowerBound, true);
  assert.ok(Math.abs(u.flip!.gap! - 1.1) < 1e-12);
  assert.equal(u.flip?.class, 'systematic');
});

test('refused with a one-line reason: an answer whose every value is a placeholder', () => {
  const all = `{"object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"logprobs":{"content":[{"token":"a","logprob":-9999.0,"bytes":[97],"top_logprobs":[{"token":"a","logprob":-9999.0,"bytes":[97]},{"token":"b","logprob":${FLOAT32_LOWEST},"bytes":[98]}]}]}}]}`;
  const ok = all.replaceAll('-9999.0', '-0.5').replace(FLOAT32_LOWEST, '-2');
  const r = compare(all, ok, DEFAULT_THRESHOLDS);
  assert.equal(r.verdict, 'incomparable');
  assert.deepEqual(r.notes, ['the candidate has no usable logprob values (all null or sentinels)']);
});

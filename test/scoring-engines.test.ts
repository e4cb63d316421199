import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { request } from 'undici';
import { createSimModel, startEngineServer, type EngineServerHandle, type SimOptions } from '@logprobe/engine';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import type { ConfigInput } from '../src/config/schema.js';
import type { MirroredPair } from '../src/pair/types.js';
import { vllmTokenizeChat } from '../src/backend/engines/vllm.js';
import { parseCapFor, parseLogprobLimit, parsePromptLogprobLimit } from '../src/backend/limits.js';
import { CacheCounts, probeShape, selfEvidence } from '../src/core/self.js';
import type { Comparison } from '../src/core/types.js';

// Issue #22: teacher-forced scoring on the vLLM and SGLang doubles as their servers behave — the
// `--max-logprobs` refusal of prompt_logprobs, the V2 runner's top-k-less prompt logprobs, chat
// prompts rendered with the request's own inputs, SGLang's /tokenize with messages.

function engine(api: 'vllm' | 'sglang', sim: SimOptions = {}, flags: object = {}): Promise<EngineServerHandle> {
  return startEngineServer({ model: createSimModel({ seed: 5, id: 'm', ...sim }), api, ...flags });
}

async function pairs(
  t: { after(fn: () => unknown): void },
  cand: EngineServerHandle,
  base: EngineServerHandle,
  config: ConfigInput,
  send: (c: OpenAI) => Promise<unknown>,
) {
  const got: MirroredPair[] = [];
  const lp = await startLogprobe(
    {
      candidate: { url: cand.url },
      baseline: { url: base.url },
      analysis: { scoring: { when: 'always' } },
      ...config,
      mirror: { sampleRate: 1, concurrency: 1, ...config.mirror },
      // These tests count the pair scoring's calls; the path check's own are test/path-e2e.test.ts's.
      path: { rate: 0 },
    },
    { listeners: { onPair: (p) => got.push(p) } },
  );
  t.after(() => lp.close());
  await send(new OpenAI({ baseURL: `${lp.proxyUrl}/v1`, apiKey: 'none', maxRetries: 0 }));
  await lp.runtime.mirror!.idle();
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  return { lp, pairs: got, metrics };
}

const PROMPT = (i: number) => `Prompt ${i}: a ferry crosses the river at dawn, carrying an old map and a lantern`;

test('vLLM --max-logprobs below mirror.topLogprobs: scoring learns the cap from the prompt_logprobs refusal, per backend and field, retries within it and counts it', async (t) => {
  const cand = await engine('vllm', { noise: 0.01 }, { maxLogprobs: 3 });
  const base = await engine('vllm', {}, { maxLogprobs: 3 });
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await pairs(t, cand, base, { mirror: { topLogprobs: 5 } }, async (c) => {
    for (let i = 0; i < 4; i++) await c.completions.create({ model: 'm', prompt: PROMPT(i), max_tokens: 6 });
  });
  assert.equal(r.pairs.length, 4);
  for (const p of r.pairs) {
    const s = p.analysis?.scored;
    assert.equal(s?.outcome, 'ok', JSON.stringify(s));
  }
  for (const backend of ['candidate', 'baseline']) {
    assert.equal(
      metricValue(r.metrics, 'logprobe_logprobs_capped_total', { backend, field: 'prompt_logprobs' }),
      1,
      `${backend}: one refusal, then within the cap`,
    );
    assert.equal(metricValue(r.metrics, 'logprobe_logprobs_capped_total', { backend, field: 'logprobs' }), 1);
  }
  const scoring = cand.requests
    .filter((q) => q.body.includes('"prompt_logprobs"'))
    .map((q) => (JSON.parse(q.body) as { prompt_logprobs: number }).prompt_logprobs);
  assert.deepEqual(scoring, [5, 3, 3, 3, 3], 'asked 5 once, refused, then 3');
  await r.lp.close();
  assert.ok(
    r.lp.logs.lines.some(
      (l) => String(l.msg) === 'candidate caps prompt_logprobs at 3: scoring now asks for at most 3 alternatives',
    ),
  );
});

test("vLLM's V2 model runner (prompt logprobs of the prompt token only): scoring still compares the chosen tokens and says that gaps and flips are unknown", async (t) => {
  const cand = await engine('vllm', { noise: 0.02 }, { v2ModelRunner: true });
  const base = await engine('vllm', {}, { v2ModelRunner: true });
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await pairs(t, cand, base, {}, async (c) => {
    for (let i = 0; i < 3; i++) await c.completions.create({ model: 'm', prompt: PROMPT(i), max_tokens: 6 });
  });
  for (const p of r.pairs) {
    const s = p.analysis!.scored!;
    assert.equal(s.outcome, 'ok', JSON.stringify(s));
    assert.match(s.method ?? '', /chosen tokens only: the engine returned no top-k, gaps and flips unknown/);
    assert.ok((s.comparable ?? 0) > 0, 'the chosen tokens are compared');
  }
});

test('SGLang from 0.5.4: a chat prompt is tokenized through /tokenize with messages; before, asked of a one-token chat generation with the request’s own inputs', async (t) => {
  for (const version of ['0.5.4', '0.5.0']) {
    const cand = await engine('sglang', { noise: 0.01 }, { engineVersion: version });
    const base = await engine('sglang', {}, { engineVersion: version });
    t.after(() => Promise.all([cand.close(), base.close()]));
    const r = await pairs(t, cand, base, {}, async (c) => {
      for (let i = 0; i < 2; i++)
        await c.chat.completions.create({
          model: 'm',
          messages: [{ role: 'user', content: PROMPT(i) }],
          max_tokens: 6,
          reasoning_effort: 'low',
          tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
        });
    });
    // The double's chat route returns no prompt_token_ids (as SGLang versions without it): chat
    // is then not scored, and says why.
    for (const p of r.pairs)
      assert.equal(
        p.analysis!.scored!.outcome,
        version === '0.5.4' ? 'ok' : 'unsupported',
        `${version}: ${JSON.stringify(p.analysis!.scored)}`,
      );
    // The baseline's prompt is prepared first (scoring.ts scorePair).
    const tokenizeChat = base.requests.filter((q) => q.path === '/tokenize' && q.body.includes('"messages"'));
    const oneToken = base.requests.filter(
      (q) => q.path === '/v1/chat/completions' && q.body.includes('"return_prompt_token_ids":true'),
    );
    if (version === '0.5.4') {
      assert.equal(tokenizeChat.length, 2, 'one /tokenize with messages per chat pair');
      assert.equal(oneToken.length, 0, 'no generation spent on a prompt');
    } else {
      assert.equal(tokenizeChat.length, 1, 'tried once, refused (text only), not again');
      assert.equal(oneToken.length, 2);
      const sent = JSON.parse(oneToken[0]!.body) as Record<string, unknown>;
      assert.equal(sent.reasoning_effort, 'low', 'the request’s own rendering inputs');
      assert.ok(Array.isArray(sent.tools));
      assert.equal(sent.max_tokens, 1);
    }
  }
});

test("vLLM chat rendering for scoring: the request's own add_generation_prompt, continue_final_message, documents, reasoning_effort (enable_thinking), tool_choice, response_format", () => {
  const tools = [{ type: 'function', function: { name: 'f' } }];
  const body = vllmTokenizeChat({
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    add_generation_prompt: false,
    continue_final_message: true,
    documents: [{ title: 't', text: 'x' }],
    reasoning_effort: 'none',
    tools,
    tool_choice: 'auto',
    response_format: { type: 'json_object' },
    chat_template_kwargs: { foo: 1 },
    temperature: 0.7,
  });
  assert.deepEqual(body, {
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    add_special_tokens: false,
    add_generation_prompt: false,
    continue_final_message: true,
    tools,
    tool_choice: 'auto',
    response_format: { type: 'json_object' },
    chat_template_kwargs: {
      foo: 1,
      documents: [{ title: 't', text: 'x' }],
      reasoning_effort: 'none',
      enable_thinking: false,
    },
  });
  const plain = vllmTokenizeChat({
    model: 'm',
    messages: [],
    reasoning_effort: 'high',
    chat_template_kwargs: { enable_thinking: false },
  });
  assert.equal(plain.add_generation_prompt, true, 'not set by the client: vLLM’s default');
  assert.deepEqual(
    plain.chat_template_kwargs,
    { enable_thinking: false, reasoning_effort: 'high' },
    "the client's enable_thinking wins, as build_chat_params leaves it",
  );
  assert.equal(
    vllmTokenizeChat({ messages: [], continue_final_message: true }).add_generation_prompt,
    false,
    'continuing the final message, no generation prompt',
  );
});

test("the prompt-logprob cap is read from vLLM's refusal; the copies' parser still leaves it out", () => {
  const refusal = {
    error: {
      message:
        'Requested prompt logprobs of 5, which is greater than max allowed: 3 (parameter=prompt_logprobs, value=5)',
      type: 'BadRequestError',
      code: 400,
    },
  };
  assert.equal(parsePromptLogprobLimit(400, refusal), 3);
  assert.equal(parseCapFor('prompt_logprobs', 400, refusal), 3);
  assert.equal(parseLogprobLimit(400, refusal), null, 'a copy asks no prompt logprobs');
  assert.equal(
    parsePromptLogprobLimit(400, {
      error: { message: 'Requested sample logprobs of 5, which is greater than max allowed: 3' },
    }),
    null,
  );
  assert.equal(parsePromptLogprobLimit(500, refusal), null);
});

test('unknown is unknown: a backend that has reported a cache count has its missing counts read as 0; a scoring that did not read the cache never stands in', () => {
  const counts = new CacheCounts();
  assert.deepEqual(counts.read('candidate', { first: null, second: null }), { first: null, second: null });
  assert.equal(probeShape(counts.read('candidate', { first: null, second: null })), 'unprobed');
  // SGLang / older vLLM: a count only above 0. The first seen makes the missing one a 0.
  assert.deepEqual(counts.read('candidate', { first: null, second: 32 }), { first: 0, second: 32 });
  assert.equal(probeShape(counts.read('candidate', { first: null, second: 32 })), 'cold_warm');
  assert.equal(
    probeShape(counts.read('candidate', { first: null, second: null })),
    'not_warm',
    'both cold, as the engine says by saying nothing',
  );
  assert.equal(counts.reported('baseline'), false, 'per backend');
  const free = { shifted: 5, comparable: 5, maxShift: 0.5 } as Comparison;
  const scored = {
    ...free,
    shifted: 0,
    comparable: 20,
    maxShift: 0.5,
    scored: { outcome: 'ok', shifted: 0, comparable: 20, maxShift: 0.001, readsCache: false },
  } as unknown as Comparison;
  assert.deepEqual(selfEvidence(scored), { shifted: 0, comparable: 20, maxShift: 0.5 });
  const other = {
    ...free,
    scored: { outcome: 'ok', shifted: 20, comparable: 20, maxShift: 0.9, readsCache: false },
  } as unknown as Comparison;
  assert.deepEqual(
    selfEvidence(other),
    { shifted: 5, comparable: 5, maxShift: 0.5 },
    'the warm run’s own positions, not the cold prefill',
  );
});

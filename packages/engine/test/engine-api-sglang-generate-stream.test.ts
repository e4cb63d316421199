/**
 * SGLang's native `/generate` as http_server.py `generate_request` and io_struct.py
 * `GenerateReqInput` serve it: `rid` is `meta_info.id`; a stream carries the whole state so far in
 * every `data:` event (cumulative text, `meta_info` with the logprob tuples) and ends with
 * `data: [DONE]`; a streamed request's ValueError is a 200 with one `{"error": {"message"}}` event.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { post, sseData, startSim } from './helpers/engine-sim.js';

async function stream(url: string, body: Record<string, unknown>): Promise<{ status: number; events: string[] }> {
  const res = await fetch(`${url}/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  return { status: res.status, events: sseData(await res.text()) };
}

test('rid is meta_info.id, streamed or not', async (t) => {
  const e = await startSim(t, { seed: 6 }, { api: 'sglang' });
  const r = await post(e.url, '/generate', {
    text: 'The cache',
    rid: 'req-42',
    sampling_params: { max_new_tokens: 2 },
  });
  assert.equal(r.json.meta_info.id, 'req-42');
  const s = await stream(e.url, { text: 'The cache', rid: 'req-43', sampling_params: { max_new_tokens: 2 } });
  assert.equal(s.events.at(-1), '[DONE]');
  for (const ev of s.events.slice(0, -1)) assert.equal(JSON.parse(ev).meta_info.id, 'req-43');
});

test('the stream: cumulative text and logprob tuples in every event, finish_reason in the last, then [DONE]', async (t) => {
  const e = await startSim(t, { seed: 6 }, { api: 'sglang' });
  const s = await stream(e.url, {
    text: 'The model of the cache',
    sampling_params: { max_new_tokens: 4, temperature: 0, ignore_eos: true },
    return_logprob: true,
    top_logprobs_num: 2,
    return_text_in_logprobs: true,
  });
  assert.equal(s.status, 200);
  assert.equal(s.events.at(-1), '[DONE]');
  const chunks = s.events.slice(0, -1).map((x) => JSON.parse(x));
  const last = chunks.at(-1);
  assert.equal(last.meta_info.finish_reason.type, 'length');
  for (let i = 1; i < chunks.length; i++) {
    assert.ok((chunks[i].text as string).startsWith(chunks[i - 1].text), 'text is cumulative');
    assert.ok(chunks[i].meta_info.output_token_logprobs.length >= chunks[i - 1].meta_info.output_token_logprobs.length);
  }
  assert.equal(last.meta_info.output_token_logprobs.length, 4);
  assert.equal(last.meta_info.output_top_logprobs.length, 4);
  for (const [lp, id, text] of last.meta_info.output_token_logprobs) {
    assert.equal(typeof lp, 'number');
    assert.equal(typeof id, 'number');
    assert.equal(typeof text, 'string');
  }
  assert.equal(last.meta_info.completion_tokens, 4);
  assert.equal(typeof last.meta_info.cached_tokens, 'number');
  assert.deepEqual(last.meta_info.input_token_logprobs[0].slice(0, 1), [null]);
});

test('a streamed request past the input (logprob_start_len): 200, one error event, then [DONE]; unstreamed: 400', async (t) => {
  const e = await startSim(t, { seed: 6 }, { api: 'sglang' });
  const body = {
    input_ids: [1, 2, 3],
    return_logprob: true,
    logprob_start_len: 5,
    sampling_params: { max_new_tokens: 1 },
  };
  const plain = await post(e.url, '/generate', body);
  assert.equal(plain.status, 400);
  assert.match(plain.json.error.message, /logprob_start_len=5 is higher than the number of input tokens/);
  const s = await stream(e.url, body);
  assert.equal(s.status, 200);
  assert.equal(s.events.length, 2);
  assert.deepEqual(Object.keys(JSON.parse(s.events[0] as string)), ['error']);
  assert.match(JSON.parse(s.events[0] as string).error.message, /logprob_start_len=5/);
  assert.equal(s.events[1], '[DONE]');
});

/**
 * The demo's --fault plan: every llama.cpp engine fault runs as itself on llama.cpp and as its
 * stand-in on the simulated engines; the simulated faults with a real counterpart run on
 * llama.cpp as that counterpart; local and tokenizer exist only on the simulated engines.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { planFault, UnknownDemoFaultError } from '@logprobe/engine';

test('--fault: what runs on llama.cpp and what stands in on the simulated engines', () => {
  const table: Array<[string, string | null, string]> = [
    ['zero-layer:1', 'zero-layer:1', 'state-shift'],
    ['drop-prompt-token:3', 'drop-prompt-token:3', 'state-shift'],
    ['kv:q4_0', 'kv:q4_0', 'state-shift'],
    ['kv:q8_0', 'kv:q8_0', 'subtle'],
    ['weight-noise:0.01', 'weight-noise:0.01', 'subtle'],
    ['flash-attention', 'flash-attention', 'noise'],
    ['weights:f16', 'weights:f16', 'noise'],
    ['batch:8', 'batch:8', 'noise'],
    ['flash-attention,zero-layer:0', 'flash-attention,zero-layer:0', 'state-shift'],
    ['state-shift', 'zero-layer:1', 'state-shift'],
    ['subtle', 'weight-noise:0.01', 'subtle'],
    ['noise', 'flash-attention', 'noise'],
    ['none', 'none', 'none'],
    ['local', null, 'local'],
    ['tokenizer', null, 'tokenizer'],
  ];
  for (const [requested, llama, sim] of table) {
    assert.deepEqual(planFault(requested), { requested, llama, sim }, requested);
  }
});

test('--fault: an unknown or malformed fault is refused with both lists', () => {
  for (const bad of ['gremlins', 'zero-layer:7', 'kv:q2', 'batch:0', 'weight-noise:2', '']) {
    assert.throws(
      () => planFault(bad),
      (err: unknown) =>
        err instanceof UnknownDemoFaultError &&
        /llama\.cpp engine fault \(zero-layer:L.*simulated one \(state-shift/.test(err.message),
      bad,
    );
  }
});

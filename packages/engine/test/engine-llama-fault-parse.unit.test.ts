import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CLEAN_SETUP, InvalidFaultError, parseFault } from '../src/llama/faults.js';

test('no fault is the clean setup: f32, no flash attention, f16 KV, default batch', () => {
  for (const f of [undefined, null, '', ' ', 'none']) assert.deepEqual(parseFault(f), CLEAN_SETUP);
  assert.deepEqual(CLEAN_SETUP, {
    variant: { weights: 'f32' },
    flashAttention: false,
    batchSize: null,
    kvKeyType: 'F16',
    kvValueType: 'F16',
    dropPromptToken: null,
    decodeStateToken: null,
    cacheHitToken: null,
  });
});

test('each fault form maps to the setup that reproduces it', () => {
  const cases: Array<[string, object]> = [
    ['zero-layer:1', { variant: { weights: 'f32', zeroAttentionOutputLayer: 1 } }],
    ['drop-prompt-token:3', { dropPromptToken: 3 }],
    ['decode-state:3', { decodeStateToken: 3 }],
    ['cache-hit:0', { cacheHitToken: 0 }],
    ['kv:q8_0', { kvKeyType: 'Q8_0' }],
    ['kv:q4_0', { kvKeyType: 'Q4_0', kvValueType: 'Q4_0', flashAttention: true }],
    ['weights:f16', { variant: { weights: 'f16' } }],
    ['flash-attention', { flashAttention: true }],
    ['batch:8', { batchSize: 8 }],
    ['weight-noise:0.01', { variant: { weights: 'f32', ffnDownNoise: 0.01 } }],
  ];
  for (const [fault, change] of cases) assert.deepEqual(parseFault(fault), { ...CLEAN_SETUP, ...change }, fault);
});

test('faults combine with commas', () => {
  assert.deepEqual(parseFault('weights:f16, batch:8'), { ...CLEAN_SETUP, variant: { weights: 'f16' }, batchSize: 8 });
});

test('a bad fault is rejected with a message naming it and the reason', () => {
  const cases: Array<[string, RegExp]> = [
    ['zero-layer:2', /zero-layer:2.*0 to 1/],
    ['zero-layer:x', /integer/],
    ['zero-layer', /integer/],
    ['drop-prompt-token:-1', /integer/],
    ['decode-state', /integer/],
    ['cache-hit:x', /integer/],
    ['kv:q5_1', /kv:q8_0 or kv:q4_0/],
    ['weights:bf16', /weights:f16/],
    ['flash-attention:1', /takes no argument/],
    ['batch:0', /1 to/],
    ['weight-noise:0', /relative noise/],
    ['weight-noise:abc', /relative noise/],
    ['bitflip', /unknown fault "bitflip".*zero-layer:L/],
    ['batch:8,', /empty item/],
  ];
  for (const [fault, message] of cases) {
    assert.throws(
      () => parseFault(fault),
      (err: unknown) => err instanceof InvalidFaultError && message.test(err.message),
      fault,
    );
  }
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spreadVerdict } from '../bench/streams-report.js';

test('a lane verdict only where the whole spread over rounds is on one side of the target', () => {
  assert.deepEqual(spreadVerdict([1.01, 0.98, 1.04], 1.05), { pass: true, noise: false, text: '1.01 (0.98–1.04)' });
  assert.deepEqual(spreadVerdict([1.2, 1.06, 1.3], 1.05), { pass: false, noise: false, text: '1.20 (1.06–1.30)' });
  const straddle = spreadVerdict([0.9, 1.1, 1.0], 1.05);
  assert.equal(straddle.pass, null);
  assert.equal(straddle.noise, true, 'the spread straddles 1.05: within noise, no verdict');
  assert.deepEqual(spreadVerdict([Number.NaN], 1), { pass: null, noise: false, text: '–' });
  assert.equal(spreadVerdict([1.05], 1.05).pass, true, 'at the target is within it');
});

/**
 * Two details of the printed reports: a histogram row whose label is longer than its share of the
 * row keeps its count in the column (`analyze`'s `(0.0001, 0.001]` decade), and the rate-limited
 * failure line says "1 failed copy", not "1 failed copies".
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import pino from 'pino';
import { Writable } from 'node:stream';
import { countCell } from '../src/report/text.js';
import { BackendHealth } from '../src/backend/health.js';

test('countCell ends every count in the last column, however long the label', () => {
  const rows = ['0', '(0, 0.0001]', '(0.0001, 0.001]', '(0.001, 0.01]', '> 10'].map((l, i) =>
    countCell(l, String([28, 0, 4, 49, 1234567][i]), 24),
  );
  for (const r of rows) assert.equal(r.length, 24, JSON.stringify(r));
  assert.equal(countCell('(0.0001, 0.001]', '4', 24), '(0.0001, 0.001]        4');
  // A label that fills the row still has a space before its count.
  assert.equal(countCell('x'.repeat(30), '7', 24), `${'x'.repeat(30)} 7`);
});

test('the rate-limited failure line counts its copies in the singular and the plural', () => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push((JSON.parse(chunk.toString()) as { msg: string }).msg);
      done();
    },
  });
  let now = 0;
  const health = new BackendHealth(
    pino({ level: 'warn' }, sink),
    [{ backend: 'baseline', url: 'http://127.0.0.1:1' }],
    () => {},
    () => now,
  );
  health.failed('baseline', 'baseline_error', 'HTTP 503: overloaded', 503);
  now = 60_000;
  health.failed('baseline', 'baseline_error', 'HTTP 503: overloaded', 503);
  now = 61_000;
  health.failed('baseline', 'baseline_error', 'HTTP 503: overloaded', 503);
  now = 120_000;
  health.failed('baseline', 'baseline_error', 'HTTP 503: overloaded', 503);
  return new Promise<void>((resolve) =>
    setImmediate(() => {
      assert.match(lines[1] ?? '', /\(1 failed copy in the last minute, 2 since the start\)/);
      assert.match(lines[2] ?? '', /\(2 failed copies in the last minute, 4 since the start\)/);
      resolve();
    }),
  );
});

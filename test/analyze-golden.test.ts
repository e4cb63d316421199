import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runCli } from './helpers/cli.js';

// A recorded capture set (test/fixtures/analyze-golden/record.ts: `serve` in front of simulated
// engines and fault servers, one pair per case: identical, noise, local/early/global shift,
// tokenizer mismatch (its two sides also read 45 and 30 prompt tokens: the tokenizer_mismatch
// verdict stands, the more precise one), incomparable, unparseable, candidate and baseline errors,
// with repeats and vLLM scoring) and what `analyze` printed for it when it was recorded. Any change to the pair
// classification, the comparison, the summary or its text shows here as a byte of difference.

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DIR = 'test/fixtures/analyze-golden';
const CAPTURES = `${DIR}/captures.jsonl`;

function expected(name: string): string {
  return readFileSync(`${ROOT}/${DIR}/${name}`, 'utf8');
}

test('analyze --json over the recorded capture set prints, byte for byte, the committed output', async () => {
  const res = await runCli(['analyze', '--json', CAPTURES], { cwd: ROOT, timeoutMs: 60_000 });
  assert.equal(res.stderr, '');
  assert.equal(res.code, 0);
  const want = expected('expected.jsonl');
  // The set covers every kind of pair it was recorded for (so a re-recording cannot quietly lose one).
  const kinds = new Set(
    want
      .trim()
      .split('\n')
      .map((l) => {
        const p = JSON.parse(l) as { verdict: string | null; outcome: string };
        return p.verdict ?? p.outcome;
      }),
  );
  assert.deepEqual([...kinds].sort(), [
    'baseline_error',
    'candidate_error',
    'early_shift',
    'global_shift',
    'identical',
    'incomparable',
    'local_shift',
    'noise',
    'tokenizer_mismatch',
    'unparseable',
  ]);
  assert.equal(res.stdout, want);
  // Records before v3 carry no slice: the request's model, cache unknown.
  for (const l of want.trim().split('\n')) {
    const p = JSON.parse(l) as { model: string; cache: string };
    assert.deepEqual([p.model, p.cache], ['sim', 'unknown']);
  }
});

test('analyze (text) over the recorded capture set prints, byte for byte, the committed report', async () => {
  const res = await runCli(['analyze', CAPTURES], { cwd: ROOT, timeoutMs: 60_000 });
  assert.equal(res.stderr, '');
  assert.equal(res.code, 0);
  assert.equal(res.stdout, expected('expected.txt'));
});

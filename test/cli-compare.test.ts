import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCli } from './helpers/cli.js';
import { chatBody, completionsStream, workedExample, step } from './core-bodies.js';

// The CLI runs the compiled sources (dist/), as after `npm ci`; `npm test` builds them first.

const dir = mkdtempSync(join(tmpdir(), 'logprobe-compare-'));
function file(name: string, body: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof body === 'string' ? body : JSON.stringify(body));
  return path;
}
const fixture = (name: string): string => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));

const example = workedExample();
const exampleCandidate = file('example-candidate.json', chatBody(example.candidate));
const exampleBaseline = file('example-baseline.json', chatBody(example.baseline));

test("the worked example's two files: the per-position table, the flip line, global_shift, exit 1", async () => {
  const r = await runCli(['compare', exampleCandidate, exampleBaseline]);
  assert.equal(r.code, 1, r.stderr);
  const lines = r.stdout.split('\n');
  assert.match(lines[0]!, /^pos\s+token\s+candidate\s+baseline\s+diff\s+top gap\s+shift$/);
  assert.match(lines[4]!, /^\s+3\s+" called"\s+-0\.790\s+-1\.300\s+\+0\.510\s+1\.200\s+0\.510\*$/);
  assert.match(r.stdout, /" Artificial"→" artificial"/);
  assert.match(
    r.stdout,
    /flip at 5: baseline " Artificial" → candidate " artificial", flip gap lp_b\(A\) − lp_b\(B\) 0\.450 nats \(systematic\), cross-path diff -0\.310/,
  );
  assert.match(r.stdout, /^verdict: global_shift$/m);
  assert.match(r.stdout, /suspect the shared prefill input \(KV cache \/ state\)/);
  // eslint-disable-next-line no-control-regex -- an ANSI escape is what it looks for
  assert.doesNotMatch(r.stdout, /\u001b\[/, 'no colour when stdout is not a TTY');
});

test('--json prints docs/format.md fields with numbers', async () => {
  const r = await runCli(['compare', '--json', exampleCandidate, exampleBaseline]);
  assert.equal(r.code, 1, r.stderr);
  const out = JSON.parse(r.stdout) as Record<string, unknown> & {
    flip: Record<string, unknown>;
    positions: Array<Record<string, unknown>>;
  };
  for (const key of [
    'verdict',
    'aligned',
    'comparable',
    'shifted',
    'firstDivergence',
    'maxAbsDiff',
    'meanAbsDiff',
    'maxShift',
    'shiftedFraction',
    'flip',
    'explanation',
    'positions',
  ]) {
    assert.ok(key in out, key);
  }
  assert.equal(out.verdict, 'global_shift');
  assert.equal(out.comparable, 6);
  assert.equal(out.firstDivergence, 5);
  assert.ok(Math.abs((out.flip.gap as number) - 0.45) < 1e-9);
  assert.equal(out.flip.class, 'systematic');
  assert.equal(out.flip.lowerBound, false);
  assert.deepEqual(Object.keys(out.positions[0]!).slice(0, 7), [
    'i',
    'token',
    'candidate',
    'baseline',
    'diff',
    'shift',
    'gap',
  ]);
});

test('identical streams exit 0; float noise exits 0', async () => {
  const sse = fixture('openai_completions_stream_logprobs5.sse');
  const same = await runCli(['compare', '--json', sse, sse]);
  assert.equal(same.code, 0, same.stderr);
  assert.equal((JSON.parse(same.stdout) as { verdict: string }).verdict, 'identical');
  const base = [step(' a', -0.5, [[' b', -1]]), step(' c', -0.25, [[' d', -2]]), step(' e', -0.125)];
  const noisy = [step(' a', -0.5004, [[' b', -1.0003]]), step(' c', -0.2502, [[' d', -2]]), step(' e', -0.125)];
  const r = await runCli(['compare', file('noisy.sse', completionsStream(noisy)), file('base.json', chatBody(base))]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^verdict: noise$/m);
  assert.match(r.stdout, /does not prove there is no bug/);
});

test('a tokenizer mismatch exits 1', async () => {
  const base = [step(' Hello', -0.1), step(' world', -0.2)];
  const split = [step(' Hel', -0.3), step('lo', -0.1), step(' world', -0.2)];
  const r = await runCli(['compare', file('split.json', chatBody(split)), file('whole.json', chatBody(base))]);
  assert.equal(r.code, 1);
  assert.match(r.stdout, /^verdict: tokenizer_mismatch$/m);
});

test('thresholds from flags and from --config change the verdict', async () => {
  // Above every shift: the systematic flip alone keeps it from noise.
  const floor = await runCli(['compare', '--json', '--noise-floor', '0.6', exampleCandidate, exampleBaseline]);
  const f = JSON.parse(floor.stdout) as { verdict: string; shifted: number };
  assert.equal(f.shifted, 0);
  assert.equal(f.verdict, 'local_shift');
  assert.equal(floor.code, 1);
  // And with the gap thresholds above 0.45 the flip is a near-tie: noise, exit 0.
  const tie = await runCli([
    'compare',
    '--noise-floor',
    '0.6',
    '--gap-ambiguous',
    '0.46',
    '--gap-systematic',
    '0.5',
    exampleCandidate,
    exampleBaseline,
  ]);
  assert.equal(tie.code, 0, tie.stderr);
  assert.match(tie.stdout, /near-tie, cannot be attributed/);
  const config = file('logprobe.yaml', 'analysis:\n  noiseFloor: 0.6\n  gapAmbiguous: 0.46\n  gapSystematic: 0.5\n');
  const fromConfig = await runCli(['compare', '--config', config, exampleCandidate, exampleBaseline]);
  assert.equal(fromConfig.code, 0, fromConfig.stderr);
});

test('unusable input exits 2 with one line naming the file, never a stack trace', async () => {
  const cases: Array<[string[], RegExp]> = [
    [[file('not-response.json', { hello: 'world' }), exampleBaseline], /not-response\.json: not a completion response/],
    [[exampleCandidate, join(dir, 'missing.json')], /missing\.json: no such file/],
    [[file('garbage.txt', 'this is not json'), exampleBaseline], /garbage\.txt: neither JSON nor an SSE stream/],
    [
      [
        file('error.json', { error: { message: 'model overloaded', type: 'server_error', code: 503 } }),
        exampleBaseline,
      ],
      /error\.json: the server returned an error: model overloaded/,
    ],
    [['--noise-floor', 'abc', exampleCandidate, exampleBaseline], /--noise-floor: expected a number/],
    [
      ['--gap-ambiguous', '0.5', '--gap-systematic', '0.4', exampleCandidate, exampleBaseline],
      /--gap-systematic \(0\.4\) must be ≥ --gap-ambiguous \(0\.5\)/,
    ],
  ];
  for (const [args, message] of cases) {
    const r = await runCli(['compare', ...args]);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0]!, /^logprobe: /);
    assert.match(lines[0]!, message);
    assert.doesNotMatch(r.stderr, /\n\s+at /);
  }
});

test('a response without logprobs: exit 2, "no logprobs in FILE", and --json still prints incomparable', async () => {
  const body = chatBody([step(' a', -0.1)]);
  (body.choices as Array<Record<string, unknown>>)[0]!.logprobs = null;
  const plain = file('plain.json', body);
  const r = await runCli(['compare', exampleCandidate, plain]);
  assert.equal(r.code, 2);
  assert.equal(r.stderr.trim(), `logprobe: no logprobs in ${plain}`);
  const j = await runCli(['compare', '--json', exampleCandidate, plain]);
  assert.equal(j.code, 2);
  assert.equal((JSON.parse(j.stdout) as { verdict: string }).verdict, 'incomparable');
});

/**
 * `logprobe canary check` and `canary build` as a deploy hook runs them: the built CLI against
 * simulated engines on port 0 (a twin of the baseline, and a candidate with a corrupted prefill
 * state), with a live baseline and with a reference golden file recorded from the probe file.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createSimModel, startEngineServer, type SimOptions } from '@logprobe/engine';
import { runCli } from './helpers/cli.js';
import { tempDir } from './helpers/capture.js';
import { DEFAULT_PROBES, parseProbe } from '../src/canary/probes.js';

function engine(o: SimOptions = {}) {
  return startEngineServer({ model: createSimModel({ seed: 21, id: 'm', ...o }), api: 'vllm' });
}

async function engines(t: { after(fn: () => unknown): void }) {
  const [base, twin, shifted] = await Promise.all([engine(), engine(), engine({ stateShift: 0.6 })]);
  t.after(() => Promise.all([base.close(), twin.close(), shifted.close()]));
  return { base, twin, shifted };
}

/** The built-in probes as a probe file (what `record` reads to make the reference). */
function builtinProbeFile(dir: string): string {
  const file = join(dir, 'probes.jsonl');
  writeFileSync(file, DEFAULT_PROBES.map((p) => JSON.stringify({ id: p.id, route: p.route, body: p.body })).join('\n'));
  return file;
}

test('canary check: a twin is the same (exit 0), a state-shifted candidate changed (exit 1), a line per probe and the summary', async (t) => {
  const { base, twin, shifted } = await engines(t);
  const same = await runCli(['canary', 'check', '--candidate', twin.url, '--baseline', base.url]);
  assert.equal(same.code, 0, same.stderr + same.stdout);
  const lines = same.stdout.trim().split('\n');
  assert.match(lines[0]!, /^canary check: .* against .*, model m$/);
  assert.equal(lines.length, 1 + DEFAULT_PROBES.length + 1);
  for (const p of DEFAULT_PROBES)
    assert.match(same.stdout, new RegExp(`^  ${p.id} +identical +max shift 0\\.000 nats  first-token gap \\d`, 'm'));
  assert.match(
    lines.at(-1)!,
    /^same: 0 of 12 probes shifted, pooled share 0\.000, decode-step share 0\.000 over \d+ positions .*permutation p 1\.00, spread test p 1\.00 over 12 probes/,
  );

  const changed = await runCli(['canary', 'check', '--candidate', shifted.url, '--baseline', base.url]);
  assert.equal(changed.code, 1, changed.stderr + changed.stdout);
  assert.match(changed.stdout, /^ {2}pick-number +(global|early|local)_shift +max shift \d/m);
  assert.match(
    changed.stdout.trim().split('\n').at(-1)!,
    /^changed: \d+ of 12 probes shifted, pooled share (0\.[5-9]|1\.0)\d*(, decode-step share [\d.]+ over \d+ positions)? \(changed at 0\.5\)/,
  );

  const json = await runCli(['canary', 'check', '--candidate', shifted.url, '--baseline', base.url, '--json']);
  assert.equal(json.code, 1);
  const o = JSON.parse(json.stdout);
  assert.equal(o.verdict, 'changed');
  assert.equal(o.rounds.length, 1);
  assert.equal(o.rounds[0].model, 'm');
  assert.equal(o.rounds[0].results.length, 12);
  assert.equal(typeof o.rounds[0].pValue, 'number');
  assert.equal(typeof o.rounds[0].spreadPValue, 'number');
});

test('canary check --reference: a golden file recorded by logprobe record from the probe file stands in for the baseline', async (t) => {
  const { base, twin, shifted } = await engines(t);
  const dir = tempDir(t);
  const probes = builtinProbeFile(dir);
  const ref = join(dir, 'ref.jsonl');
  const rec = await runCli(['record', probes, '--backend', base.url, '--out', ref]);
  assert.equal(rec.code, 0, rec.stderr + rec.stdout);
  const same = await runCli(['canary', 'check', '--candidate', twin.url, '--reference', ref, '--probes', probes]);
  assert.equal(same.code, 0, same.stderr + same.stdout);
  assert.match(same.stdout, /against reference .*ref\.jsonl/);
  assert.match(same.stdout, /^same: 0 of 12 probes shifted/m);
  const changed = await runCli(['canary', 'check', '--candidate', shifted.url, '--reference', ref, '--probes', probes]);
  assert.equal(changed.code, 1, changed.stderr + changed.stdout);
  assert.match(changed.stdout, /^changed: /m);
  // The built-in set without --probes is the same probes: the reference answers them too.
  const builtin = await runCli(['canary', 'check', '--candidate', twin.url, '--reference', ref]);
  assert.equal(builtin.code, 0, builtin.stderr + builtin.stdout);
});

test('canary check: usage errors exit 2 with one line naming the flag or FILE:LINE; an unreachable candidate exits 1 inconclusive', async (t) => {
  const { base, twin } = await engines(t);
  const dir = tempDir(t);
  const bad = join(dir, 'bad.jsonl');
  writeFileSync(bad, '{"route": "/v1/completions", "body": {"prompt": "hi"}}\n{"route": "/v1/chat", "body": {}}\n');
  const partial = join(dir, 'partial.jsonl');
  const probes = builtinProbeFile(dir);
  const rec = await runCli(['record', probes, '--backend', base.url, '--out', partial]);
  assert.equal(rec.code, 0);
  writeFileSync(partial, readFileSync(partial, 'utf8').split('\n').slice(1).join('\n'));
  const cases: Array<[string[], RegExp]> = [
    [['--candidate', twin.url], /--baseline URL or --reference GOLDEN is required/],
    [['--candidate', twin.url, '--baseline', base.url, '--reference', partial], /--baseline and --reference: give one/],
    [['--baseline', base.url], /--candidate URL is required/],
    [['--candidate', 'nope', '--baseline', base.url], /--candidate: expected an http\(s\) URL, got 'nope'/],
    [['--candidate', twin.url, '--baseline', 'http://TRUSTED:8000'], /--baseline .*TRUSTED is a placeholder/],
    [['--candidate', twin.url, '--baseline', base.url, '--probes', bad], /bad\.jsonl:2: "route": expected/],
    [
      ['--candidate', twin.url, '--baseline', base.url, '--probes', join(dir, 'none.jsonl')],
      /none\.jsonl: no such file/,
    ],
    [['--candidate', twin.url, '--reference', join(dir, 'none.jsonl')], /none\.jsonl: no such file/],
    [
      ['--candidate', twin.url, '--reference', partial],
      /--reference .*partial\.jsonl: no answer for 1 of 12 probes \(first: pick-number\)/,
    ],
  ];
  for (const [args, message] of cases) {
    const r = await runCli(['canary', 'check', ...args]);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, `one line: ${r.stderr}`);
    assert.match(lines[0]!, message);
    assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  }
  const down = await runCli(['canary', 'check', '--candidate', 'http://127.0.0.1:1', '--baseline', base.url]);
  assert.equal(down.code, 1, down.stderr + down.stdout);
  assert.match(
    down.stdout,
    /^inconclusive: the candidate answers nothing \(--candidate http:\/\/127\.0\.0\.1:1: GET \/v1\/models failed: ECONNREFUSED\)\n$/,
  );
  const baseDown = await runCli(['canary', 'check', '--candidate', twin.url, '--baseline', 'http://127.0.0.1:1']);
  assert.equal(baseDown.code, 1);
  assert.match(
    baseDown.stdout,
    /^inconclusive: none of 12 probes could be compared \(pick-number: baseline_error, ECONNREFUSED/m,
  );
  const help = await runCli(['--help']);
  assert.match(help.stdout, /^ {2}canary /m);
});

test('canary build: probes by first-token gap, round-robin over (route, model) slices, each a valid probe; duplicates, other routes and failures counted', async (t) => {
  const { base, twin } = await engines(t);
  const dir = tempDir(t);
  const prompts = join(dir, 'prompts.txt');
  const plain = [
    'The quick brown fox',
    'My favourite colour is',
    'I flipped a coin and it landed on',
    'The capital of France is',
    'The quick brown fox',
    'Once upon a time',
    'A random letter of the alphabet:',
    'The best day of the week is',
  ];
  const chat = ['Pick a number', 'Say a word', 'Name a city', 'Heads or tails?'].map((content) =>
    JSON.stringify({ route: '/v1/chat/completions', body: { messages: [{ role: 'user', content }] } }),
  );
  const other = JSON.stringify({ route: '/v1/responses', body: { input: 'hi' } });
  writeFileSync(prompts, [...plain, ...chat, other, ''].join('\n'));
  const out = join(dir, 'probes.jsonl');
  const r = await runCli([
    'canary',
    'build',
    '--prompts',
    prompts,
    '--backend',
    base.url,
    '--out',
    out,
    '--count',
    '9',
    '--rank',
    'gap',
  ]);
  assert.equal(r.code, 0, r.stderr + r.stdout);
  assert.match(
    r.stdout,
    /^read 13 lines from .*prompts\.txt: 11 distinct prompts; skipped 1 duplicate, 1 not a probe route$/m,
  );
  assert.match(r.stdout, /^measured 11 of 11 on /m);
  assert.match(
    r.stdout,
    /^kept 9 probes \(3 decode\) over 2 \(route, model\) slices to .*probes\.jsonl, gaps .*; skipped 1 below the flip-noise floor, 1 over --count or --per-route$/m,
  );
  const lines = readFileSync(out, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.equal(lines.length, 9);
  const probes = lines.map((l, i) => {
    const p = parseProbe(l, String(i));
    assert.ok(!('error' in p), JSON.stringify(p));
    assert.equal(typeof p.gap, 'number');
    return p;
  });
  // Round-robin over the slices: both routes have probes; three decode probes, the rest one token.
  const both =
    2 * Math.min(...['/v1/completions', '/v1/chat/completions'].map((r) => probes.filter((p) => p.route === r).length));
  assert.ok(both >= 6, `both slices have probes: ${both}`);
  assert.equal(probes.filter((p) => p.body.max_tokens === undefined).length, 3, 'three decode probes');
  assert.equal(probes[1]!.body.max_tokens, undefined, 'the first decode probe second in line');
  for (const route of ['/v1/completions', '/v1/chat/completions']) {
    const gaps = probes.filter((p) => p.route === route && p.body.max_tokens === 1).map((p) => p.gap!);
    assert.deepEqual(
      gaps,
      [...gaps].sort((a, b) => a - b),
      `${route} first-token probes smallest gap first`,
    );
  }
  // The probe file is a check's --probes and a record input.
  const check = await runCli(['canary', 'check', '--candidate', twin.url, '--baseline', base.url, '--probes', out]);
  assert.equal(check.code, 0, check.stderr + check.stdout);

  // --min-gap above every gap: nothing kept (exit 1), the floor's skips counted; a dead backend's failures named.
  const none = await runCli([
    'canary',
    'build',
    '--prompts',
    prompts,
    '--backend',
    base.url,
    '--out',
    join(dir, 'none.jsonl'),
    '--min-gap',
    '100',
  ]);
  assert.equal(none.code, 1, none.stderr + none.stdout);
  assert.match(none.stdout, /^kept no probe: nothing written to .*; skipped 11 below the flip-noise floor$/m);
  const dead = await runCli([
    'canary',
    'build',
    '--prompts',
    prompts,
    '--backend',
    'http://127.0.0.1:1',
    '--out',
    join(dir, 'dead.jsonl'),
  ]);
  assert.equal(dead.code, 1);
  assert.match(
    dead.stdout,
    /^measured 0 of 11 on http:\/\/127\.0\.0\.1:1 .*; first failure: prompts\.txt:1: ECONNREFUSED/m,
  );
  for (const [args, message] of [
    [['--backend', base.url, '--out', out], /give one of --from CAPTURE…, --prompts FILE and --generated/],
    [['--prompts', prompts, '--from', prompts, '--backend', base.url, '--out', out], /give one of --from/],
    [['--generated', '--prompts', prompts, '--backend', base.url, '--out', out], /give one of --from/],
    [['--prompts', prompts, '--out', out], /--backend URL is required/],
    [['--prompts', prompts, '--backend', base.url], /--out FILE is required/],
    [['--prompts', join(dir, 'missing.txt'), '--backend', base.url, '--out', out], /missing\.txt: no such file/],
    [['--prompts', prompts, '--backend', base.url, '--out', out, '--count', '0'], /--count: must be ≥ 1/],
  ] as Array<[string[], RegExp]>) {
    const u = await runCli(['canary', 'build', ...args]);
    assert.equal(u.code, 2, `${args.join(' ')}: ${u.stderr}`);
    assert.equal(u.stderr.trim().split('\n').length, 1, u.stderr);
    assert.match(u.stderr, message);
  }
});

test('canary build --from a capture: its mirrored requests are the candidates, the model kept as a slice', async (t) => {
  const { base } = await engines(t);
  const dir = tempDir(t);
  const prompts = join(dir, 'set.jsonl');
  writeFileSync(
    prompts,
    ['Artificial intelligence is', 'def fibonacci(n):', 'The capital of France is']
      .map((prompt) => JSON.stringify({ route: '/v1/completions', body: { model: 'm', prompt, max_tokens: 8 } }))
      .join('\n'),
  );
  const golden = join(dir, 'golden.jsonl');
  assert.equal((await runCli(['record', prompts, '--backend', base.url, '--out', golden])).code, 0);
  const out = join(dir, 'probes.jsonl');
  const r = await runCli(['canary', 'build', '--from', golden, '--backend', base.url, '--out', out]);
  assert.equal(r.code, 0, r.stderr + r.stdout);
  const probes = readFileSync(out, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.equal(probes.length, 3);
  for (const p of probes) assert.equal(p.model, 'm');
});

test('canary build --generated: the 783 short prompts measured on the trusted backend, the most worth per token kept, a check runs on them', async (t) => {
  const { twin, base } = await engines(t);
  const dir = tempDir(t);
  const out = join(dir, 'generated.jsonl');
  const r = await runCli(['canary', 'build', '--generated', '--backend', base.url, '--out', out, '--count', '12'], {
    timeoutMs: 120_000,
  });
  assert.equal(r.code, 0, r.stderr + r.stdout);
  assert.match(r.stdout, /^read 783 lines from the generated set/m);
  assert.match(r.stdout, /^measured 783 of 783 on /m);
  const probes = readFileSync(out, 'utf8')
    .trim()
    .split('\n')
    .map((l, i) => parseProbe(JSON.parse(l), String(i)));
  assert.equal(probes.length, 12);
  for (const p of probes) assert.ok(!('error' in p) && typeof p.gap === 'number');
  const check = await runCli(['canary', 'check', '--candidate', twin.url, '--baseline', base.url, '--probes', out]);
  assert.equal(check.code, 0, check.stderr + check.stdout);
});

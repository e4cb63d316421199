// The README's golden-file block (`<!-- readme-test: golden -->`), run as written with the
// defaults (no config file): record a trusted engine, then gate a build against the golden file
// with the README's four gates. With an identical build every gate passes — the logits gate over
// the top-10 it needs, which `record` asks for by itself, in the answers and in their scoring.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { asHere, readmeBlock, runLine } from './helpers/readme.js';
import { createSimModel, startEngineServer } from '@logprobe/engine';

test("the README's golden example works as written with the defaults: record, then every gate passes on the same build", async (t) => {
  const lines = readmeBlock('golden');
  assert.equal(lines.length, 2, lines.join('\n'));
  // A llama-server double: it scores, so the golden records carry their teacher-forced steps.
  const engine = await startEngineServer({
    model: createSimModel({ seed: 11, id: 'm' }),
    api: 'llamacpp',
    concurrency: 0,
  });
  const cwd = mkdtempSync(join(tmpdir(), 'logprobe-readme-golden-'));
  t.after(async () => {
    await engine.close();
    rmSync(cwd, { recursive: true, force: true });
  });
  copyFileSync(new URL('../config/golden-prompts.example.jsonl', import.meta.url), join(cwd, 'prompts.jsonl'));
  const env = { TRUSTED: engine.url, NEW: engine.url };
  const record = await runLine(asHere(lines[0]!), cwd, env);
  assert.equal(record.code, 0, record.out);
  assert.match(record.out, /recorded 24 prompts to .*golden\.jsonl: 24 usable/);
  const replay = await runLine(asHere(lines[1]!), cwd, env);
  assert.equal(replay.code, 0, replay.out);
  for (const gate of [
    "PASS logits:0.01: largest \\|Δ logprob\\| over each side's top-10 0\\.000",
    'PASS tokens:128',
    'PASS kl:0.05',
    'PASS definition',
  ])
    assert.match(replay.out, new RegExp(gate), replay.out);
  assert.doesNotMatch(replay.out, /shortest list read/);
  for (const f of ['golden.jsonl', 'gate.xml', 'replay.jsonl', 'replay.html']) assert.ok(existsSync(join(cwd, f)), f);

  // One top-k from recording to gating: the answers and the engine's scoring of them both at 10…
  assert.match(record.out, /scored 24 \(.*\) with the top-10;/);
  const golden = readFileSync(join(cwd, 'golden.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map(
      (l) =>
        JSON.parse(l) as {
          request: { top_logprobs?: number; logprobs?: unknown };
          scored: { topK: number; continuation: unknown[][] };
        },
    );
  for (const g of golden) {
    assert.equal(g.request.top_logprobs ?? g.request.logprobs, 10);
    assert.equal(g.scored.topK, 10);
    assert.ok(g.scored.continuation.every((step) => (step[3] as unknown[]).length === 10));
  }
  // …so against a build that differs (scored positions compared), Health and Gates both read the top-10.
  const noisy = await startEngineServer({
    model: createSimModel({ seed: 11, id: 'm', noise: 0.01 }),
    api: 'llamacpp',
    concurrency: 0,
  });
  t.after(() => noisy.close());
  const differs = await runLine(asHere(lines[1]!), cwd, { ...env, NEW: noisy.url });
  assert.equal(differs.code, 1, differs.out);
  assert.match(differs.out, /^ {2}largest \|Δ logprob\| over each side's top-10: \d/m, differs.out);
  assert.match(differs.out, /^ {2}FAIL logits:0\.01: largest \|Δ logprob\| over each side's top-10 \d/m, differs.out);
  assert.doesNotMatch(differs.out, /top-5|top lists of/);
  assert.match(
    readFileSync(join(cwd, 'replay.jsonl'), 'utf8'),
    /"scored":\{"outcome":"ok"/,
    'scored positions compared',
  );
  // A golden file whose scoring holds fewer (an older record, an engine's cap) cannot pass a top-10 gate: refused, named.
  writeFileSync(
    join(cwd, 'golden5.jsonl'),
    readFileSync(join(cwd, 'golden.jsonl'), 'utf8').replaceAll('"topK":10', '"topK":5'),
  );
  const five = await runLine(asHere(lines[1]!.replace('golden.jsonl', 'golden5.jsonl')), cwd, env);
  assert.equal(five.code, 2, five.out);
  assert.match(
    five.out,
    /--gate logits:0\.01 compares each side's top-10: the golden records of golden5\.jsonl were scored with the top-5/,
  );
});

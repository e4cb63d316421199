// The README's golden-file block (`<!-- readme-test: golden -->`), run as written with the
// defaults (no config file): record a trusted engine, then gate a build against the golden file
// with the README's four gates. With an identical build every gate passes — the logits gate over
// the top-10 it needs, which `record` asks for by itself (#26 point 5).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
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
});

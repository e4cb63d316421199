// docs/vllm.md is a recipe a user follows top to bottom, with logprobe installed: its steps are there in
// order, for vLLM and for SGLang, and every `logprobe.yaml` it shows is a config logprobe accepts
// with the values the text says.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config/load.js';

const DOC = readFileSync(new URL('../docs/vllm.md', import.meta.url), 'utf8');

test('docs/vllm.md: the steps in order — servers, probe, logprobe.yaml and serve, clients, keys and captures, the gate — and the same for SGLang', () => {
  const steps = [
    '## 1. Start the two servers',
    '## 2. Check what each server offers',
    '## 3. `logprobe.yaml`, and start logprobe',
    '## 4. Point the clients at logprobe',
    '## 5. Keys and what the captures keep',
    '## 6. The CI gate',
    '## The same with SGLang',
  ];
  let at = -1;
  for (const s of steps) {
    const i = DOC.indexOf(s);
    assert.ok(i > at, `"${s}" after the step before it`);
    at = i;
  }
  for (const needed of [
    'logprobe serve --config logprobe.yaml',
    'logprobe probe http://127.0.0.1:8000',
    'http://logprobe-host:8080/v1',
    'baseline.forwardAuth',
    'capture.includePrompts: false',
    '--baseline-from golden.jsonl',
    '--gate logits:0.01',
    'logprobe probe http://127.0.0.1:30000',
    '--enable-cache-report',
    '--admin-api-key',
  ])
    assert.ok(DOC.includes(needed), needed);
  // A user follows it in a directory of their own, with logprobe installed (npx only works in a clone).
  assert.ok(DOC.includes('../README.md#install-on-your-own-machine'), 'the install step is referenced');
  assert.doesNotMatch(DOC, /npx logprobe/);
});

test('every logprobe.yaml in docs/vllm.md is a valid config with the engines and top-k the text says', (t) => {
  const blocks = [...DOC.matchAll(/```yaml\n(# logprobe\.yaml[^\n]*)\n([\s\S]*?)```/g)];
  assert.equal(blocks.length, 2, 'the vLLM and the SGLang logprobe.yaml');
  const dir = mkdtempSync(join(tmpdir(), 'logprobe-docs-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = { BASELINE_API_KEY: 'baseline-key-123', SGLANG_ADMIN_API_KEY: 'admin-key-456' };
  const engines: string[] = [];
  for (const [i, b] of blocks.entries()) {
    const file = join(dir, `logprobe-${i}.yaml`);
    writeFileSync(file, `${b[1]}\n${b[2]}`);
    const c = loadConfig({ file, env });
    assert.equal(c.listen.port, 8080, b[1]);
    assert.ok(c.mirror.topLogprobs >= 10, `${b[1]}: top-10 for the logits gate`);
    assert.equal(c.baseline.apiKey, 'baseline-key-123', b[1]);
    assert.equal(c.candidate.engine, c.baseline.engine, b[1]);
    engines.push(c.candidate.engine);
  }
  assert.deepEqual(engines, ['vllm', 'sglang']);
});

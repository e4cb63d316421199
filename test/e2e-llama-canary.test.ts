/**
 * `logprobe canary check` on real numerics: llama.cpp engine processes (threads 1, bitwise
 * deterministic), the built-in probe set. A twin of the baseline is the same (exit 0); a candidate
 * whose weights carry 0.3% noise (`weight-noise:0.003`) moves each probe's logprobs by 0.015–0.024
 * nats — under the default floor of 0.1, and up as often as down, so neither the pooled share nor
 * the |Σd| permutation test sees it — and is judged changed (exit 1) by the spread test: every
 * probe shifted more than the baseline's own repeat of it (README "Canaries").
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { spawnLlamaEngine } from '@logprobe/engine';
import { llamaSkip } from './helpers/llama-e2e.js';
import { runCli } from './helpers/cli.js';
import { tempDir } from './helpers/capture.js';
import { DEFAULT_PROBES } from '../src/canary/probes.js';

const skip = llamaSkip;

test(
  'llama.cpp: canary check against a twin exits 0, against weight-noise:0.003 exits 1 (live baseline and recorded reference)',
  { skip },
  async (t) => {
    const [baseline, twin, noisy] = await Promise.all([
      spawnLlamaEngine({ seed: 1 }),
      spawnLlamaEngine({ seed: 1 }),
      spawnLlamaEngine({ seed: 1, fault: 'weight-noise:0.003' }),
    ]);
    t.after(() => Promise.all([baseline.stop(), twin.stop(), noisy.stop()]));
    const json = async (args: string[], code: number) => {
      const r = await runCli(['canary', 'check', ...args, '--json'], { timeoutMs: 120_000 });
      assert.equal(r.code, code, `${args.join(' ')}: ${r.stderr}${r.stdout}`);
      const round = JSON.parse(r.stdout).rounds[0];
      t.diagnostic(`${args.join(' ')}: ${round.summary}`);
      return round;
    };
    const same = await json(['--candidate', twin.url, '--baseline', baseline.url], 0);
    assert.equal(same.compared, DEFAULT_PROBES.length);
    assert.equal(same.maxShift, 0, 'twins are bit for bit the same');
    const changed = await json(['--candidate', noisy.url, '--baseline', baseline.url], 1);
    assert.equal(changed.verdict, 'changed');
    assert.equal(changed.compared, DEFAULT_PROBES.length);
    assert.ok(changed.maxShift > 0 && changed.maxShift < 0.1, `under the default floor: ${changed.maxShift}`);
    assert.ok(changed.spreadPValue <= 0.01, `the spread test decides: ${changed.spreadPValue}`);

    // The reference: the probe file recorded from the trusted build; the candidate alone is sent.
    const dir = tempDir(t);
    const probes = join(dir, 'probes.jsonl');
    writeFileSync(
      probes,
      DEFAULT_PROBES.map((p) => JSON.stringify({ id: p.id, route: p.route, body: p.body })).join('\n'),
    );
    const ref = join(dir, 'ref.jsonl');
    const rec = await runCli(['record', probes, '--backend', baseline.url, '--out', ref], { timeoutMs: 120_000 });
    assert.equal(rec.code, 0, rec.stderr + rec.stdout);
    await json(['--candidate', twin.url, '--reference', ref, '--probes', probes], 0);
    await json(['--candidate', noisy.url, '--reference', ref, '--probes', probes], 1);
  },
);

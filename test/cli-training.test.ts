/**
 * `compare` and `analyze` of token-logprob files (docs/training.md) through the built CLI, on
 * files written the way a script outside the project writes them (plain JSON from the numbers,
 * not through logprobe's code): the trainer's side against an engine's vLLM-shaped answer or
 * another such file, the figures checked against the numbers computed here.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli } from './helpers/cli.js';
import { tempDir } from './helpers/capture.js';

function rows(n: number, seed: number): number[][] {
  let x = seed >>> 0;
  const rnd = () => {
    x = (x * 1103515245 + 12345) >>> 0;
    return x / 2 ** 32;
  };
  return Array.from({ length: n }, () => {
    const z = Array.from({ length: 40 }, () => 3 * (rnd() - 0.5) + (rnd() < 0.1 ? 3 : 0));
    const m = Math.max(...z);
    const lse = m + Math.log(z.reduce((a, v) => a + Math.exp(v - m), 0));
    return z.map((v) => v - lse);
  });
}

/** The trainer's dump: ids, the chosen logprobs, the top-5 as {"<id>": lp}. */
function trainerLine(id: string, lp: number[][], chosen: number[]): string {
  return JSON.stringify({
    id,
    token_ids: chosen,
    logprobs: chosen.map((c, i) => lp[i]![c]),
    top_logprobs: lp.map((r) =>
      Object.fromEntries(
        r
          .map((v, j) => [String(j), v] as const)
          .sort((a, b) => b[1] - a[1])
          .slice(0, 5),
      ),
    ),
  });
}

test('compare: a trainer file against vLLM prompt_logprobs (either order); KL, relative error, ratio and the worst positions in text and --json', async (t) => {
  const dir = tempDir(t);
  const infer = rows(20, 5);
  const chosen = infer.map((r, i) => [...r.keys()].sort((a, b) => r[b]! - r[a]!)[i % 4]!);
  // The trainer computes slightly differently: every logprob of position i moved by a known amount on its chosen token.
  const delta = chosen.map((_, i) => (i === 7 ? 0.3 : 0.001 * ((i % 3) - 1)));
  const train = infer.map((r, i) => r.map((v, j) => (j === chosen[i] ? v + delta[i]! : v)));
  writeFileSync(join(dir, 'train.jsonl'), `${trainerLine('seq-0', train, chosen)}\n`);
  const prefix = [1, 2, 3];
  const ids = [...prefix, ...chosen];
  const prompt_logprobs: unknown[] = [null];
  for (let i = 1; i < ids.length; i++) {
    const r = i >= prefix.length ? infer[i - prefix.length]! : rows(1, 90 + i)[0]!;
    const top = r
      .map((v, j) => [j, v] as const)
      .sort((a, b) => b[1] - a[1])
      .slice(0, 5);
    const entry: Record<string, unknown> = Object.fromEntries(
      top.map(([j, v], k) => [String(j), { logprob: v, rank: k + 1, decoded_token: `w${j}` }]),
    );
    entry[String(ids[i])] = { logprob: r[ids[i]!], rank: 7, decoded_token: `w${ids[i]}` };
    prompt_logprobs.push(entry);
  }
  writeFileSync(
    join(dir, 'vllm.json'),
    JSON.stringify({
      id: 'cmpl-1',
      object: 'text_completion',
      choices: [{ index: 0, text: 'x', prompt_logprobs, prompt_token_ids: ids, finish_reason: 'length' }],
    }),
  );

  for (const args of [
    ['train.jsonl', 'vllm.json'],
    ['vllm.json', 'train.jsonl'],
  ]) {
    const r = await runCli(['compare', ...args.map((a) => join(dir, a))]);
    assert.equal(r.code, 1, r.stdout + r.stderr); // position 7 moved 0.3 nats: a local shift
    assert.match(
      r.stdout,
      new RegExp(`train \\(candidate\\): ${join(dir, 'train.jsonl').replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}`),
    );
    assert.match(
      r.stdout,
      /importance ratio exp\(lp_train − lp_infer\) over 20 positions: mean [\d.]+, min 0\.99\d+, max 1\.3499; 1 \(5\.0%\) outside \[0\.8, 1\.25\]/,
    );
    assert.match(r.stdout, /worst positions[^\n]*\n {2}@7 /);
    assert.match(r.stdout, /alignment: by token ids: the 20 positions of the trainer at offset 2 of the engine's 22/);
    assert.match(r.stdout, /relative error max\s+0\.3499\s+ABOVE/);
  }
  const j = await runCli(['compare', '--json', join(dir, 'train.jsonl'), join(dir, 'vllm.json')]);
  const o = JSON.parse(j.stdout) as {
    training: { ratio: { max: number; outside: number; n: number } };
    health: { relErr: { max: number; mean: number }; kl: { mean: number } };
    definition: unknown[];
    id: string;
    verdict: string;
  };
  assert.equal(o.id, 'seq-0');
  assert.equal(o.verdict, 'local_shift');
  assert.ok(Math.abs(o.training.ratio.max - Math.exp(0.3)) < 1e-9);
  const rel = delta.map((d) => Math.abs(Math.expm1(d)));
  assert.ok(Math.abs(o.health.relErr.max - Math.max(...rel)) < 1e-9);
  assert.ok(Math.abs(o.health.relErr.mean - rel.reduce((a, b) => a + b) / rel.length) < 1e-9);
  assert.deepEqual(o.definition, []);
});

test('compare: the trainer forgot the temperature; a trainer that dumped probabilities — each warning names the definition that differs', async (t) => {
  const dir = tempDir(t);
  const raw = rows(30, 9);
  const chosen = raw.map((r, i) => [...r.keys()].sort((a, b) => r[b]! - r[a]!)[(i * 3) % 5]!);
  const scaled = raw.map((r) => {
    const z = r.map((v) => v / 0.8);
    const m = Math.max(...z);
    const lse = m + Math.log(z.reduce((a, v) => a + Math.exp(v - m), 0));
    return z.map((v) => v - lse);
  });
  writeFileSync(join(dir, 'train.jsonl'), `${trainerLine('a', raw, chosen)}\n`);
  writeFileSync(join(dir, 'rollout.jsonl'), `${trainerLine('a', scaled, chosen)}\n`);
  const r = await runCli(['compare', join(dir, 'train.jsonl'), join(dir, 'rollout.jsonl')]);
  assert.match(
    r.stdout,
    /definition: temperature_scaled \(both\)[^\n]*temperature differs[^\n]*× 0\.800[^\n]*T ≈ 1\.25/,
  );
  const probs = JSON.parse(trainerLine('a', raw, chosen)) as {
    logprobs: number[];
    top_logprobs: Array<Record<string, number>>;
  };
  probs.logprobs = probs.logprobs.map(Math.exp);
  probs.top_logprobs = probs.top_logprobs.map((d) =>
    Object.fromEntries(Object.entries(d).map(([k, v]) => [k, Math.exp(v)])),
  );
  writeFileSync(join(dir, 'probs.json'), JSON.stringify(probs));
  const p = await runCli(['compare', '--json', join(dir, 'probs.json'), join(dir, 'train.jsonl')]);
  const o = JSON.parse(p.stdout) as { definition: Array<{ check: string; side: string; detail: string }> };
  assert.deepEqual(
    o.definition.map((d) => [d.check, d.side]),
    [['probabilities', 'candidate']],
  );
  assert.match(o.definition[0]!.detail, /probabilities, not logprobs/);
});

test('analyze: two token-logprob files of several sequences paired by id; --json one object per sequence; --html with the health section; bad pairing is exit 2', async (t) => {
  const dir = tempDir(t);
  const lines: string[] = [];
  const other: string[] = [];
  for (let s = 0; s < 4; s++) {
    const lp = rows(12, 30 + s);
    const chosen = lp.map((r, i) => [...r.keys()].sort((a, b) => r[b]! - r[a]!)[i % 2]!);
    lines.push(trainerLine(`s${s}`, lp, chosen));
    other.unshift(
      trainerLine(
        `s${s}`,
        lp.map((r) => r.map((v) => v + 1e-4)),
        chosen,
      ),
    ); // reversed order: paired by id
  }
  writeFileSync(join(dir, 'a.jsonl'), `${lines.join('\n')}\n`);
  writeFileSync(join(dir, 'b.jsonl'), `${other.join('\n')}\n`);
  const r = await runCli(['analyze', join(dir, 'a.jsonl'), join(dir, 'b.jsonl'), '--html', join(dir, 'r.html')]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^4 sequences$/m);
  assert.match(r.stdout, /relative error max\s+1\.0e-4|relative error max\s+0\.0001/);
  const html = readFileSync(join(dir, 'r.html'), 'utf8');
  assert.match(html, /<section id="health">/);
  const j = await runCli(['analyze', '--json', join(dir, 'a.jsonl'), join(dir, 'b.jsonl')]);
  const objs = j.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { id: string; training: { positions: number } });
  assert.deepEqual(
    objs.map((o) => [o.id, o.training.positions]),
    [
      ['s0', 12],
      ['s1', 12],
      ['s2', 12],
      ['s3', 12],
    ],
  );
  writeFileSync(
    join(dir, 'c.jsonl'),
    `${lines
      .slice(0, 3)
      .map((l) => JSON.stringify({ ...JSON.parse(l), id: undefined }))
      .join('\n')}\n`,
  );
  const bad = await runCli(['analyze', join(dir, 'a.jsonl'), join(dir, 'c.jsonl')]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /4 sequences on one side and 3 on the other/);
});

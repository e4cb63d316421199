/**
 * The logits/tokens/KL gates and the training-vs-inference comparison on real llama.cpp numerics:
 * golden records from a clean engine, replayed against faults — each gate fails for its
 * own reason and passes on a clean build —, renormalised and temperature-scaled sides made from
 * real responses, the JUnit report read by a JUnit parser, and the engine as rollout engine
 * (sampled, temperature 1) against itself as "trainer" on f16 weights (vLLM prompt_logprobs).
 * Engines are `logprobe engine --llama --api vllm` processes; needs the built CLI.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parse as parseJunit, type TestSuite, type TestSuites } from 'junit2json';
import { spawnLlamaEngine, type LlamaEngineProcess } from '@logprobe/engine';
import { llamaSkip, E2E_PROMPTS } from './helpers/llama-e2e.js';
import { runCli } from './helpers/cli.js';

const skip = llamaSkip;

type Json = Record<string, any>;

async function post(url: string, path: string, body: unknown): Promise<Json> {
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return (await res.json()) as Json;
}

/**
 * A candidate that is the clean engine with its generated logprobs transformed (what an engine
 * that renormalises after top-p, or applies a temperature before reporting, would send). Scoring
 * requests (prompt_logprobs) and everything else pass through untouched.
 */
async function transformingProxy(
  target: string,
  transform: (topLogprobs: Array<Record<string, number>>, chosen: number[], tokens: string[]) => void,
): Promise<{ url: string; close: () => Promise<void> }> {
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      void (async () => {
        const up = await fetch(target + req.url, {
          method: req.method,
          headers: { 'content-type': 'application/json' },
          body: req.method === 'GET' ? undefined : raw,
        });
        let text = await up.text();
        const body = raw ? (JSON.parse(raw) as Json) : {};
        if (req.url?.endsWith('/v1/completions') && body.prompt_logprobs === undefined && up.status === 200) {
          const j = JSON.parse(text) as Json;
          const lp = j.choices[0].logprobs;
          transform(lp.top_logprobs, lp.token_logprobs, lp.tokens);
          text = JSON.stringify(j);
        }
        res.writeHead(up.status, {
          'content-type': up.headers.get('content-type') ?? 'application/json',
          server: up.headers.get('server') ?? '',
        });
        res.end(text);
      })().catch((err: unknown) => {
        res.writeHead(502);
        res.end(String(err));
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

/** Top-p 0.9 applied and the survivors renormalised; the listed tokens outside the nucleus keep their raw values. */
function topP(tops: Array<Record<string, number>>, chosen: number[], tokens: string[]): void {
  tops.forEach((d, i) => {
    const e = Object.entries(d).sort((a, b) => b[1] - a[1]);
    const kept: string[] = [];
    let cum = 0;
    for (const [t, v] of e) {
      if (cum >= 0.9) break;
      kept.push(t);
      cum += Math.exp(v);
    }
    const z = Math.log(kept.reduce((a, t) => a + Math.exp(d[t]!), 0));
    for (const t of kept) d[t] = d[t]! - z;
    if (d[tokens[i]!] !== undefined) chosen[i] = d[tokens[i]!]!;
  });
}

/** Logits divided by T = 0.8 before the logprobs were taken (normalised over the listed tokens and a tail). */
function temperature(tops: Array<Record<string, number>>, chosen: number[], tokens: string[]): void {
  tops.forEach((d, i) => {
    const e = Object.entries(d).map(([t, v]) => [t, v / 0.8] as const);
    const m = Math.max(...e.map((x) => x[1]));
    const z = m + Math.log(e.reduce((a, x) => a + Math.exp(x[1] - m), 0) + 0.01);
    for (const [t, v] of e) d[t] = v - z;
    if (d[tokens[i]!] !== undefined) chosen[i] = d[tokens[i]!]!;
  });
}

const suites = (j: TestSuites | TestSuite | null | undefined): TestSuite[] =>
  ((j as TestSuites | null)?.testsuite ?? []) as TestSuite[];

describe('golden gates and the training comparison on llama.cpp', { skip }, () => {
  let baseline: LlamaEngineProcess;
  let f16: LlamaEngineProcess;
  let dir: string;
  let prompts: string;
  let golden: string;
  let config: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'logprobe-golden-'));
    [baseline, f16] = await Promise.all([
      spawnLlamaEngine({ seed: 1, api: 'vllm' }),
      spawnLlamaEngine({ seed: 1, api: 'vllm', fault: 'weights:f16' }),
    ]);
  });
  after(async () => {
    await Promise.all([baseline?.stop(), f16?.stop()]);
    rmSync(dir, { recursive: true, force: true });
  });

  test('record: golden records with the baseline side and its own scoring; analyze says what they are', async () => {
    prompts = join(dir, 'prompts.jsonl');
    writeFileSync(
      prompts,
      E2E_PROMPTS.map((p, i) =>
        JSON.stringify(
          i % 2 === 0
            ? { route: '/v1/completions', model: 'm', prompt: p, max_tokens: 16 }
            : {
                route: '/v1/chat/completions',
                body: { model: 'm', messages: [{ role: 'user', content: p }], max_tokens: 16 },
              },
        ),
      ).join('\n') + '\n',
    );
    config = join(dir, 'gate.yaml');
    writeFileSync(config, 'mirror:\n  topLogprobs: 10\n  maxTokens: 16\nanalysis:\n  scoring:\n    when: always\n');
    golden = join(dir, 'golden.jsonl');
    const r = await runCli(['record', prompts, '--backend', baseline.url, '--out', golden, '--config', config], {
      timeoutMs: 120_000,
    });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /recorded 6 prompts .*: 6 usable/);
    // A chat answer whose text the engine re-tokenises differently is not scored, and says why.
    assert.match(r.stdout, /scored [4-6] \(vllm \/v1\/completions prompt_logprobs\)/);
    const records = readFileSync(golden, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Json);
    assert.equal(records.length, 6);
    for (const rec of records) {
      assert.equal(rec.v, 3);
      assert.equal(rec.golden, true);
      assert.equal(rec.candidate, null);
      assert.equal(rec.baseline.status, 200);
      assert.match(rec.key, /^sha256:[0-9a-f]{64}$/);
      if (rec.scored.outcome !== 'ok') {
        assert.equal(rec.scored.outcome, 'unsupported');
        assert.match(rec.scored.reason, /token ids/);
        continue;
      }
      assert.equal(rec.scored.continuation.length, 16);
      assert.ok(rec.scored.prompt.length > 0);
      assert.equal(rec.scored.topK, 10);
    }
    assert.ok(records.filter((x) => x.scored.outcome === 'ok').length >= 4);
    const a = await runCli(['analyze', golden]);
    assert.equal(a.code, 2);
    assert.match(a.stderr, /6 golden records .*not analysed/);
    assert.match(a.stderr, /golden records only/);
  });

  test('replay --baseline-from: a clean build passes every gate; f16 weights fail logits only; a zeroed layer fails tokens, kl and logits; JUnit read by a parser', async () => {
    const clean = await spawnLlamaEngine({ seed: 1, api: 'vllm' });
    const zero = await spawnLlamaEngine({ seed: 1, api: 'vllm', fault: 'zero-layer:1' });
    try {
      const gates = ['--gate', 'logits:0.005,tokens:16', '--gate', 'kl:0.05', '--gate', 'definition'];
      const run = (url: string, name: string) =>
        runCli(
          [
            'replay',
            prompts,
            '--candidate',
            url,
            '--baseline-from',
            golden,
            ...gates,
            '--fail-on',
            'none',
            '--out',
            join(dir, `${name}.jsonl`),
            '--junit',
            join(dir, `${name}.xml`),
            '--json',
          ],
          {
            timeoutMs: 120_000,
          },
        );

      const ok = await run(clean.url, 'clean');
      assert.equal(ok.code, 0, ok.stdout + ok.stderr);
      const okJson = JSON.parse(ok.stdout) as Json;
      assert.deepEqual(
        okJson.gates.map((g: Json) => [g.gate, g.passed]),
        [
          ['logits:0.005', true],
          ['tokens:16', true],
          ['kl:0.05', true],
          ['definition', true],
        ],
      );
      assert.equal(okJson.health.logits.max, 0, 'two clean engines agree bitwise');
      assert.match(
        ok.stderr,
        /^gate: PASS \(--fail-on none; logits:0\.005, tokens:16, kl:0\.05, definition passed\)$/m,
      );

      const half = await run(f16.url, 'f16');
      assert.equal(half.code, 1, half.stdout + half.stderr);
      const hj = JSON.parse(half.stdout) as Json;
      const byGate = Object.fromEntries(hj.gates.map((g: Json) => [g.kind, g]));
      assert.equal(byGate.logits.passed, false, `f16 moves the top-10 logprobs: ${byGate.logits.summary}`);
      assert.ok(byGate.logits.figure > 0.005 && byGate.logits.figure < 0.1, String(byGate.logits.figure));
      assert.equal(byGate.tokens.passed, true, byGate.tokens.summary);
      assert.equal(byGate.kl.passed, true);
      assert.equal(byGate.definition.passed, true);
      assert.ok(hj.health.kl.mean < 1e-3 && hj.health.relErr.max < 0.15, JSON.stringify(hj.health));
      assert.match(hj.line, /^gate: FAIL \(logits:0\.005 on \d of 6 prompts\)$/);

      const bad = await run(zero.url, 'zero');
      assert.equal(bad.code, 1);
      const bj = JSON.parse(bad.stdout) as Json;
      const zg = Object.fromEntries(bj.gates.map((g: Json) => [g.kind, g]));
      assert.equal(zg.tokens.passed, false);
      assert.equal(zg.tokens.failed, 6, zg.tokens.summary);
      assert.match(zg.tokens.worst[0].message, /token ids differ at position \d+ of the first 16/);
      assert.equal(zg.kl.passed, false);
      assert.ok(zg.kl.figure > 0.05);
      assert.equal(zg.logits.passed, false);
      assert.ok(['scored', 'prompt', 'free'].some((b) => zg.logits.worst[0].message.includes(`${b} position`)));
      assert.equal(bj.health.ok.kl, false);
      assert.ok(bj.health.relErr.max > 0.15);

      // The JUnit report, as a CI system reads it.
      const junit = await parseJunit(readFileSync(join(dir, 'zero.xml'), 'utf8'));
      const s = suites(junit);
      assert.deepEqual(
        s.map((x) => x.name),
        ['gate logits:0.005', 'gate tokens:16', 'gate kl:0.05', 'gate definition', 'verdict gate (--fail-on none)'],
      );
      const tokenSuite = s[1]!;
      assert.equal(tokenSuite.tests, 6);
      assert.equal(tokenSuite.failures, 6);
      assert.equal(tokenSuite.testcase!.length, 6);
      assert.match(tokenSuite.testcase![0]!.name!, /^prompts\.jsonl:1 \/v1\/completions$/);
      assert.match(tokenSuite.testcase![0]!.failure![0]!.message!, /token ids differ at position/);
      assert.equal(s[3]!.failures, 0, 'a zeroed layer is not a definition problem');
      assert.equal((junit as TestSuites).failures, 6 * 3);
      const okJunit = suites(await parseJunit(readFileSync(join(dir, 'clean.xml'), 'utf8')));
      assert.ok(okJunit.every((x) => x.failures === 0 && x.errors === 0));
      assert.ok(okJunit[0]!.testcase!.every((c) => c.failure === undefined));
    } finally {
      await Promise.all([clean.stop(), zero.stop()]);
    }
  });

  test('a renormalised top-p candidate and a temperature-scaled one fail the definition gate, each named', async () => {
    for (const [name, fn, check, words] of [
      ['topp', topP, 'renormalised_subset', /normalisation domain differs: full vocabulary vs a truncated subset/],
      ['temp', temperature, 'temperature_scaled', /temperature differs: .*T ≈ 0\.80/],
    ] as const) {
      const proxy = await transformingProxy(baseline.url, fn);
      try {
        const r = await runCli(
          [
            'replay',
            prompts,
            '--candidate',
            proxy.url,
            '--baseline-from',
            golden,
            '--gate',
            'definition',
            '--fail-on',
            'none',
            '--out',
            join(dir, `${name}.jsonl`),
            '--junit',
            join(dir, `${name}.xml`),
          ],
          { timeoutMs: 120_000 },
        );
        assert.equal(r.code, 1, r.stdout + r.stderr);
        assert.match(
          r.stdout,
          new RegExp(`definition warnings[^]*${check} \\(${check === 'temperature_scaled' ? 'both' : 'candidate'}\\)`),
        );
        assert.match(r.stdout, words);
        assert.match(r.stdout, /^gate: FAIL \(definition on \d of 6 prompts\)$/m);
        const s = suites(await parseJunit(readFileSync(join(dir, `${name}.xml`), 'utf8')));
        const def = s.find((x) => x.name === 'gate definition')!;
        assert.ok(def.failures! > 0);
        assert.ok(def.testcase!.some((c) => c.failure?.[0]?.message?.includes(check)));
      } finally {
        await proxy.close();
      }
    }
  });

  test('usage errors before anything is sent: a prompt missing from the golden file, a logits gate on top-5', async () => {
    const more = join(dir, 'more.jsonl');
    writeFileSync(
      more,
      `${readFileSync(prompts, 'utf8')}${JSON.stringify({ route: '/v1/completions', model: 'm', prompt: 'not recorded', max_tokens: 16 })}\n`,
    );
    const missing = await runCli(['replay', more, '--candidate', baseline.url, '--baseline-from', golden]);
    assert.equal(missing.code, 2);
    assert.match(
      missing.stderr,
      /has no golden record for 1 input: .*more\.jsonl:7 \(\/v1\/completions "not recorded"\)/,
    );
    // record asks for the top-10 the logits gate compares even where the config says 5 (the default)…
    const top10 = join(dir, 'golden10.jsonl');
    const r = await runCli(['record', prompts, '--backend', baseline.url, '--out', top10, '--max-tokens', '4'], {
      timeoutMs: 60_000,
    });
    assert.equal(r.code, 0, r.stderr);
    const recorded = readFileSync(top10, 'utf8');
    assert.match(recorded, /"(top_)?logprobs":10\b/);
    assert.doesNotMatch(recorded, /"(top_)?logprobs":5\b/);
    // …so a golden file with fewer is one written otherwise (an older logprobe, a backend capped below 10).
    const top5 = join(dir, 'golden5.jsonl');
    writeFileSync(
      top5,
      recorded.replace(/"(top_)?logprobs":10\b/g, (_m, p: string | undefined) => `"${p ?? ''}logprobs":5`),
    );
    const refused = await runCli([
      'replay',
      prompts,
      '--candidate',
      baseline.url,
      '--baseline-from',
      top5,
      '--gate',
      'logits',
    ]);
    assert.equal(refused.code, 2);
    assert.match(
      refused.stderr,
      /--gate logits:0\.01 compares each side's top-10: the golden records .* asked for 5 top logprobs .*mirror\.topLogprobs/,
    );
    const live = await runCli([
      'replay',
      prompts,
      '--candidate',
      baseline.url,
      '--baseline',
      baseline.url,
      '--gate',
      'logits',
    ]);
    assert.equal(live.code, 2);
    assert.match(live.stderr, /mirror\.topLogprobs is 5/);
    // A golden file is a replay input too, and tokens:128 says the recording capped it.
    const self = await runCli([
      'replay',
      top5,
      '--candidate',
      baseline.url,
      '--baseline-from',
      top5,
      '--gate',
      'tokens',
      '--out',
      join(dir, 'self.jsonl'),
    ]);
    assert.equal(self.code, 0, self.stdout + self.stderr);
    assert.match(
      self.stderr,
      /--gate tokens:128: the golden records were generated with max_tokens 4, so only the first 4 tokens can be checked/,
    );
  });

  test('training vs inference: the engine as rollout engine (sampled, temperature 1) and on f16 weights as trainer (prompt_logprobs); then a trainer that forgot the temperature', async () => {
    const rollouts: string[] = [];
    const trainer: string[] = [];
    const hot: string[] = [];
    for (const [k, prompt] of E2E_PROMPTS.slice(0, 3).entries()) {
      const r = await post(baseline.url, '/v1/completions', {
        model: 'm',
        prompt,
        max_tokens: 32,
        temperature: 1,
        seed: 11 + k,
        logprobs: 10,
        return_token_ids: true,
      });
      rollouts.push(JSON.stringify({ ...r, id: `s${k}` }));
      // The trainer's side, as a training script would dump it: ids, log_softmax gathered at the labels, the top-10 by id.
      const ids = ((await post(f16.url, '/tokenize', { model: 'm', prompt })) as { tokens: number[] }).tokens;
      const gen = r.choices[0].token_ids as number[];
      const scored = await post(f16.url, '/v1/completions', {
        model: 'm',
        prompt: [...ids, ...gen],
        max_tokens: 1,
        prompt_logprobs: 10,
      });
      const rows = (
        scored.choices[0].prompt_logprobs as Array<Record<string, { logprob: number; rank: number }>>
      ).slice(ids.length);
      const top = rows.map((d) =>
        Object.fromEntries(
          Object.entries(d)
            .filter(([, v]) => v.rank <= 10)
            .map(([id, v]) => [id, v.logprob]),
        ),
      );
      trainer.push(
        JSON.stringify({
          id: `s${k}`,
          token_ids: gen,
          logprobs: rows.map((d, i) => d[String(gen[i])]!.logprob),
          top_logprobs: top,
        }),
      );
      // log_softmax(logits / 0.8) where the engine used 1: the gaps between tokens grow by 1/0.8.
      hot.push(
        JSON.stringify({
          id: `s${k}`,
          token_ids: gen,
          logprobs: rows.map((d, i) => d[String(gen[i])]!.logprob / 0.8),
          top_logprobs: top.map((d) => Object.fromEntries(Object.entries(d).map(([id, v]) => [id, v / 0.8]))),
        }),
      );
    }
    const dirT = join(dir, 'training');
    mkdirSync(dirT, { recursive: true });
    writeFileSync(join(dirT, 'rollout.jsonl'), `${rollouts.join('\n')}\n`);
    writeFileSync(join(dirT, 'trainer.jsonl'), `${trainer.join('\n')}\n`);
    writeFileSync(join(dirT, 'trainer-hot.jsonl'), `${hot.join('\n')}\n`);

    const r = await runCli(['analyze', join(dirT, 'rollout.jsonl'), join(dirT, 'trainer.jsonl')]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(
      r.stdout,
      /train \(candidate\): .*trainer\.jsonl/,
      'the token-logprob file is the trainer, whichever order',
    );
    assert.match(r.stdout, /^3 sequences$/m);
    const kl = Number(/KL mean\s+(\S+)\s+ok/.exec(r.stdout)?.[1]);
    assert.ok(kl < 0.05, r.stdout);
    assert.match(r.stdout, /relative error mean\s+\S+\s+ok/);
    assert.match(
      r.stdout,
      /importance ratio exp\(lp_train − lp_infer\) over 96 positions: mean 1\.00\d+, min 0\.9\d+, max 1\.0\d+; 0 \(0\.0%\) outside \[0\.8, 1\.25\]/,
    );
    assert.doesNotMatch(r.stdout, /^definition:/m);

    const j = await runCli(['analyze', '--json', join(dirT, 'trainer.jsonl'), join(dirT, 'rollout.jsonl')]);
    const seqs = j.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Json);
    assert.deepEqual(
      seqs.map((s) => [s.id, s.training.positions, s.definition.length]),
      [
        ['s0', 32, 0],
        ['s1', 32, 0],
        ['s2', 32, 0],
      ],
    );

    const h = await runCli(['analyze', join(dirT, 'trainer-hot.jsonl'), join(dirT, 'trainer.jsonl')]);
    assert.match(
      h.stdout,
      /^definition: temperature_scaled \(both\) on 3 sequences: temperature differs: the candidate's top-k gaps are the baseline's × 1\.250/m,
    );
    assert.match(h.stdout, /relative error max\s+\S+\s+ABOVE/);
  });
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startSim } from './helpers/sim.js';
import { runCli } from './helpers/cli.js';
import { tempDir } from './helpers/capture.js';
import { startUpstream } from './helpers/upstream.js';

const GOLDEN = fileURLToPath(new URL('../config/golden-prompts.example.jsonl', import.meta.url));
const KEY = 'sk-baseline-replay-9876';

function mixOf(stdout: string): Record<string, number> {
  const mix: Record<string, number> = {};
  for (const m of stdout.matchAll(/^ {2}(\w+) +([\d,]+) +[\d.]+%/gm))
    if (m[2] !== '0') mix[m[1]!] = Number(m[2]!.replace(/,/g, ''));
  return mix;
}

test('the CI gate: the golden prompts against a noisy candidate exit 0, against a corrupted one exit 1; the new capture analyses to the same verdicts', async (t) => {
  const dir = tempDir(t);
  const baseline = await startSim();
  const noisy = await startSim({ noise: 0.001 });
  const corrupted = await startSim({ stateShift: 0.6 });
  t.after(() => Promise.all([baseline.close(), noisy.close(), corrupted.close()]));
  const env = { LOGPROBE_BASELINE_API_KEY: KEY };

  const pass = await runCli(
    ['replay', GOLDEN, '--candidate', noisy.url, '--baseline', baseline.url, '--out', join(dir, 'noisy.jsonl')],
    { env },
  );
  assert.equal(pass.code, 0, pass.stdout + pass.stderr);
  assert.match(pass.stdout, /^gate: PASS \(no global_shift, no local_shift, no tokenizer_mismatch\)$/m);
  assert.deepEqual(mixOf(pass.stdout), { noise: 24 });

  const out = join(dir, 'corrupted.jsonl');
  const fail = await runCli(
    ['replay', GOLDEN, '--candidate', corrupted.url, '--baseline', baseline.url, '--out', out, '--concurrency', '8'],
    { env },
  );
  assert.equal(fail.code, 1, fail.stdout + fail.stderr);
  assert.match(fail.stdout, /^gate: FAIL \(global_shift \d+\)$/m);
  assert.match(fail.stdout, new RegExp(`^capture: ${out}$`, 'm'));
  assert.equal(statSync(out).mode & 0o777, 0o600);

  // Every prompt went through the mirror's rewrite and the baseline got its key, which the capture does not hold.
  const copies = baseline.requests.filter((r) => r.path.endsWith('completions'));
  assert.equal(copies.length, 48);
  for (const c of copies) {
    const b = JSON.parse(c.body) as Record<string, unknown>;
    assert.equal(b.temperature, 0);
    assert.ok(b.logprobs === true || b.logprobs === 5);
    assert.equal(c.headers.authorization, `Bearer ${KEY}`);
  }
  const capture = readFileSync(out, 'utf8');
  assert.ok(!capture.includes(KEY));
  const records = capture
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { id: string; analysis: { verdict: string } });
  assert.equal(records.length, 24);
  assert.ok(
    records.every((r) => /^golden-prompts\.example\.jsonl:\d+$/.test(r.id)),
    'ids point back at the input line',
  );

  const analysed = await runCli(['analyze', '--json', out]);
  const offline: Record<string, number> = {};
  for (const l of analysed.stdout.trim().split('\n')) {
    const v = (JSON.parse(l) as { verdict: string }).verdict;
    offline[v] = (offline[v] ?? 0) + 1;
  }
  assert.deepEqual(offline, mixOf(fail.stdout), "analyze of the replay capture gives the replay's verdicts");

  // A capture is a replay input too: the same requests, again.
  const again = await runCli([
    'replay',
    out,
    '--candidate',
    corrupted.url,
    '--baseline',
    baseline.url,
    '--out',
    join(dir, 'again.jsonl'),
    '--fail-on',
    'global_shift,early_shift',
  ]);
  assert.equal(again.code, 1);
  assert.equal(readFileSync(join(dir, 'again.jsonl'), 'utf8').trim().split('\n').length, 24);
  const none = await runCli([
    'replay',
    out,
    '--candidate',
    corrupted.url,
    '--baseline',
    baseline.url,
    '--out',
    join(dir, 'none.jsonl'),
    '--fail-on',
    'none',
  ]);
  assert.equal(none.code, 0, 'fail-on none never fails');
});

test('prompt-set lines: {route, body} and {route, …fields}; bad lines are reported as file:line and skipped; --max-tokens', async (t) => {
  const dir = tempDir(t);
  const baseline = await startSim();
  const candidate = await startSim();
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const prompts = join(dir, 'prompts.jsonl');
  writeFileSync(
    prompts,
    [
      JSON.stringify({
        route: '/v1/chat/completions',
        body: { messages: [{ role: 'user', content: 'hello' }], temperature: 1.5, max_tokens: 4 },
      }),
      JSON.stringify({ route: '/v1/completions', prompt: 'The capital of France is', max_tokens: 4 }),
      JSON.stringify({ route: '/v1/embeddings', input: 'x' }),
      JSON.stringify({ route: '/v1/chat/completions', body: { prompt: 'no messages' } }),
      'not json',
      JSON.stringify({ prompt: 'no route' }),
    ].join('\n'),
  );
  const res = await runCli([
    'replay',
    prompts,
    '--candidate',
    candidate.url,
    '--baseline',
    baseline.url,
    '--out',
    join(dir, 'o.jsonl'),
    '--max-tokens',
    '12',
  ]);
  assert.equal(res.code, 0, res.stdout + res.stderr);
  assert.deepEqual(mixOf(res.stdout), { identical: 2 });
  assert.deepEqual(res.stderr.trim().split('\n'), [
    `${prompts}:3: route '/v1/embeddings' is neither a /completions nor a /chat/completions path`,
    `${prompts}:4: a chat request needs "messages" (a list)`,
    `${prompts}:5: invalid JSON (Unexpected token 'o', "not json" is not valid JSON)`,
    `${prompts}:6: not a capture record or a prompt-set line (no "route")`,
  ]);
  const sent = candidate.requests.map((r) => JSON.parse(r.body) as Record<string, unknown>);
  assert.equal(sent.length, 2);
  assert.ok(
    sent.every((b) => b.max_tokens === 12 && b.temperature === 0),
    "--max-tokens replaces the input's budget",
  );
});

test('usage errors exit 2; a replay where nothing could be compared exits 1', async (t) => {
  const dir = tempDir(t);
  const sim = await startSim();
  t.after(() => sim.close());
  const bad = join(dir, 'bad.jsonl');
  writeFileSync(bad, 'junk\n');
  const base = ['--candidate', sim.url, '--baseline', sim.url];
  const cases: Array<[string[], RegExp]> = [
    [['replay', GOLDEN, '--baseline', sim.url], /^logprobe: --candidate URL is required\n$/],
    [
      ['replay', GOLDEN, '--candidate', 'ftp://x', '--baseline', sim.url],
      /^logprobe: --candidate: expected an http\(s\) URL, got 'ftp:\/\/x'\n$/,
    ],
    [['replay', join(dir, 'missing.jsonl'), ...base], /^logprobe: .*missing\.jsonl: no such file\n$/],
    [['replay', GOLDEN, ...base, '--concurrency', '0'], /^logprobe: --concurrency: must be ≥ 1, got 0\n$/],
    [['replay', GOLDEN, ...base, '--fail-on', 'global_shift,typo'], /^logprobe: --fail-on: unknown item 'typo'/],
    [['replay', GOLDEN, ...base, '--out', dir], /^logprobe: .*: is a directory\n$/],
    [
      ['replay', GOLDEN, ...base, '--out', join(bad, 'x.jsonl')],
      /^logprobe: .*x\.jsonl: a part of the path is not a directory\n$/,
    ],
    [['replay', bad, ...base, '--out', join(dir, 'x.jsonl')], /logprobe: nothing to replay in/],
  ];
  for (const [args, err] of cases) {
    const res = await runCli(args);
    assert.equal(res.code, 2, `${args.join(' ')}: ${res.stderr}`);
    assert.match(
      res.stderr
        .split('\n')
        .filter((l) => !l.includes('bad.jsonl:1'))
        .join('\n'),
      err,
    );
  }
  const down = await runCli([
    'replay',
    GOLDEN,
    '--candidate',
    'http://127.0.0.1:9',
    '--baseline',
    sim.url,
    '--out',
    join(dir, 'down.jsonl'),
  ]);
  assert.equal(down.code, 1, 'a gate does not pass on no evidence');
  assert.match(down.stdout, /not compared: candidate_error 24/);
  // The gate names the cause with its count: it is in the records, and now on the FAIL line too.
  assert.match(
    down.stdout,
    /^gate: FAIL \(no pair could be compared: candidate_error 24: ECONNREFUSED 127\.0\.0\.1:9\)$/m,
  );
  assert.match(down.stdout, /^ {2}candidate_error: ECONNREFUSED 127\.0\.0\.1:9 \(24\)$/m, 'and the report lists it');
  // A baseline that refuses: the status and the error envelope's message.
  const refusing = await startUpstream((_req, res) => {
    res.writeHead(401, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"invalid api key","type":"auth_error","param":null,"code":null}}');
  });
  t.after(() => refusing.close());
  const denied = await runCli([
    'replay',
    GOLDEN,
    '--candidate',
    sim.url,
    '--baseline',
    refusing.url,
    '--out',
    join(dir, 'denied.jsonl'),
  ]);
  assert.equal(denied.code, 1, denied.stderr);
  assert.match(
    denied.stdout,
    /^gate: FAIL \(no pair could be compared: baseline_error 24: HTTP 401: invalid api key\)$/m,
  );
});

test('an --out that opens but takes no bytes is exit 2 before any request is sent; /dev/null still works', async (t) => {
  const baseline = await startSim();
  let requests = 0;
  const candidate = await startUpstream((_req, res) => {
    requests++;
    res.writeHead(500).end();
  });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const base = ['--candidate', candidate.url, '--baseline', baseline.url];
  for (const [out, reason] of [
    ['/proc/version', 'input/output error'],
    ['/dev/full', 'no space left on device'],
  ] as const) {
    const res = await runCli(['replay', GOLDEN, ...base, '--out', out]);
    assert.equal(res.code, 2, `${out}: ${res.stdout}${res.stderr}`);
    assert.equal(res.stderr, `logprobe: ${out}: ${reason}\n`);
    assert.doesNotMatch(res.stdout, /gate:/, 'no gate decided');
  }
  assert.equal(requests, 0, 'nothing was sent');
  const mode = statSync('/dev/null').mode;
  const discard = await runCli([
    'replay',
    GOLDEN,
    '--candidate',
    baseline.url,
    '--baseline',
    baseline.url,
    '--out',
    '/dev/null',
  ]);
  assert.equal(discard.code, 0, discard.stderr);
  assert.match(discard.stdout, /^gate: PASS/m);
  assert.equal(statSync('/dev/null').mode, mode, '/dev/null keeps its mode');
});

test("replay learns a backend's logprobs cap from its 400 like the live mirror: one refusal per field, then every copy within it", async (t) => {
  const dir = tempDir(t);
  const sim = await startSim();
  t.after(() => sim.close());
  const asked: number[] = [];
  // vLLM started with --max-logprobs 2, in front of the simulated engine.
  const capped = await startUpstream(async (req, res, body) => {
    const b = JSON.parse(body.toString()) as Record<string, unknown>;
    const k = typeof b.top_logprobs === 'number' ? b.top_logprobs : typeof b.logprobs === 'number' ? b.logprobs : 0;
    asked.push(k);
    if (k > 2) {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          object: 'error',
          message: `Requested sample logprobs of ${k}, which is greater than max allowed: 2`,
          type: 'BadRequestError',
          param: null,
          code: 400,
        }),
      );
      return;
    }
    const up = await fetch(sim.url + req.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    res.writeHead(up.status, { 'content-type': 'application/json' });
    res.end(await up.text());
  });
  t.after(() => capped.close());
  const out = join(dir, 'capped.jsonl');
  const res = await runCli([
    'replay',
    GOLDEN,
    '--candidate',
    capped.url,
    '--baseline',
    sim.url,
    '--out',
    out,
    '--concurrency',
    '1',
  ]);
  assert.equal(res.code, 0, res.stdout + res.stderr);
  // One refusal per field (chat's top_logprobs, completions' logprobs: OpenAI caps them differently), then within the cap.
  assert.equal(asked.filter((k) => k > 2).length, 2, `refused copies: ${asked.join(',')}`);
  const records = readFileSync(out, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { outcome: string; request: Record<string, unknown> });
  assert.equal(records.length, 24);
  assert.ok(
    records.every((r) => r.outcome === 'ok'),
    'every pair compared',
  );
  assert.ok(
    records.every((r) => (r.request.top_logprobs ?? r.request.logprobs) === 2),
    'both sides compared over the same top-2',
  );
});

test("replay sends candidate.model / baseline.model from --config as each backend's model", async (t) => {
  const dir = tempDir(t);
  const sim = await startSim();
  const models: Record<string, unknown[]> = { candidate: [], baseline: [] };
  const front = (side: string) =>
    startUpstream(async (req, res, body) => {
      models[side]!.push((JSON.parse(body.toString() || '{}') as { model?: unknown }).model);
      const up = await fetch(sim.url + req.url, {
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json' },
      });
      res.writeHead(up.status, { 'content-type': 'application/json' });
      res.end(Buffer.from(await up.arrayBuffer()));
    });
  const [candidate, baseline] = await Promise.all([front('candidate'), front('baseline')]);
  t.after(() => Promise.all([candidate.close(), baseline.close(), sim.close()]));
  const config = join(dir, 'models.yaml');
  writeFileSync(config, 'candidate: { model: cand-served }\nbaseline: { model: base-served }\n');
  const res = await runCli([
    'replay',
    GOLDEN,
    '--candidate',
    candidate.url,
    '--baseline',
    baseline.url,
    '--config',
    config,
    '--out',
    join(dir, 'r.jsonl'),
  ]);
  assert.equal(res.code, 0, res.stdout + res.stderr);
  assert.equal(models.candidate!.length, 24);
  assert.deepEqual(new Set(models.candidate), new Set(['cand-served']));
  assert.deepEqual(new Set(models.baseline), new Set(['base-served']));
});

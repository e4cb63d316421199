// `record` against a backend that is not there or keeps failing, and against an input that repeats
// its prompts: a placeholder URL (the demo prints http://TRUSTED:8000) is refused at once, a backend
// that answers nothing before the first prompt, a run of failed answers stops the recording, and
// each distinct prompt is recorded once unless --keep-duplicates.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli } from './helpers/cli.js';
import { chatBody, tempDir } from './helpers/capture.js';
import { startSim } from './helpers/sim.js';
import { startUpstream } from './helpers/upstream.js';
import { nextSteps } from '../src/demo/run.js';

const chat = (content: string) => ({
  route: '/v1/chat/completions',
  body: { model: 'm', messages: [{ role: 'user', content }], max_tokens: 4 },
});

/** `n` lines cycling through `distinct` prompts. */
function promptSet(dir: string, n: number, distinct: number): string {
  const file = join(dir, `prompts-${n}-${distinct}.jsonl`);
  const lines = Array.from({ length: n }, (_, i) => JSON.stringify(chat(`prompt number ${i % distinct}`)));
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

const lines = (s: string) => s.split('\n').filter((l) => l.trim() !== '');

test("the demo's next commands, run as printed, are refused at once in one line: TRUSTED and NEW are placeholders", async (t) => {
  const dir = tempDir(t, 'logprobe-record-');
  const input = promptSet(dir, 239, 12);
  const printed = nextSteps(input, null)
    .map((l) => /^ {2}node bin\/logprobe\.js (\S+ .+?)\s+# /.exec(l)?.[1])
    .filter((c): c is string => c !== undefined && /^(record|replay) /.test(c));
  assert.equal(printed.length, 2);
  assert.ok(nextSteps(input, null).some((l) => /TRUSTED and NEW stand for your own servers/.test(l)));
  for (const command of printed) {
    const started = Date.now();
    const r = await runCli(command.split(' '), { cwd: dir, timeoutMs: 10_000 });
    const took = Date.now() - started;
    assert.equal(r.code, 2, `${command}: ${r.stdout}${r.stderr}`);
    assert.equal(lines(r.stderr).length, 1, r.stderr);
    assert.match(
      r.stderr,
      /^logprobe: --(backend|candidate) http:\/\/(TRUSTED|NEW):8000: (TRUSTED|NEW) is a placeholder/,
    );
    assert.ok(took < 2000, `${command} took ${took} ms`);
  }
  // Nothing was written: the golden file is not opened for a placeholder.
  assert.throws(() => statSync(join(dir, 'golden.jsonl')), /ENOENT/);
});

test('a backend that answers nothing is refused before the first prompt, in one line naming the URL and the cause', async (t) => {
  const dir = tempDir(t, 'logprobe-record-');
  const input = promptSet(dir, 239, 12);
  const gone = await startUpstream((_req, res) => res.end());
  await gone.close();
  const out = join(dir, 'golden.jsonl');
  const started = Date.now();
  const r = await runCli(['record', input, '--backend', gone.url, '--out', out]);
  assert.equal(r.code, 2, r.stdout + r.stderr);
  assert.deepEqual(lines(r.stderr), [
    `logprobe: --backend ${gone.url} answers nothing: ECONNREFUSED 127.0.0.1:${gone.port}`,
  ]);
  assert.equal(r.stdout, '');
  assert.equal(readFileSync(out, 'utf8'), '', 'no record of a failure written');
  assert.ok(Date.now() - started < 5000);

  // One that refuses the key is named so, also before any prompt is sent.
  const locked = await startUpstream((_req, res) => {
    res.statusCode = 401;
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ error: { message: 'invalid api key' } }));
  });
  t.after(() => locked.close());
  const k = await runCli(['record', input, '--backend', locked.url, '--out', out]);
  assert.equal(k.code, 2, k.stdout + k.stderr);
  assert.deepEqual(lines(k.stderr), [
    `logprobe: --backend ${locked.url} rejected the API key (baseline.apiKey): GET /v1/models answered 401`,
  ]);
  assert.deepEqual(
    locked.seen.map((s) => `${s.method} ${s.url}`),
    ['GET /v1/models'],
  );
});

test('a run of failed answers stops the recording after --max-failures, in one line; failures between good answers do not', async (t) => {
  const dir = tempDir(t, 'logprobe-record-');
  const input = promptSet(dir, 40, 40);
  let completions = 0;
  let failEvery = 1;
  const backend = await startUpstream((req, res) => {
    res.setHeader('content-type', 'application/json');
    if (req.url === '/v1/models') return res.end(JSON.stringify({ object: 'list', data: [{ id: 'm' }] }));
    if (!req.url?.endsWith('/completions')) {
      res.statusCode = 404;
      return res.end('{}');
    }
    if (completions++ % failEvery === 0) {
      res.statusCode = 503;
      return res.end(JSON.stringify({ error: { message: 'overloaded' } }));
    }
    res.end(
      JSON.stringify(
        chatBody([
          ['a', -0.1],
          ['b', -0.2],
        ]),
      ),
    );
  });
  t.after(() => backend.close());
  const out = join(dir, 'golden.jsonl');
  const r = await runCli([
    'record',
    input,
    '--backend',
    backend.url,
    '--out',
    out,
    '--max-failures',
    '5',
    '--concurrency',
    '1',
  ]);
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.deepEqual(lines(r.stderr), [
    `logprobe: record stopped: 5 answers in a row failed (the last, ${input.split('/').at(-1)}:5: HTTP 503: overloaded) from --backend ${backend.url} (--max-failures 5); 5 prompts recorded to ${out}`,
  ]);
  assert.equal(completions, 5, 'nothing sent after the fifth failure');
  assert.equal(lines(readFileSync(out, 'utf8')).length, 5);

  // Every other answer failing is no run: every prompt is recorded, the failures said.
  completions = 0;
  failEvery = 2;
  const half = await runCli(['record', input, '--backend', backend.url, '--out', out, '--max-failures', '2']);
  assert.equal(half.code, 1, half.stdout + half.stderr);
  assert.doesNotMatch(half.stderr, /stopped/);
  assert.match(half.stdout, /^recorded 40 prompts to .*: 20 usable \(baseline_error 20\)$/m);
  assert.equal(completions, 40);
});

test('each distinct prompt is recorded once (12 of 239 lines), every line with --keep-duplicates; replay finds every line', async (t) => {
  const dir = tempDir(t, 'logprobe-record-');
  const input = promptSet(dir, 239, 12);
  const sim = await startSim();
  t.after(() => sim.close());
  const out = join(dir, 'golden.jsonl');
  const r = await runCli(['record', input, '--backend', sim.url, '--out', out], { timeoutMs: 60_000 });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(
    r.stdout,
    /^recorded 12 prompts to .*golden\.jsonl: 12 usable; 227 repeated input lines not recorded \(--keep-duplicates records every line\)$/m,
  );
  const golden = lines(readFileSync(out, 'utf8')).map((l) => JSON.parse(l) as { id: string; key: string });
  assert.equal(golden.length, 12);
  assert.equal(new Set(golden.map((g) => g.key)).size, 12);
  assert.deepEqual(
    golden.map((g) => g.id),
    Array.from({ length: 12 }, (_, i) => `${input.split('/').at(-1)}:${i + 1}`),
    'the first line of each prompt, in input order',
  );
  const chats = () => sim.requests.filter((q) => q.path.endsWith('completions')).length;
  assert.equal(chats(), 12);

  // The 239 lines replay against the 12 records.
  const replay = await runCli(
    ['replay', input, '--candidate', sim.url, '--baseline-from', out, '--out', join(dir, 'replay.jsonl')],
    { timeoutMs: 60_000 },
  );
  assert.equal(replay.code, 0, replay.stdout + replay.stderr);
  assert.equal(lines(readFileSync(join(dir, 'replay.jsonl'), 'utf8')).length, 239);

  const all = join(dir, 'all.jsonl');
  const k = await runCli(['record', input, '--backend', sim.url, '--out', all, '--keep-duplicates'], {
    timeoutMs: 60_000,
  });
  assert.equal(k.code, 0, k.stdout + k.stderr);
  assert.match(k.stdout, /^recorded 239 prompts to .*all\.jsonl: 239 usable$/m);
  assert.equal(lines(readFileSync(all, 'utf8')).length, 239);
});

/**
 * `logprobe demo --fault cache-hit` on the simulated engines (issue #16): one engine alone
 * (`--baseline none`) probes itself cold then warm and fires LogprobSelfInconsistency; the
 * captures land in a run folder the closing block names, and the commands it prints run as
 * printed. Runs the built CLI (`npm test` builds first).
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { tempDir } from './helpers/capture.js';
import { runCli } from './helpers/cli.js';
import { createSimModel, startEngineServer } from '@logprobe/engine';

test('demo --baseline none: one engine, its default fault a wrong restore on a cache hit, every request twice, LogprobSelfInconsistency; the next steps run on its captures', async (t) => {
  const root = tempDir(t, 'logprobe-demo-');
  const { code, stdout, stderr } = await runCli(
    [
      'demo',
      '--engine',
      'sim',
      '--baseline',
      'none',
      '--duration',
      '14',
      '--port',
      '0',
      '--admin-port',
      '0',
      '--captures',
      root,
    ],
    {
      timeoutMs: 90_000,
    },
  );
  assert.equal(code, 0, stderr);
  assert.match(
    stdout,
    /^ {2}candidate .*\(fault: cache-hit\b/m,
    "without a baseline the default fault is the cache path's (a compute fault would agree with itself)",
  );
  assert.match(stdout, /^ {2}baseline {2}none: the candidate against itself/m);
  assert.match(
    stdout,
    /^▲ ALERT FIRING {2}LogprobSelfInconsistency \(candidate\) at mirrored request \d+ .* the candidate disagrees with itself between a cold and a warm run/m,
  );
  // The live page's address comes with the banner, before the first pair (not only once it has exited).
  const ui = /^ {2}live page (http:\/\/127\.0\.0\.1:\d+\/ui)\b/m.exec(stdout);
  assert.ok(ui, 'the banner names the live page');
  assert.ok(stdout.indexOf(ui[0]) < stdout.search(/^# +\d+ /m), 'printed at start');
  const lines = stdout.split('\n').filter((l) => /^# +\d+ /.test(l));
  assert.ok(
    lines.length > 0 &&
      lines.every((l) =>
        /candidate: (warm run differs from the cold run \(self_inconsistent, shifted \d+\/\d+ max \d+\.\d+\)|warm run agrees with the cold run \(identical(, shifted 0\/\d+ max \d+\.\d+)?\)|both runs (warm|cold) .*)/.test(
          l,
        ),
      ),
    'each printed line says in words what the repeat found, cold and warm',
  );
  assert.doesNotMatch(stdout, /cold=warm|cold≠warm|cand /, 'no shorthand');
  // Baseline-free, the progress lines show the detector that can fire: the candidate's self detector.
  assert.match(
    stdout,
    /^… \d+ s: .*; self detector \(cold→warm repeat pairs\): window share \d\.\d\d, CUSUM \d+\.\d$/m,
  );
  assert.doesNotMatch(stdout, /window ratio/, 'no pair detector baseline-free');
  const done =
    /^done \(simulated engines\): (\d+) client requests, (\d+) mirrored; outcomes (\{.*\}); verdicts (\{.*\}); repeats (\{.*\}); alerts (.*)$/m.exec(
      stdout,
    );
  assert.ok(done, stdout);
  const outcomes = JSON.parse(done[3]!) as Record<string, number>;
  assert.equal(
    Object.values(outcomes).reduce((a, b) => a + b, 0),
    Number(done[2]),
    'the outcomes count each mirrored pair once',
  );
  assert.deepEqual(JSON.parse(done[4]!), {}, 'baseline-free: no pair verdict');
  const repeats = JSON.parse(done[5]!) as Record<string, Record<string, number>>;
  assert.deepEqual(Object.keys(repeats), ['candidate']);
  const inconsistent = repeats.candidate!.self_inconsistent ?? 0;
  assert.ok(inconsistent / Number(done[2]) >= 0.9, `self_inconsistent on ${inconsistent} of ${done[2]} repeat pairs`);
  assert.match(done[6]!, /LogprobSelfInconsistency \(candidate\) firing/);
  assert.doesNotMatch(done[6]!, /LogprobGlobalShift/, 'no pair without a baseline');
  // The progress line keeps the tallies apart too.
  assert.match(stdout, /^… \d+ s: .*\[outcomes: ok \d+(, [a-z_]+ \d+)*; candidate repeats: [a-z_]+ \d+/m);
  // The run's own folder, named in the banner and in the closing block.
  const [run] = readdirSync(root);
  assert.match(run ?? '', /^run-\d{8}-\d{6}$/);
  const dir = `${root}/${run}`;
  assert.ok(stdout.includes(`  captures  ${dir}`));
  // The closing block's commands, run as printed (`node …/bin/logprobe.js` as the demo was started, `| head -1`
  // the first line, the placeholder servers a simulated engine), in a folder of their own.
  const printed = [...stdout.matchAll(/^ {2}node \S*bin\/logprobe\.js (.+?)\s+# /gm)].map((m) => m[1]!.trim());
  assert.deepEqual(
    printed.map((c) => c.split(' ').slice(0, 2)),
    [
      ['analyze', dir],
      ['analyze', dir],
      ['record', dir],
      ['replay', dir],
    ],
    stdout,
  );
  const cwd = tempDir(t, 'logprobe-next-');
  const trusted = await startEngineServer({ model: createSimModel({ seed: 7, id: 'demo' }) });
  t.after(() => trusted.close());
  const results = [];
  for (const command of printed) {
    const [args, head] = command.split(' | ');
    const argv = args!.split(' ').map((a) => a.replace(/^http:\/\/(TRUSTED|NEW):8000$/, trusted.url));
    const r = await runCli(argv, { cwd, timeoutMs: 60_000 });
    assert.equal(r.code, 0, `${command}: ${r.stderr}`);
    results.push(head === 'head -1' ? r.stdout.split('\n')[0]! : r.stdout);
  }
  const [report, json] = results;
  assert.match(readFileSync(`${dir}-report.html`, 'utf8'), /^<!doctype html>/i, 'the report is where the command says');
  assert.match(
    report!,
    /repeats on the candidate \(the same request twice: cold, then warm from its cache\): \d+ pairs, \d+ with the cache emptied first.*self_inconsistent \d+/,
  );
  assert.match(report!, /LogprobSelfInconsistency \(candidate\) would fire/);
  const pair = JSON.parse(json!) as { file: string; line: number; id: unknown; outcome: string; verdict: unknown };
  assert.ok(
    pair.file.startsWith(dir) && pair.line === 1 && typeof pair.id === 'string',
    `one pair, where it is: ${json}`,
  );
  assert.deepEqual([pair.outcome, pair.verdict], ['ok', null], 'baseline-free: the pair was not compared');
  assert.ok(existsSync(`${dir}-golden.jsonl`), 'record wrote the golden file the replay reads');
});

test('demo --fault cache-hit with the baseline: the same prompt sometimes matches (cold) and sometimes not (warm); both alerts fire', async (t) => {
  const root = tempDir(t, 'logprobe-demo-');
  const { code, stdout, stderr } = await runCli(
    [
      'demo',
      '--engine',
      'sim',
      '--fault',
      'cache-hit',
      '--duration',
      '40',
      '--port',
      '0',
      '--admin-port',
      '0',
      '--captures',
      root,
    ],
    {
      timeoutMs: 120_000,
    },
  );
  assert.equal(code, 0, stderr);
  assert.match(stdout, /^ {2}repeats {3}1 in 5 mirrored requests once more to each backend/m);
  assert.match(stdout, /^#.*_shift .*\(this prompt before: identical/m, 'a prompt that matched before is shifted now');
  assert.match(
    stdout,
    /^#.*identical .*\(this prompt before: (global|early)_shift/m,
    'and one that was shifted matches again',
  );
  assert.match(stdout, /^▲ ALERT FIRING {2}LogprobSelfInconsistency/m);
  assert.match(stdout, /^▲ ALERT FIRING {2}LogprobGlobalShift/m);
  assert.match(stdout, /^done .*; repeats \{.*"baseline":\{"identical":\d+/m);
  assert.doesNotMatch(stdout, /"baseline":\{[^}]*"self_inconsistent"/, 'the clean baseline agrees with itself');
});

test('demo --baseline takes only none', async () => {
  const r = await runCli(['demo', '--baseline', 'http://127.0.0.1:1']);
  assert.equal(r.code, 2);
  assert.match(
    r.stderr,
    /^logprobe: --baseline: the demo runs its own baseline; only 'none' \(no baseline\) can be given, got 'http:\/\/127\.0\.0\.1:1'\n$/,
  );
});

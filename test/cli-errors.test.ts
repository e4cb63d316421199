import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BIN, runCli } from './helpers/cli.js';
import { COMMAND_ERRORS, LogprobeError, errnoReason } from '../src/errors/index.js';

// One error catalogue (src/errors/index.ts): every user-facing failure of a command is a LogprobeError
// with its code's exit code, printed as one line by src/cli/main.ts.

test('errnoReason: one wording for every command, reading and writing', () => {
  const e = (code: string) => Object.assign(new Error(`raw ${code}`), { code });
  assert.equal(errnoReason(e('ENOENT'), 'read'), 'no such file');
  assert.equal(errnoReason(e('ENOENT'), 'write'), 'no such directory');
  assert.equal(errnoReason(e('EACCES'), 'read'), 'permission denied');
  assert.equal(errnoReason(e('EPERM'), 'write'), 'permission denied');
  assert.equal(errnoReason(e('EISDIR'), 'read'), 'is a directory');
  assert.equal(errnoReason(e('ENOTDIR'), 'write'), 'a part of the path is not a directory');
  assert.equal(errnoReason(e('EROFS'), 'write'), 'read-only file system');
  assert.equal(errnoReason(e('ENOSPC'), 'write'), 'no space left on device');
  assert.equal(errnoReason(e('EIO'), 'write'), 'input/output error');
  assert.equal(errnoReason(e('EWHATEVER'), 'write'), 'raw EWHATEVER', 'an unknown code: the message as it came');
});

test('every catalogue code has an exit code, and the error carries it', () => {
  for (const [code, { exitCode }] of Object.entries(COMMAND_ERRORS)) {
    const err = new LogprobeError(code as keyof typeof COMMAND_ERRORS, 'm');
    assert.equal(err.exitCode, exitCode);
    assert.ok(exitCode === 1 || exitCode === 2, code);
  }
});

test('the same user errors through different commands: one line, no stack trace, exit 2', async () => {
  for (const args of [
    ['analyze', '/nonexistent.jsonl'],
    ['compare', '/nonexistent.json', '/nonexistent2.json'],
    ['replay', '/nonexistent.jsonl', '--candidate', 'http://127.0.0.1:1', '--baseline', 'http://127.0.0.1:1'],
    ['serve', '--config', '/nonexistent.yaml'],
  ]) {
    const r = await runCli(args);
    assert.equal(r.code, 2, args.join(' '));
    assert.match(
      r.stderr,
      /^logprobe: .*\/nonexistent\S*: no such file|^logprobe: \/nonexistent\.yaml: invalid configuration: cannot read config file \(no such file\)\n$/,
      args.join(' '),
    );
    assert.equal(r.stderr.trim().split('\n').length, 1, `${args.join(' ')}: ${r.stderr}`);
  }
});

test('a reader that leaves early (| head) ends any command quietly: no EPIPE stack trace', async () => {
  for (const args of [['compare', '--help'], ['--help'], ['analyze', '--help']]) {
    const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      // Close our end of stdout before the command writes: its writes then fail with EPIPE.
      child.stdout.destroy();
      child.on('close', (code) => resolve({ code, stderr }));
    });
    assert.doesNotMatch(result.stderr, /EPIPE|Error|at /, `${args.join(' ')}: ${result.stderr}`);
    assert.equal(result.code, 0, args.join(' '));
  }
});

test("each command's --out: an unwritable file is one line naming it, exit 2, for record as for replay", async (t) => {
  const { startSim } = await import('./helpers/sim.js');
  const engine = await startSim();
  t.after(() => engine.close());
  const prompts = new URL('../config/golden-prompts.example.jsonl', import.meta.url).pathname;
  const outs: Array<[string, RegExp]> = [
    // Opens for writing, then every write fails (EIO): the record case that printed a Node stack trace.
    ['/proc/version', /^logprobe: \/proc\/version: input\/output error\n$/],
    ['/nonexistent-dir/golden.jsonl', /^logprobe: \/nonexistent-dir\/golden\.jsonl: no such directory\n$/],
    ['/tmp', /^logprobe: \/tmp: is a directory\n$/],
  ];
  for (const [out, expected] of outs) {
    for (const args of [
      ['record', prompts, '--backend', engine.url, '--out', out],
      ['replay', prompts, '--candidate', engine.url, '--baseline', 'none', '--out', out],
    ]) {
      const r = await runCli(args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, expected, args.join(' '));
    }
  }
});

test("--version is package.json's version, from the build and from the sources (npm run dev)", async () => {
  const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  const built = await runCli(['--version']);
  assert.deepEqual([built.code, built.stdout], [0, `${version}\n`]);
  const source = spawnSync(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(new URL('../src/cli/run.ts', import.meta.url)), '--version'],
    { encoding: 'utf8' },
  );
  assert.deepEqual([source.status, source.stdout], [0, `${version}\n`], source.stderr);
});

test('config mistakes name where and what: YAML line and column, http:// for a URL without a scheme, the same server twice', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'logprobe-cli-config-'));
  const bad = join(dir, 'bad.yaml');
  writeFileSync(bad, 'mirror:\n  sampleRate: 1\n   bad: x\n');
  const yaml = await runCli(['serve', '--check-config', '--config', bad]);
  assert.equal(yaml.code, 2);
  assert.equal(
    yaml.stderr,
    `logprobe: ${bad}: invalid configuration: YAML syntax error at line 2, column 15: Nested mappings are not allowed in compact mappings\n`,
  );

  const env = await runCli(['serve', '--check-config'], { env: { LOGPROBE_CANDIDATE_URL: 'localhost:8000' } });
  assert.equal(env.code, 2);
  assert.match(
    env.stderr,
    /candidate\.url \(from LOGPROBE_CANDIDATE_URL=localhost:8000\): expected an http\(s\) URL: did you mean http:\/\/localhost:8000\?\n$/,
  );
  const flag = await runCli([
    'replay',
    join(dir, 'x.jsonl'),
    '--candidate',
    'vllm:8000',
    '--baseline',
    'http://127.0.0.1:1',
  ]);
  assert.equal(flag.code, 2);
  assert.match(
    flag.stderr,
    /--candidate: expected an http\(s\) URL, got 'vllm:8000': did you mean http:\/\/vllm:8000\?/,
  );

  const same = await runCli(['serve', '--check-config'], {
    env: { LOGPROBE_CANDIDATE_URL: 'http://vllm:8000', LOGPROBE_BASELINE_URL: 'http://vllm:8000/' },
  });
  assert.equal(same.code, 0);
  assert.match(
    same.stderr,
    /^logprobe: warning: candidate\.url and baseline\.url are the same server \(http:\/\/vllm:8000\)/m,
  );
});

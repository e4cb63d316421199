import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BIN, runCli } from './helpers/cli.js';
import { Command } from 'commander';
import { commands } from '../src/cli/commands.js';
import { main } from '../src/cli/main.js';
import { COMMAND_ERRORS, ConfigError, LogprobeError, errnoReason, type CommandErrorCode } from '../src/errors/index.js';

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

test("every catalogue error, thrown by a command, is main's one line `logprobe: MESSAGE` and its exit code", async (t) => {
  // The exit code each code must give (the catalogue's contract, written out here so that a
  // changed code or a mapping that ignores it fails): only a missing environment is 1.
  const expected: Record<CommandErrorCode, number> = {
    LOGPROBE_USAGE: 2,
    LOGPROBE_CONFIG: 2,
    LOGPROBE_UNREADABLE_FILE: 2,
    LOGPROBE_UNWRITABLE_FILE: 2,
    LOGPROBE_NO_INPUT: 2,
    LOGPROBE_UNREACHABLE: 2,
    LOGPROBE_KEY_REJECTED: 2,
    LOGPROBE_LISTEN: 2,
    LOGPROBE_ENGINES_MISSING: 2,
    LOGPROBE_ENGINES_UNAVAILABLE: 1,
  };
  assert.deepEqual(Object.keys(COMMAND_ERRORS).sort(), Object.keys(expected).sort());
  // A command that throws what it is told to, added to the real command list that main() runs.
  const fail = (kind: string, code: string): never => {
    if (kind === 'bug') throw new TypeError('a bug');
    if (kind === 'config') throw new ConfigError(['candidate.url: expected a URL', 'port: too large'], 'x.yaml');
    throw new LogprobeError(code as CommandErrorCode, `${code}: what went wrong`, { cause: new Error('the cause') });
  };
  commands.push(() =>
    new Command('throw-for-test')
      .argument('<kind>')
      .argument('[code]')
      .action((kind: string, code: string) => fail(kind, code)),
  );
  t.after(() => void commands.pop());
  const run = async (...args: string[]): Promise<{ code: number; stderr: string }> => {
    let stderr = '';
    const write = t.mock.method(process.stderr, 'write', (chunk: string | Uint8Array) => {
      stderr += String(chunk);
      return true;
    });
    try {
      return { code: await main(['throw-for-test', ...args]), stderr };
    } finally {
      write.mock.restore();
    }
  };
  for (const [code, exitCode] of Object.entries(expected)) {
    const r = await run('catalogue', code);
    assert.deepEqual(r, { code: exitCode, stderr: `logprobe: ${code}: what went wrong\n` }, code);
  }
  assert.deepEqual(await run('config'), {
    code: 2,
    stderr: 'logprobe: x.yaml: invalid configuration: candidate.url: expected a URL; port: too large\n',
  });
  // Anything else is a bug: main does not swallow it into a one-line message.
  await assert.rejects(run('bug'), /a bug/);
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

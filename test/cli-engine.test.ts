/**
 * `logprobe engine --sim` as scripts use it: one parseable line once it listens, the knobs and
 * faults as flags, a clean exit on SIGTERM, and exit 2 with one line for a bad flag. Runs the
 * TypeScript CLI through tsx, so it needs no build.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { post } from '../packages/engine/test/helpers/engine-sim.js';

const MAIN = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
const SCRIPT = `import { main } from ${JSON.stringify(MAIN)}; process.exitCode = await main(process.argv.slice(1));`;
const LINE = /^logprobe engine \(sim\) listening on (http:\/\/127\.0\.0\.1:(\d+))\n$/;

function cli(args: string[]): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', SCRIPT, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = cli(args);
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

test('prints one listening line, serves the knobs it was given, exits 0 on SIGTERM', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'logprobe-engine-cli-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const log = join(dir, 'requests.jsonl');
  const child = cli([
    'engine',
    '--sim',
    '--port',
    '0',
    '--seed',
    '3',
    '--state-shift',
    '0.5',
    '--fault',
    'nologprobs',
    '--request-log',
    log,
    '--model-id',
    'cli-sim',
  ]);
  t.after(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let stdout = '';
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line: ${stdout}`)), 20_000);
    child.stdout?.on('data', (c: Buffer) => {
      stdout += c.toString();
      const m = stdout.match(LINE);
      if (m) {
        clearTimeout(timer);
        resolve(m[1] as string);
      }
    });
  });
  const res = await post(url, '/v1/completions', { prompt: 'hello', max_tokens: 3, logprobs: 2 });
  assert.equal(res.status, 200);
  assert.equal(res.json.model, 'cli-sim');
  assert.equal(res.json.choices[0].logprobs, null, '--fault nologprobs');
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
  child.kill('SIGTERM');
  assert.equal(await exited, 0);
  assert.match(stdout, LINE, 'exactly one line on stdout');
  const lines = (await readFile(log, 'utf8')).trim().split('\n');
  assert.equal(lines.length, 1);
  assert.equal(JSON.parse(lines[0] as string).path, '/v1/completions');
});

test('bad flags: one line on stderr, exit 2', async () => {
  const cases: Array<[string[], RegExp]> = [
    [['engine', '--sim', '--noise', 'abc'], /^logprobe: --noise: expected a number, got 'abc'\n$/],
    [['engine', '--sim', '--state-shift', '-1'], /^logprobe: --state-shift: must be ≥ 0/],
    [['engine', '--sim', '--port', '70000'], /^logprobe: --port: must be ≤ 65535/],
    [['engine', '--sim', '--fault', 'teapot'], /^logprobe: --fault: unknown fault "teapot"/],
    [['engine', '--sim', '--fault', 'slow:soon'], /^logprobe: --fault: .*milliseconds/],
    [['engine'], /^logprobe: choose an engine: --sim or --llama\n$/],
    [['engine', '--sim', '--llama'], /^logprobe: choose one engine/],
    [
      ['engine', '--sim', '--port', '0', '--request-log', '/nonexistent-dir/x.jsonl'],
      /^logprobe: --request-log: cannot open/,
    ],
  ];
  for (const [args, message] of cases) {
    const { code, stdout, stderr } = await run(args);
    assert.equal(code, 2, `${args.join(' ')}: ${stderr}`);
    assert.equal(stdout, '');
    assert.match(stderr, message, args.join(' '));
    assert.equal(stderr.trim().split('\n').length, 1, `one line: ${stderr}`);
  }
});

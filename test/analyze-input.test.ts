import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createWriteStream, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { buildRecord } from '../src/capture/record.js';
import { readJsonLines } from '../src/capture/reader.js';
import { BIN, runCli } from './helpers/cli.js';
import { makePair, tempDir } from './helpers/capture.js';

const THRESHOLDS = { gapAmbiguous: 0.3, gapSystematic: 0.4, globalFraction: 0.8, minAligned: 3 };
const line = (i: number, shift = 0) =>
  JSON.stringify(buildRecord(makePair(i, { shift }), { includePrompts: true, thresholds: THRESHOLDS }));

/** Good records, a broken line, blank lines, a non-record, a future version, and a last line cut mid-write. */
function messyCapture(): string {
  const cut = line(3);
  return [
    line(1, 0.5),
    '{"v":1,"id":',
    '',
    '[1,2]',
    JSON.stringify({ v: 4, route: '/v1/completions' }),
    line(2),
    `\r`,
    cut.slice(0, Math.floor(cut.length / 2)),
  ].join('\n');
}

test('malformed lines and a truncated last line are reported as file:line: reason and skipped; the rest is analysed (plain and gzip)', async (t) => {
  const dir = tempDir(t);
  const plain = join(dir, 'c.jsonl');
  const gz = join(dir, 'c.jsonl.gz');
  writeFileSync(plain, messyCapture());
  writeFileSync(gz, gzipSync(messyCapture()));
  for (const file of [plain, gz]) {
    const res = await runCli(['analyze', file]);
    assert.equal(res.code, 0, res.stderr);
    assert.match(res.stdout, /^pairs 2, compared 2/m);
    assert.match(res.stdout, /global_shift +1 /);
    assert.match(res.stdout, /skipped lines: 4/);
    const errors = res.stderr.trim().split('\n');
    assert.equal(errors.length, 4, res.stderr);
    assert.match(errors[0]!, new RegExp(`^${file.replace(/\./g, '\\.')}:2: invalid JSON \\(`));
    assert.equal(errors[1], `${file}:4: not a capture record (not an object)`);
    assert.equal(errors[2], `${file}:5: unsupported capture version 4 (this logprobe reads 1, 2 and 3)`);
    assert.equal(errors[3], `${file}:8: truncated record (incomplete JSON)`);
  }
});

test('a file that is not a capture is said once; a capture with many bad lines lists ten and counts the rest', async (t) => {
  const dir = tempDir(t);
  const readme = join(dir, 'README.md');
  writeFileSync(readme, Array.from({ length: 300 }, (_, i) => `line ${i} of prose`).join('\n'));
  const res = await runCli(['analyze', readme]);
  assert.equal(res.code, 2, res.stderr);
  const said = res.stderr.trim().split('\n');
  assert.equal(said.length, 2, res.stderr);
  assert.ok(
    said[0]!.startsWith(
      `${readme}: not a capture file: none of its first 5 lines is a capture record (line 1: invalid JSON (`,
    ),
    said[0],
  );
  assert.ok(said[0]!.endsWith('); skipped'), said[0]);
  assert.equal(said[1], `logprobe: no capture records in ${readme}`);

  const noisy = join(dir, 'noisy.jsonl');
  writeFileSync(noisy, [line(1), ...Array.from({ length: 30 }, () => '{"broken":'), line(2)].join('\n'));
  const r2 = await runCli(['analyze', noisy]);
  assert.equal(r2.code, 0, r2.stderr);
  assert.match(r2.stdout, /^pairs 2, compared 2/m);
  assert.match(r2.stdout, /skipped lines: 30/);
  const errors = r2.stderr.trim().split('\n');
  assert.equal(errors.length, 11, r2.stderr);
  assert.ok(
    errors.slice(0, 10).every((e, i) => e.startsWith(`${noisy}:${i + 2}: `)),
    r2.stderr,
  );
  assert.equal(errors[10], `${noisy}: 20 more bad lines skipped, not listed`);
});

test('a gzip file cut short (a copy interrupted) yields its complete records and one error, never a crash', async (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'cut.jsonl.gz');
  const whole = gzipSync(Array.from({ length: 40 }, (_, i) => line(i)).join('\n') + '\n');
  writeFileSync(file, whole.subarray(0, Math.floor(whole.length * 0.6)));
  const res = await runCli(['analyze', '--json', file]);
  assert.equal(res.code, 0, res.stderr);
  const n = res.stdout.trim().split('\n').length;
  assert.ok(n > 0 && n < 40, `${n} records before the cut`);
  assert.match(
    res.stderr,
    /cut\.jsonl\.gz:\d+: (truncated record \(incomplete JSON\)|gzip stream cut short or corrupt)/,
  );
});

test('usage errors exit 2 with one line: no file, a missing file, a directory, no record at all, a bad flag', async (t) => {
  const dir = tempDir(t);
  mkdirSync(join(dir, 'sub'));
  writeFileSync(join(dir, 'sub', 'notes.txt'), 'not a capture');
  const empty = join(dir, 'empty.jsonl');
  writeFileSync(empty, 'not json\n');
  const good = join(dir, 'good.jsonl');
  writeFileSync(good, `${line(1, 0.5)}\n`);
  const cases: Array<[string[], RegExp]> = [
    [['analyze'], /missing required argument/],
    [['analyze', join(dir, 'nope.jsonl')], /^logprobe: .*nope\.jsonl: no such file\n$/],
    [['analyze', join(dir, 'sub')], /^logprobe: .*sub: no \.jsonl or \.jsonl\.gz file in this directory\n$/],
    [['analyze', empty], /logprobe: no capture records in/],
    [['analyze', '--noise-floor', 'abc', good], /^logprobe: --noise-floor: expected a number, got 'abc'\n$/],
    [['analyze', '--fail-on', 'bogus', good], /^logprobe: --fail-on: unknown item 'bogus'/],
    [['analyze', '--html', join(dir, 'no', 'such', 'dir.html'), good], /^logprobe: .*dir\.html: no such directory\n$/],
  ];
  for (const [args, err] of cases) {
    const res = await runCli(args);
    assert.equal(res.code, 2, `${args.join(' ')}: ${res.stderr}`);
    assert.match(res.stderr, err, args.join(' '));
    assert.ok(!res.stderr.includes('    at '), 'no stack trace');
  }
  assert.equal(
    (await runCli(['analyze', '--fail-on', 'noise,early_shift', good])).code,
    0,
    'the verdict is global_shift',
  );
  assert.equal((await runCli(['analyze', '--fail-on', 'global_shift', good])).code, 1);
  // A directory stands for its capture files.
  const all = await runCli(['analyze', '--json', dir]);
  assert.equal(all.code, 0, all.stderr);
  assert.equal(all.stdout.trim().split('\n').length, 1, 'good.jsonl (empty.jsonl has no record)');
  assert.match(all.stderr, /empty\.jsonl:1: invalid JSON/);
});

test("the reader splits lines across chunks, strips CR, skips blank lines and bounds a line's length", async (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'lines.jsonl');
  const long = JSON.stringify({ pad: 'x'.repeat(600_000) });
  writeFileSync(file, `{"a":1}\r\n\n${long}\n{"b":"é€😀"}\n${'y'.repeat(3000)}\n{"c":3}`);
  const items = [];
  for await (const item of readJsonLines(file, { maxLineBytes: 1_000_000 })) items.push(item);
  assert.deepEqual(
    items.map((i) => i.line),
    [1, 3, 4, 5, 6],
  );
  assert.deepEqual(items[0]!.value, { a: 1 });
  assert.equal((items[1]!.value as { pad: string }).pad.length, 600_000);
  assert.deepEqual(items[2]!.value, { b: 'é€😀' });
  assert.match(items[3]!.error ?? '', /^invalid JSON/);
  assert.deepEqual(items[4]!.value, { c: 3 }, 'an unterminated last line that parses is a record');
  const capped = [];
  for await (const item of readJsonLines(file, { maxLineBytes: 100_000 })) capped.push(item.error ?? 'ok');
  assert.deepEqual(capped, ['ok', 'line longer than 0 MB, skipped', 'ok', capped[3], 'ok']);
});

test('a large capture streams in constant memory: 40 MB analysed with a 32 MB heap', async (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'big.jsonl');
  const lines = Array.from({ length: 50 }, (_, i) => line(i, i % 3 === 0 ? 0.5 : 0.001));
  const ws = createWriteStream(file);
  let size = 0;
  let n = 0;
  while (size < 40 * 1024 * 1024) {
    const l = `${lines[n % lines.length]!}\n`;
    size += l.length;
    n++;
    if (!ws.write(l)) await new Promise<void>((r) => ws.once('drain', () => r()));
  }
  await new Promise<void>((r) => ws.end(() => r()));
  const started = Date.now();
  const res = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, ['--max-old-space-size=32', BIN, 'analyze', file], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
  assert.equal(res.code, 0, res.stderr.slice(-2000));
  assert.match(res.stdout, new RegExp(`^pairs ${n.toLocaleString('en-US')}, compared`, 'm'));
  t.diagnostic(`${n} records (${(size / 1024 / 1024).toFixed(0)} MB) in ${Date.now() - started} ms with a 32 MB heap`);
});

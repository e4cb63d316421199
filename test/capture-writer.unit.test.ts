import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { createLogger } from '../src/log/logger.js';
import { Metrics } from '../src/metrics/registry.js';
import { buildConfig } from '../src/config/load.js';
import { CaptureWriter, type CaptureWriterOptions } from '../src/capture/writer.js';
import { checkCaptureDir, createCaptureWriter } from '../src/capture/sink.js';
import { nodeCaptureFs, type CaptureFs } from '../src/capture/files.js';
import { LogSink } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import { captureLines, makePair, tempDir } from './helpers/capture.js';

const THRESHOLDS = { gapAmbiguous: 0.3, gapSystematic: 0.4, globalFraction: 0.8, minAligned: 3 };

function writer(
  dir: string,
  extra: Partial<CaptureWriterOptions> = {},
): { w: CaptureWriter; logs: LogSink; errors: string[] } {
  const logs = new LogSink();
  const errors: string[] = [];
  const w = new CaptureWriter({
    dir,
    maxFileBytes: 100 * 1024 * 1024,
    gzip: false,
    record: { includePrompts: true, thresholds: THRESHOLDS },
    logger: createLogger({ level: 'info', destination: logs }),
    onError: (reason) => errors.push(reason),
    ...extra,
  });
  return { w, logs, errors };
}

function errno(code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: simulated`), { code });
}

test('records are v2 JSONL lines with the raw bodies, engine metadata and the analysis without positions; files 0600, dir 0700', async (t) => {
  const dir = join(tempDir(t), 'nested', 'captures');
  const { w, errors } = writer(dir);
  for (let i = 0; i < 5; i++) w.write(makePair(i, { shift: i === 4 ? 0.5 : 0 }));
  await w.close();
  assert.deepEqual(errors, []);
  assert.equal(statSync(dir).mode & 0o777, 0o700);
  const files = readdirSync(dir);
  assert.equal(files.length, 1);
  assert.match(files[0]!, /^capture-\d{4}-\d\d-\d\dT\d{6}\.\d{3}Z-\d+-1\.jsonl$/);
  assert.equal(statSync(join(dir, files[0]!)).mode & 0o777, 0o600);
  const records = captureLines(dir).map((l) => JSON.parse(l) as Record<string, any>);
  assert.equal(records.length, 5);
  const r = records[4]!;
  assert.equal(r.v, 3);
  assert.equal(r.id, 'req-4');
  assert.equal(r.route, '/v1/chat/completions');
  assert.equal(r.outcome, 'ok');
  assert.equal(r.request.messages[0].content, 'question 4');
  assert.equal(r.candidate.status, 200);
  assert.equal(r.candidate.latencyMs, 12.3);
  assert.equal(r.candidate.model, 'sim-model');
  assert.equal(r.candidate.system_fingerprint, 'fp_test');
  assert.deepEqual(r.candidate.serverHeaders, { server: 'sim/1.0' });
  assert.deepEqual(r.baseline!.body, makePair(4).baseline!.body, 'the raw body, for analyze to re-run compare');
  assert.equal(r.analysis.verdict, 'global_shift');
  assert.equal(r.analysis.positions, undefined);
  assert.equal(r.analysis.noiseFloor, 0.1);
  assert.deepEqual(r.analysis.thresholds, { ...THRESHOLDS, noiseFloor: 0.1 });
  assert.equal(r.clientHeaders['user-agent'], 'test/1');
});

test('files rotate before they would pass maxFileBytes; with gzip the rotated ones are compressed (0600, mtime kept), the current one stays plain', async (t) => {
  const dir = tempDir(t);
  const lineBytes = Buffer.byteLength(
    `${JSON.stringify((await import('../src/capture/record.js')).buildRecord(makePair(0), { includePrompts: true, thresholds: THRESHOLDS }))}\n`,
  );
  const { w, errors } = writer(dir, { maxFileBytes: lineBytes * 3 + 10, gzip: true, flushBytes: 1 });
  for (let i = 0; i < 10; i++) {
    w.write(makePair(i));
    await w.flush();
  }
  await w.close();
  assert.deepEqual(errors, []);
  const files = readdirSync(dir).sort(
    (a, b) => Number(/-(\d+)\.jsonl/.exec(a)![1]) - Number(/-(\d+)\.jsonl/.exec(b)![1]),
  );
  assert.deepEqual(
    files.map((f) => f.replace(/^.*-(\d+\.jsonl(\.gz)?)$/, '$1')),
    ['1.jsonl.gz', '2.jsonl.gz', '3.jsonl.gz', '4.jsonl'],
  );
  for (const f of files) {
    const st = statSync(join(dir, f));
    assert.equal(st.mode & 0o777, 0o600, f);
    const text = (f.endsWith('.gz') ? gunzipSync(readFileSync(join(dir, f))) : readFileSync(join(dir, f))).toString();
    assert.ok(Buffer.byteLength(text) <= lineBytes * 3 + 10, `${f} within the limit`);
  }
  const ids = captureLines(dir).map((l) => (JSON.parse(l) as { id: string }).id);
  assert.deepEqual(ids.sort(), Array.from({ length: 10 }, (_, i) => `req-${i}`).sort(), 'no record lost or duplicated');
  assert.ok(
    statSync(join(dir, files[0]!)).mtimeMs <= statSync(join(dir, files[3]!)).mtimeMs,
    'a compressed file is never newer than the current one',
  );
});

test('writes are buffered: nothing reaches the disk before the interval, everything does on close', async (t) => {
  const dir = tempDir(t);
  const { w } = writer(dir, { flushIntervalMs: 60_000 });
  for (let i = 0; i < 20; i++) w.write(makePair(i));
  await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(readdirSync(dir).length === 0 ? [] : captureLines(dir), [], 'still buffered');
  await w.close();
  assert.equal(captureLines(dir).length, 20);
});

test('ENOSPC on write: the batch is dropped and counted, logged once per burst, the file abandoned; writing resumes in a new file', async (t) => {
  const dir = tempDir(t);
  let failWrites = 3;
  let failAfter = 1;
  const fs: CaptureFs = {
    mkdir: nodeCaptureFs.mkdir,
    remove: nodeCaptureFs.remove,
    async open(path, o) {
      const f = await nodeCaptureFs.open(path, o);
      return {
        async write(data) {
          if (failAfter-- <= 0 && failWrites > 0) {
            failWrites--;
            // A short write first: the partial line must stay the last line of its file.
            await f.write(data.subarray(0, 10));
            throw errno('ENOSPC');
          }
          await f.write(data);
        },
        close: () => f.close(),
      };
    },
  };
  const { w, logs, errors } = writer(dir, { fs, flushBytes: 1 });
  for (let i = 0; i < 7; i++) {
    assert.doesNotThrow(() => w.write(makePair(i)));
    await w.flush();
  }
  await w.close();
  assert.deepEqual(errors, ['ENOSPC', 'ENOSPC', 'ENOSPC']);
  assert.deepEqual(w.stats, { written: 4, dropped: 3 });
  const failures = logs.lines.filter((l) => l.msg === 'capture write failed: records are dropped until it recovers');
  assert.equal(failures.length, 1, 'one log line for the burst');
  assert.equal(failures[0]!.reason, 'ENOSPC');
  assert.ok(logs.lines.some((l) => l.msg === 'capture writes recovered'));
  // The first file failed after a whole record: kept, its partial line last. The next two failed
  // from their first write, holding no whole record: removed. Writing resumed in a third.
  const files = readdirSync(dir).sort();
  assert.equal(files.length, 2, files.join(', '));
  assert.deepEqual(
    w.files.map((f) => Number(/-(\d+)\.jsonl$/.exec(f)![1])),
    [1, 2],
    'numbers are used again',
  );
  const first = readFileSync(
    join(
      dir,
      files.find((f) => f.endsWith('-1.jsonl'))!,
    ),
    'utf8',
  ).split('\n');
  assert.equal(first.length, 2, 'a whole record, then the partial line of the failed one');
  assert.ok(!first[1]!.endsWith('}'));
  const complete = files
    .flatMap((f) =>
      readFileSync(join(dir, f), 'utf8')
        .split('\n')
        .filter((l) => l !== ''),
    )
    .filter((l) => l.endsWith('}'));
  assert.deepEqual(
    complete.map((l) => (JSON.parse(l) as { id: string }).id),
    ['req-0', 'req-4', 'req-5', 'req-6'],
  );
});

test('a full disk, then freed: every lost record counted in logprobe_capture_records_dropped_total, no empty file left per retry, logprobe_capture_ok 0 then 1', async (t) => {
  const dir = tempDir(t);
  // As a full disk does: open() creates the file, every write fails with ENOSPC.
  let full = true;
  const disk: CaptureFs = {
    ...nodeCaptureFs,
    async open(path, o) {
      const f = await nodeCaptureFs.open(path, o);
      return {
        write: (d) => (full ? Promise.reject(errno('ENOSPC')) : f.write(d)),
        close: () => f.close(),
      };
    },
  };
  const metrics = new Metrics({ defaultMetrics: false });
  const logs = new LogSink();
  const w = createCaptureWriter({
    config: buildConfig({ capture: { dir } }),
    logger: createLogger({ level: 'info', destination: logs }),
    metrics,
    fs: disk,
  });
  const read = async () => {
    const text = await metrics.registry.metrics();
    return {
      ok: metricValue(text, 'logprobe_capture_ok'),
      dropped: metricValue(text, 'logprobe_capture_records_dropped_total', { reason: 'ENOSPC' }),
      errors: metricValue(text, 'logprobe_capture_errors_total', { reason: 'ENOSPC' }),
      overflow: metricValue(text, 'logprobe_capture_records_dropped_total', { reason: 'overflow' }),
    };
  };
  assert.deepEqual(
    await read(),
    { ok: 1, dropped: 0, errors: 0, overflow: 0 },
    'before anything: working, series at zero',
  );
  // 15 retries on the full disk (one per flush, as the 1 s timer does), 1 to 3 records each.
  let sent = 0;
  for (let i = 0; i < 15; i++) {
    for (let k = 0; k <= i % 3; k++) w.write(makePair(sent++));
    await w.flush();
    assert.deepEqual(readdirSync(dir), [], `retry ${i + 1}: no file left behind`);
  }
  assert.deepEqual(
    await read(),
    { ok: 0, dropped: sent, errors: 15, overflow: 0 },
    `all ${sent} records counted, the gauge says it`,
  );
  // The disk is freed: the next flush writes, the gauge is back.
  full = false;
  for (let k = 0; k < 4; k++) w.write(makePair(100 + k));
  await w.flush();
  assert.deepEqual(await read(), { ok: 1, dropped: sent, errors: 15, overflow: 0 });
  await w.close();
  assert.equal(readdirSync(dir).length, 1, 'one file, the one that worked');
  assert.deepEqual(
    captureLines(dir).map((l) => (JSON.parse(l) as { id: string }).id),
    ['req-100', 'req-101', 'req-102', 'req-103'],
  );
  assert.match(w.files[0]!, /-1\.jsonl$/, 'numbered 1: the failed attempts left no gaps');
  assert.deepEqual(w.stats, { written: 4, dropped: sent });
  assert.equal(
    logs.lines.filter((l) => l.msg === 'capture write failed: records are dropped until it recovers').length,
    1,
    'logged once for the burst',
  );
});

test('EACCES on open and ENOTDIR from the real file system are counted in logprobe_capture_errors_total and never thrown', async (t) => {
  const root = tempDir(t);
  const metrics = new Metrics({ defaultMetrics: false });
  const logs = new LogSink();
  const logger = createLogger({ level: 'info', destination: logs });
  const denied: CaptureFs = {
    mkdir: async () => {},
    open: async () => Promise.reject(errno('EACCES')),
    remove: async () => {},
  };
  const config = buildConfig({ capture: { dir: join(root, 'a') } });
  const w1 = createCaptureWriter({ config, logger, metrics, fs: denied });
  w1.write(makePair(1));
  w1.write(makePair(2));
  await w1.close();

  writeFileSync(join(root, 'file'), 'not a directory');
  const w2 = createCaptureWriter({
    config: buildConfig({ capture: { dir: join(root, 'file', 'captures') } }),
    logger,
    metrics,
  });
  w2.write(makePair(3));
  await w2.close();

  const text = await metrics.registry.metrics();
  assert.equal(metricValue(text, 'logprobe_capture_errors_total', { reason: 'EACCES' }), 1, 'one failed open');
  assert.equal(metricValue(text, 'logprobe_capture_errors_total', { reason: 'write' }), 1, 'ENOTDIR is an other error');
  assert.equal(metricValue(text, 'logprobe_capture_errors_total', { reason: 'ENOSPC' }), 0, 'series exist at zero');
  assert.deepEqual(w1.stats, { written: 0, dropped: 2 });
  assert.equal(
    metricValue(text, 'logprobe_capture_records_dropped_total', { reason: 'EACCES' }),
    2,
    'both records lost, counted',
  );
  assert.equal(metricValue(text, 'logprobe_capture_ok'), 0);
  assert.ok(!logs.text().includes('question'), 'logs never quote a record');
});

test('a disk slower than the mirror: past maxPendingBytes records are dropped as overflow, memory stays bounded', async (t) => {
  const dir = tempDir(t);
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const slow: CaptureFs = {
    mkdir: nodeCaptureFs.mkdir,
    remove: nodeCaptureFs.remove,
    async open(path, o) {
      const f = await nodeCaptureFs.open(path, o);
      return {
        write: async (d) => {
          await gate;
          await f.write(d);
        },
        close: () => f.close(),
      };
    },
  };
  const { w, errors } = writer(dir, { fs: slow, flushBytes: 1, maxPendingBytes: 20_000 });
  for (let i = 0; i < 50; i++) w.write(makePair(i));
  release();
  await w.close();
  assert.ok(errors.length > 0 && errors.every((e) => e === 'overflow'), `${errors.length} overflow`);
  assert.equal(w.stats.written + w.stats.dropped, 50);
  assert.equal(captureLines(dir).length, w.stats.written);
});

test("a directory that cannot be created (procfs answers ENOENT) fails at once, counted, instead of node's mkdir -p looping at full CPU", async () => {
  const started = performance.now();
  await assert.rejects(
    nodeCaptureFs.mkdir('/proc/logprobe-nope/deeper'),
    (err: NodeJS.ErrnoException) => err.code === 'ENOENT',
  );
  const { w, errors } = writer('/proc/logprobe-nope');
  for (let i = 0; i < 3; i++) w.write(makePair(i));
  await w.flush();
  for (let i = 3; i < 5; i++) w.write(makePair(i));
  await w.close();
  assert.deepEqual(errors, ['write', 'write'], 'each flush counts its loss');
  assert.equal(w.stats.dropped, 5);
  assert.ok(performance.now() - started < 2000, `settled in ${(performance.now() - started).toFixed(0)} ms`);
});

test('checkCaptureDir: creates the directory (0700), leaves no probe behind, and refuses one it cannot write with one line', async (t) => {
  const dir = join(tempDir(t), 'a', 'b');
  await checkCaptureDir(dir);
  assert.equal(statSync(dir).mode & 0o777, 0o700);
  assert.deepEqual(readdirSync(dir), [], 'the probe file is removed');
  const file = join(tempDir(t), 'plain');
  writeFileSync(file, 'x');
  for (const [bad, why] of [
    [
      '/proc/logprobe-nope',
      /^capture\.dir \/proc\/logprobe-nope: cannot create the directory: no such directory \(set capture\.dir/,
    ],
    [join(file, 'sub'), /: cannot create the directory: a part of the path is not a directory/],
    ['/proc', /^capture\.dir \/proc: cannot write a file in it: /],
  ] as const) {
    await assert.rejects(
      checkCaptureDir(bad),
      (err: Error & { code?: string; exitCode?: number }) =>
        err.code === 'LOGPROBE_UNWRITABLE_FILE' &&
        err.exitCode === 2 &&
        why.test(err.message) &&
        !err.message.includes('\n'),
    );
  }
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { request } from 'undici';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, startSim } from './helpers/sim.js';
import { startCli } from './helpers/cli.js';
import { allText, captureLines, tempDir } from './helpers/capture.js';

const SECRET = 'sk-client-Hq7TopSecret-4242';
const BASELINE_KEY = 'sk-baseline-Zz9Key-777';
const VERDICTS = [
  'incomparable',
  'tokenizer_mismatch',
  'identical',
  'noise',
  'early_shift',
  'global_shift',
  'local_shift',
];

async function send(proxyUrl: string, i: number): Promise<number> {
  const chat = i % 2 === 0;
  const body = chat
    ? {
        model: 'sim',
        messages: [{ role: 'user', content: `question number ${i}: why is the sky blue?` }],
        max_tokens: 16,
      }
    : { model: 'sim', prompt: `Prompt ${i}: the capital of France is`, max_tokens: 16 };
  const res = await request(`${proxyUrl}${chat ? '/v1/chat/completions' : '/v1/completions'}`, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: {
      'content-type': 'application/json',
      authorization: `Bearer ${SECRET}`,
      cookie: `session=${SECRET}; theme=dark`,
      'x-api-key': SECRET,
    },
  });
  await res.body.text();
  return res.statusCode;
}

function verdictMix(metrics: string): Record<string, number> {
  const mix: Record<string, number> = {};
  for (const v of VERDICTS) {
    const n = metricValue(metrics, 'logprobe_verdicts_total', { verdict: v }) ?? 0;
    if (n > 0) mix[v] = n;
  }
  return mix;
}

test('every mirrored pair lands in the capture on close, complete, 0600, with the online verdicts, and no secret in captures or logs', async (t) => {
  const dir = tempDir(t);
  const baseline = await startSim();
  const candidate = await startSim({ localShift: 0.8, localShiftRate: 0.15, noise: 0.001 });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url, apiKey: BASELINE_KEY },
    mirror: { sampleRate: 1, queueSize: 1000 },
    capture: { enabled: true, dir, maxFileMB: 0.05 },
  });
  let closed = false;
  t.after(() => (closed ? undefined : lp.close()));
  for (let i = 0; i < 40; i++) assert.equal(await send(lp.proxyUrl, i), 200);
  await lp.runtime.mirror!.idle();
  const online = verdictMix(await (await request(`${lp.adminUrl}/metrics`)).body.text());
  await lp.close();
  closed = true;

  const lines = captureLines(dir);
  assert.equal(lines.length, 40, 'one record per mirrored pair');
  const records = lines.map(
    (l) =>
      JSON.parse(l) as {
        v: number;
        analysis: { verdict: string } | null;
        candidate: { serverHeaders?: unknown; model?: string };
      },
  );
  assert.ok(records.every((r) => r.v === 3 && r.analysis !== null));
  assert.ok(readdirSync(dir).length > 1, 'maxFileMB rotated the files');
  for (const f of readdirSync(dir)) assert.equal(statSync(join(dir, f)).mode & 0o777, 0o600, f);
  const mix: Record<string, number> = {};
  for (const r of records) mix[r.analysis!.verdict] = (mix[r.analysis!.verdict] ?? 0) + 1;
  assert.deepEqual(mix, online, 'the captured verdicts are the ones the metrics counted');
  assert.ok(Object.keys(mix).length >= 2, `a mix of verdicts: ${JSON.stringify(mix)}`);
  assert.equal(records[0]!.candidate.model, 'logprobe-sim', 'engine metadata kept');
  const text = allText(dir);
  assert.ok(!text.includes(SECRET), 'the client secret is in no capture');
  assert.ok(!text.includes(BASELINE_KEY), 'the baseline key is in no capture');
  assert.ok(!lp.logs.text().includes(SECRET) && !lp.logs.text().includes(BASELINE_KEY), 'nor in the logs');
});

test('serve: SIGTERM right after the last pair flushes the buffered records and exits 0; the capture errors series is exported', async (t) => {
  const dir = tempDir(t);
  const baseline = await startSim();
  const candidate = await startSim({ stateShift: 0.6 });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const file = join(tempDir(t), 'logprobe.yaml');
  writeFileSync(
    file,
    `listen: { host: 127.0.0.1, port: 0 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${candidate.url} }\nbaseline: { url: ${baseline.url}, apiKey: ${BASELINE_KEY} }\nmirror: { sampleRate: 1 }\ncapture: { enabled: true, dir: ${dir} }\n`,
  );
  const proc = await startCli(
    ['serve', '--config', file],
    /"proxyUrl":"(http:\/\/[^"]+)","adminUrl":"(http:\/\/[^"]+)"/,
  );
  t.after(() => {
    if (proc.child.exitCode === null) proc.child.kill('SIGKILL');
  });
  const [, proxyUrl, adminUrl] = proc.match as unknown as [string, string, string];
  for (let i = 0; i < 12; i++) assert.equal(await send(proxyUrl, i), 200);
  let metrics = '';
  for (let tries = 0; tries < 200; tries++) {
    metrics = await (await request(`${adminUrl}/metrics`)).body.text();
    if ((metricValue(metrics, 'logprobe_mirror_total', { outcome: 'ok' }) ?? 0) >= 12) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal(metricValue(metrics, 'logprobe_capture_errors_total', { reason: 'ENOSPC' }), 0);
  proc.child.kill('SIGTERM');
  assert.equal(await proc.exited, 0);
  const lines = captureLines(dir);
  assert.equal(lines.length, 12, 'no record lost on a graceful stop');
  for (const l of lines) assert.doesNotThrow(() => JSON.parse(l), 'every record complete');
  assert.ok(!allText(dir).includes(SECRET) && !proc.output().includes(SECRET), 'no secret in captures or logs');
});

test('a capture directory that fails mid-run: clients and /readyz unaffected, every lost record counted, logprobe_capture_ok 0 then 1 when it is back', async (t) => {
  const sim = await startSim();
  t.after(() => sim.close());
  const dir = join(tempDir(t), 'captures');
  const lp = await startLogprobe({
    candidate: { url: sim.url },
    baseline: { url: sim.url },
    mirror: { sampleRate: 1 },
    capture: { enabled: true, dir, maxFileMB: 0.001 },
  });
  t.after(() => lp.close());
  // One record per file (maxFileMB under a record): each flush opens a file in the directory.
  const scrape = async () => (await (await request(`${lp.adminUrl}/metrics`)).body.text()) as string;
  const captureFiles = () => {
    try {
      return readdirSync(dir).length;
    } catch {
      return 0;
    }
  };
  /** Waits until the worker's writer has flushed (its timer is 1 s) and the merged /metrics shows it. */
  const until = async (ok: (m: string) => boolean): Promise<string> => {
    for (let i = 0; i < 100; i++) {
      const m = await scrape();
      if (ok(m)) return m;
      await new Promise((r) => setTimeout(r, 100));
    }
    return scrape();
  };
  assert.equal(await send(lp.proxyUrl, 0), 200);
  await lp.runtime.mirror!.idle();
  const first = await until(
    (m) => metricValue(m, 'logprobe_capture_records_dropped_total', { reason: 'write' }) === 0 && captureFiles() > 0,
  );
  assert.equal(metricValue(first, 'logprobe_capture_ok'), 1);
  // The directory becomes a file: every open in it fails (ENOTDIR, reason `write`).
  const { rmSync } = await import('node:fs');
  rmSync(dir, { recursive: true });
  writeFileSync(dir, 'not a directory any more');
  for (let i = 1; i <= 6; i++) assert.equal(await send(lp.proxyUrl, i), 200, 'the client is served');
  await lp.runtime.mirror!.idle();
  const failing = await until(
    (m) => metricValue(m, 'logprobe_capture_records_dropped_total', { reason: 'write' }) === 6,
  );
  assert.equal(
    metricValue(failing, 'logprobe_capture_records_dropped_total', { reason: 'write' }),
    6,
    'the 6 pairs mirrored meanwhile are counted as lost',
  );
  assert.equal(metricValue(failing, 'logprobe_capture_ok'), 0);
  assert.equal(
    (await request(`${lp.adminUrl}/readyz`)).statusCode,
    200,
    '/readyz stays 200: captures never cut clients off',
  );
  // Back: the next records are written, the gauge says so.
  rmSync(dir);
  assert.equal(await send(lp.proxyUrl, 7), 200);
  await lp.runtime.mirror!.idle();
  const back = await until((m) => metricValue(m, 'logprobe_capture_ok') === 1);
  assert.equal(metricValue(back, 'logprobe_capture_ok'), 1);
  assert.equal(metricValue(back, 'logprobe_capture_records_dropped_total', { reason: 'write' }), 6);
});

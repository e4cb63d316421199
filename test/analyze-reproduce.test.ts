import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { request } from 'undici';
import type { ConfigInput } from '../src/config/schema.js';
import type { SimOptions } from '@logprobe/engine';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, startSim } from './helpers/sim.js';
import { runCli } from './helpers/cli.js';
import { tempDir } from './helpers/capture.js';

const VERDICTS = [
  'incomparable',
  'tokenizer_mismatch',
  'prompt_mismatch',
  'identical',
  'noise',
  'early_shift',
  'global_shift',
  'local_shift',
];

async function send(proxyUrl: string, i: number): Promise<void> {
  const chat = i % 2 === 0;
  const body = chat
    ? { model: 'sim', messages: [{ role: 'user', content: `q${i}: tell me about the sea` }], max_tokens: 20 }
    : { model: 'sim', prompt: `Prompt ${i}: once upon a time`, max_tokens: 20 };
  const res = await request(`${proxyUrl}${chat ? '/v1/chat/completions' : '/v1/completions'}`, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' },
  });
  await res.body.text();
}

/** Runs a proxy in front of a candidate with `fault`, `n` requests, capture on; returns the dir and the online verdict counts. */
async function captureRun(
  t: { after(fn: () => unknown): void },
  fault: SimOptions,
  n: number,
  extra: ConfigInput = {},
): Promise<{ dir: string; online: Record<string, number> }> {
  const dir = tempDir(t);
  const baseline = await startSim();
  const candidate = await startSim(fault);
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1, queueSize: 1000 },
    capture: { enabled: true, dir, includePrompts: false },
    ...extra,
  });
  for (let i = 0; i < n; i++) await send(lp.proxyUrl, i);
  await lp.runtime.mirror!.idle();
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  await lp.close();
  const online: Record<string, number> = {};
  for (const v of VERDICTS) online[v] = metricValue(metrics, 'logprobe_verdicts_total', { verdict: v }) ?? 0;
  return { dir, online };
}

test("capture → analyze --json reproduces every online verdict and figure exactly, with each record's own thresholds", async (t) => {
  const runs = [
    await captureRun(t, { stateShift: 0.6 }, 16),
    await captureRun(t, { localShift: 0.8, localShiftRate: 0.15, noise: 0.001 }, 16),
    await captureRun(t, { tokenizerSplit: true }, 6),
    // Other thresholds online: analyze must use them, not the defaults.
    await captureRun(t, { noise: 0.02 }, 16, { analysis: { noiseFloor: 0.03, gapAmbiguous: 0.2, gapSystematic: 0.5 } }),
  ];
  const files = runs.flatMap((r) => readdirSync(r.dir).map((f) => join(r.dir, f)));
  const res = await runCli(['analyze', '--json', ...files], { timeoutMs: 60_000 });
  assert.equal(res.code, 0, res.stderr);
  assert.equal(res.stderr, '');
  const pairs = res.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.equal(pairs.length, 54, 'one object per pair');

  const online: Record<string, number> = {};
  for (const r of runs) for (const [v, n] of Object.entries(r.online)) online[v] = (online[v] ?? 0) + n;
  const offline: Record<string, number> = Object.fromEntries(VERDICTS.map((v) => [v, 0]));
  for (const p of pairs) offline[p.verdict as string]!++;
  assert.deepEqual(offline, online, 'the same verdict mix as the online analysis');
  assert.ok(Object.values(online).filter((n) => n > 0).length >= 4, `a varied mix: ${JSON.stringify(online)}`);

  const byPlace = new Map<string, Record<string, unknown>>();
  for (const p of pairs) byPlace.set(`${p.file as string}:${p.line as number}`, p);
  let checked = 0;
  for (const file of files) {
    const lines = readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l !== '');
    lines.forEach((line, i) => {
      const record = JSON.parse(line) as { analysis: Record<string, unknown> & { thresholds: unknown } };
      const p = byPlace.get(`${file}:${i + 1}`)!;
      const { noiseFloor, thresholds: _t, ...captured } = record.analysis;
      const {
        positions,
        file: _f,
        line: _l,
        id: _i,
        route: _r,
        ts: _ts,
        outcome: _o,
        noiseFloor: floor,
        onlineVerdict,
        model,
        cache: _c,
        paths: _p,
        ...recomputed
      } = p;
      assert.deepEqual(recomputed, captured, `${file}:${i + 1}`);
      assert.equal(floor, noiseFloor);
      assert.equal(onlineVerdict, captured.verdict);
      assert.equal(model, 'sim');
      assert.ok(Array.isArray(positions));
      checked++;
    });
  }
  assert.equal(checked, 54);

  const text = await runCli(['analyze', ...files]);
  assert.equal(text.code, 0);
  assert.match(text.stdout, /0 of 54 verdicts differ from the ones captured online/);
  assert.match(text.stdout, /worst pairs\n {2}1\. .* (global_shift|early_shift) /);
  assert.match(text.stdout, /flips: \d+ pairs diverged/);
  assert.match(text.stdout, /LogprobGlobalShift would fire at pair \d+/);

  // A flag overrides every record's own threshold, and the report says how many verdicts moved.
  const strict = await runCli(['analyze', '--json', '--noise-floor', '0.0001', ...files]);
  const moved = strict.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { verdict: string; onlineVerdict: string; noiseFloor: number });
  assert.ok(moved.every((p) => p.noiseFloor === 0.0001));
  assert.ok(
    moved.some((p) => p.verdict !== p.onlineVerdict),
    'a lower floor turns noise into shifts',
  );
  const fail = await runCli(['analyze', '--noise-floor', '0.0001', '--fail-on', 'local_shift,global_shift', ...files]);
  assert.equal(fail.code, 1);
  assert.match(fail.stdout, /[1-9]\d* of 54 verdicts differ/);
});

/**
 * One pair, every surface (#26 point 7): a scored, diverged pair made by hand and run through the
 * real functions — compare (text, JSON), analyze on its capture record (text, --json, HTML), the
 * demo's live line, the alert's log line, webhook annotations and demo line from a detector
 * transition, and the live page's data — each figure named for the positions it covers and
 * printed as the same number everywhere.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  compare,
  DEFAULT_THRESHOLDS,
  detectorEvidence,
  formatNats,
  scoredBlocks,
  withScoring,
} from '../src/core/index.js';
import { initialDetectorState, observe, type AlertTransition } from '../src/core/detector.js';
import { buildConfig } from '../src/config/load.js';
import { recordLine } from '../src/capture/record.js';
import { renderComparison } from '../src/cli/compare-format.js';
import { alertLine, pairLine } from '../src/demo/run.js';
import { LiveFeed, type LiveData } from '../src/live/feed.js';
import { evidenceText, toAlertmanager } from '../src/mirror/notify.js';
import type { MirroredPair } from '../src/pair/types.js';
import { chatBody, step, type Spec } from './core-bodies.js';
import { tempDir } from './helpers/capture.js';
import { runCli } from './helpers/cli.js';
import { forced } from './helpers/steps.js';

const T = DEFAULT_THRESHOLDS;

/**
 * Three free-running positions, two moved (0.41 and 0.62 nats), then the candidate picks the
 * baseline's third choice at position 3 (flip gap 2.7 where the top-1 − top-2 gap is 1.7; the
 * position's shift 2.8 is the free-running max);
 * teacher-forced over 12 positions, each moved by 3 + 0.01·i on the candidate (max 3.110).
 */
function thePair(): MirroredPair {
  const b: Spec[] = [0, 1, 2, 3].map((i) =>
    step(` t${i}`, -0.3, [
      [' x', -2],
      [' y', -3],
    ]),
  );
  const moves = [0.41, 0.62, 0];
  const c: Spec[] = moves.map((m, i) =>
    step(` t${i}`, -0.3 - m, [
      [' x', -2],
      [' y', -3],
    ]),
  );
  c.push(
    step(' y', -0.2, [
      [' t3', -1.5],
      [' x', -2],
    ]),
  );
  const candidate = chatBody(c);
  const baseline = chatBody(b);
  const free = compare(candidate, baseline, T);
  const n = 12;
  const { scored, prompt } = scoredBlocks(
    {
      candidate: { prompt: [], continuation: Array.from({ length: n }, (_, i) => forced(i, -0.3 - (3 + 0.01 * i))) },
      baseline: { prompt: [], continuation: Array.from({ length: n }, (_, i) => forced(i, -0.3)) },
      method: 'test scoring',
      mode: 'incremental',
      promptStart: 1,
    },
    T,
  );
  const analysis = withScoring(free, scored, prompt, T);
  const result = (body: unknown) => ({ status: 200, latencyMs: 5, body, serverHeaders: {}, error: null });
  return {
    id: 'req-figures',
    ts: '2026-11-29T07:00:00.000Z',
    route: '/v1/chat/completions',
    path: '/v1/chat/completions',
    request: {
      model: 'm',
      messages: [{ role: 'user', content: 'the figures' }],
      temperature: 0,
      logprobs: true,
      top_logprobs: 3,
      max_tokens: 4,
    },
    clientHeaders: {},
    candidate: result(candidate),
    baseline: result(baseline),
    outcome: 'ok',
    analysis,
    noiseFloor: T.noiseFloor,
  };
}

/** Every number after `label` in `text` (the label as a literal). */
function after(text: string, label: string): string[] {
  const re = new RegExp(`${label.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\s*(?:≥ )?(-?[0-9.e+-]+)`, 'g');
  return [...text.matchAll(re)].map((m) => m[1]!.replace(/[.,]$/, ''));
}

test('one scored, diverged pair: each figure says which positions it covers and reads the same on every surface', async (t) => {
  const pair = thePair();
  const a = pair.analysis!;
  assert.equal(a.verdict, 'global_shift');
  assert.equal(a.scored?.outcome, 'ok');
  const free = formatNats(a.maxShift);
  const forcedMax = formatNats(a.scored!.maxShift ?? null);
  const gap = formatNats(a.flip!.gap);
  const topGap = formatNats(a.positions.find((p) => p.i === a.flip!.index)!.gap);
  // The pair is chosen so that each figure differs from the others: a mix-up cannot pass.
  assert.equal(free, '2.800');
  assert.equal(forcedMax, '3.110');
  assert.equal(gap, '2.700');
  assert.equal(topGap, '1.700');
  const counts = { free: `${a.shifted}/${a.comparable}`, forced: `${a.scored!.shifted}/${a.scored!.comparable}` };
  assert.deepEqual(counts, { free: '3/4', forced: '12/12' });

  // compare, text: the free-running summary, the teacher-forced line, the flip's gap and the
  // table's top gap each named; the explanation counts the teacher-forced positions and says so.
  const text = renderComparison(a, T, false);
  assert.deepEqual(after(text, 'free-running: comparable'), ['4']);
  assert.deepEqual(after(text, ', max shift'), [free]);
  assert.deepEqual(
    after(text, 'teacher-forced max shift'),
    [forcedMax, forcedMax],
    'the scored line and the explanation',
  );
  assert.deepEqual(after(text, 'flip gap lp_b(A) − lp_b(B)'), [gap]);
  assert.deepEqual(after(text, 'top gap there'), [topGap]);
  assert.match(text, /12 of 12 teacher-forced positions moved/);
  assert.doesNotMatch(text, /comparable positions moved/);
  // compare --json, the command on the pair's two saved bodies: the same free-running figures, by
  // name. It has no engine to score on, so it gives no teacher-forced figure and says so.
  const dir = tempDir(t, 'logprobe-figures-');
  const bodies = { candidate: join(dir, 'candidate.json'), baseline: join(dir, 'baseline.json') };
  writeFileSync(bodies.candidate, JSON.stringify(pair.candidate.body));
  writeFileSync(bodies.baseline, JSON.stringify(pair.baseline!.body));
  const cmp = await runCli(['compare', '--json', bodies.candidate, bodies.baseline]);
  assert.equal(cmp.code, 1, `a shift: exit 1 (${cmp.stderr})`);
  const json = JSON.parse(cmp.stdout) as typeof a;
  assert.equal(formatNats(json.maxShift), free);
  assert.equal(`${json.shifted}/${json.comparable}`, counts.free);
  assert.equal(formatNats(json.flip!.gap), gap);
  assert.equal(formatNats(json.positions.find((p) => p.i === json.flip!.index)!.gap), topGap);
  assert.equal(json.scored?.outcome, 'skipped', 'no engine: nothing teacher-forced');

  // analyze on the pair's capture record: text, --json and the HTML report.
  const capture = join(dir, 'capture.jsonl');
  writeFileSync(capture, `${recordLine(pair, { includePrompts: true, thresholds: T })}\n`);
  const html = join(dir, 'report.html');
  const [an, anJson, anHtml] = await Promise.all([
    runCli(['analyze', capture]),
    runCli(['analyze', capture, '--json']),
    runCli(['analyze', capture, '--html', html]),
  ]);
  for (const r of [an, anJson, anHtml]) assert.equal(r.code, 0, r.stderr);
  const worst = an.stdout.split('\n').find((l) => l.includes('req-figures'))!;
  assert.ok(worst, an.stdout);
  assert.deepEqual(after(worst, 'free-running max shift'), [free]);
  assert.deepEqual(after(worst, 'teacher-forced max shift'), [forcedMax]);
  assert.match(
    worst,
    new RegExp(
      `free-running max shift ${free} shifted ${counts.free}; teacher-forced max shift ${forcedMax} shifted ${counts.forced}`,
    ),
  );
  assert.deepEqual(after(worst, 'gap'), [gap]);
  assert.deepEqual(
    after(
      an.stdout.split('\n').find((l) => l.startsWith('per-pair free-running max shift'))!,
      'max',
    ),
    [free],
    'the per-pair distribution is the free-running one, and says so',
  );
  const explanation = an.stdout.split('\n')[an.stdout.split('\n').indexOf(worst) + 1]!;
  assert.deepEqual(after(explanation, 'teacher-forced max shift'), [forcedMax]);
  assert.match(explanation, /12 of 12 teacher-forced positions moved/);
  const one = JSON.parse(anJson.stdout.trim().split('\n')[0]!) as typeof a;
  assert.equal(formatNats(one.maxShift), free);
  assert.equal(formatNats(one.scored!.maxShift ?? null), forcedMax);
  assert.equal(formatNats(one.flip!.gap), gap);
  const page = readFileSync(html, 'utf8');
  const row = /<table class="worst">.*?<tbody>(.*?)<\/tbody>/s.exec(page)![1]!;
  const cells = [...row.matchAll(/<td class="num">([^<]*)<\/td>/g)].map((m) => m[1]);
  assert.deepEqual(
    cells.slice(1),
    [free, counts.free, forcedMax, counts.forced],
    'the worst table: free-running, then teacher-forced',
  );
  assert.match(
    page,
    /<th class="num"[^>]*>free-running max shift<\/th>.*<th class="num"[^>]*>teacher-forced max shift<\/th>/s,
  );
  assert.match(row, new RegExp(`gap ${gap.replace('.', '\\.')} \\(`));
  // The strip the page draws is embedded as data: its figures unrounded, so that the page's nats (formatNats itself) gives the same.
  assert.match(
    page,
    /const nats = function formatNats\(x\)/,
    'the page formats with formatNats itself (its source, as built)',
  );

  // The demo's live line: both sets of positions, each with its max.
  const line = pairLine(1, pair);
  assert.deepEqual(after(line, `free-running   ${counts.free}   max`), [free]);
  assert.deepEqual(after(line, `teacher-forced  ${counts.forced}  max`), [forcedMax]);
  assert.deepEqual(after(line, 'gap'), [gap]);

  // A detector transition from this pair, three times over: the alert's median is the detector's
  // per-request max over the positions it counts — here the teacher-forced one the line prints.
  const cfg = buildConfig({ alert: { window: 5, minRequests: 3, forSeconds: 0 } }).alert;
  let state = initialDetectorState();
  const transitions: AlertTransition[] = [];
  for (let i = 0; i < 3; i++) {
    const r = observe(
      state,
      { ...detectorEvidence(a), noiseFloor: T.noiseFloor, requestId: `req-${i}` },
      cfg,
      1000 + i,
    );
    state = r.state;
    transitions.push(...r.transitions);
  }
  const fired = transitions.find((x) => x.alert === 'LogprobGlobalShift' && x.to === 'firing');
  assert.ok(fired, JSON.stringify(transitions));
  const expected = formatNats(detectorEvidence(a).maxShift);
  assert.equal(expected, forcedMax);
  const log = evidenceText(fired);
  assert.deepEqual(after(log, 'median per-request max shift'), [expected]);
  assert.match(log, /\(free-running and teacher-forced positions\)/);
  assert.match(log, /over the last 3 compared requests/);
  const annotations = toAlertmanager(fired, 'test').annotations as Record<string, string>;
  assert.equal(annotations.median_shift_nats, expected);
  assert.match(annotations.median_shift_covers!, /free-running and teacher-forced/);
  const demoAlert = alertLine(fired, 3, 1.5);
  assert.deepEqual(after(demoAlert, 'median per-request max shift'), [expected]);
  assert.match(demoAlert, /at mirrored request 3 .*over the last 3 compared requests/);

  // The live page's data: the strip's figures and the alert's evidence, formatted as the page does (with formatNats).
  const feed = new LiveFeed(buildConfig({}), () => state);
  t.after(() => feed.close());
  feed.snapshot(0, 0);
  feed.onPair(pair);
  feed.onAlert(fired);
  const data = JSON.parse(feed.snapshot(0, 0)) as LiveData;
  const strip = data.pairs[0]!.strip!;
  assert.equal(formatNats(strip.maxShift), free);
  assert.equal(`${strip.shifted}/${strip.comparable}`, counts.free);
  assert.equal(formatNats(strip.forced!.maxShift), forcedMax);
  assert.equal(`${strip.forced!.shifted}/${strip.forced!.comparable}`, counts.forced);
  assert.equal(formatNats(strip.flip!.gap), gap);
  assert.equal(
    formatNats(data.alerts.find((x) => x.alert === 'LogprobGlobalShift')!.last!.evidence.medianShift),
    expected,
  );
});

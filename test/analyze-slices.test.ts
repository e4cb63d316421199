import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  createSimModel,
  startEngineServer,
  type EngineServerHandle,
  type SimAdapterOptions,
  type SimOptions,
} from '@logprobe/engine';
import { startLogprobe } from './helpers/logprobe.js';
import { tempDir } from './helpers/capture.js';
import { runCli } from './helpers/cli.js';
import type { ConfigInput } from '../src/config/schema.js';
import type { AlertTransition } from '../src/core/detector.js';
import type { MirroredPair } from '../src/pair/types.js';

// `analyze` by model slice (issue #35, offline): the verdicts by model and by cache split, the
// sentence when a model's shifts concentrate on cache hits, the path checks, and the in-process
// detectors replayed per model — against what the mirror itself decided online, on simulated
// vLLM-like engines, the capture on, `analyze` run as a user runs it.

const SHIFTS = new Set(['global_shift', 'early_shift', 'local_shift']);
const FAST_ALERT = { window: 20, minRequests: 5, fireFraction: 0.5, forSeconds: 0 };

/** Serves logprobe in front of `cand` and `base` with the capture on; `send` runs the traffic; the pairs and alerts as the mirror told them. */
async function captureRun(
  t: { after(fn: () => unknown): void },
  cand: EngineServerHandle,
  base: EngineServerHandle,
  config: ConfigInput,
  send: (proxyUrl: string, settle: () => Promise<void>) => Promise<void>,
) {
  const dir = tempDir(t, 'logprobe-slices-');
  const pairs: MirroredPair[] = [];
  const alerts: AlertTransition[] = [];
  // Each firing with the pair that caused it: the detectors see a pair before the listeners get it,
  // so the first pair told after a transition is the one that fired it.
  const firedBy: Array<{ alert: AlertTransition; id: string | null }> = [];
  const lp = await startLogprobe(
    {
      candidate: { url: cand.url, engine: 'vllm' },
      baseline: { url: base.url, engine: 'vllm' },
      alert: FAST_ALERT,
      capture: { enabled: true, dir },
      ...config,
      mirror: { sampleRate: 1, queueSize: 4096, ...config.mirror },
    },
    {
      listeners: {
        onPair: (p) => {
          pairs.push(p);
          for (const f of firedBy) f.id ??= p.id;
        },
        onAlert: (a) => {
          alerts.push(a);
          if (a.to === 'firing') firedBy.push({ alert: a, id: null });
        },
      },
    },
  );
  t.after(() => lp.close());
  await send(lp.proxyUrl, () => lp.runtime.mirror!.idle());
  await lp.runtime.mirror!.idle();
  await lp.close();
  const files = readdirSync(dir).map((f) => join(dir, f));
  // The same alert section for analyze as serve ran with.
  const config_ = join(dir, 'alert.yaml');
  writeFileSync(config_, `alert: ${JSON.stringify(FAST_ALERT)}\n`);
  return { dir, files, pairs, alerts, firedBy, config: config_ };
}

/** A completion through the proxy with fetch (in shadow mode logprobe answers 202 and mirrors the copy). */
async function complete(proxyUrl: string, model: string, prompt: string): Promise<void> {
  const r = await fetch(`${proxyUrl}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt, max_tokens: 12 }),
  });
  assert.ok(r.status === 200 || r.status === 202, String(r.status));
  await r.arrayBuffer();
}

/** A vLLM-like engine reporting its prefix-cache hits (`--enable-prompt-tokens-details`), many cached prefixes as vLLM keeps. */
function cachedEngine(o: SimOptions = {}): Promise<EngineServerHandle> {
  return startEngineServer({
    model: createSimModel({ seed: 3, id: 'm', cacheSlots: 64, ...o }),
    api: 'vllm',
    promptTokensDetails: true,
  });
}

const SHARED =
  'You are a careful assistant for the device manual. Answer briefly and precisely, citing the relevant section. ';

/** Ordinary traffic, no repeat probes: half the prompts share a long system prefix (hits once it is cached), half share nothing (misses). */
async function sharedPrefixTraffic(proxyUrl: string, settle: () => Promise<void>, n = 40): Promise<void> {
  for (let i = 0; i < n; i++) {
    const prompt =
      i % 2 === 0
        ? `${SHARED}Question ${i}: how do I reset the device?`
        : `Unrelated request ${i}, number ${i * 7}: describe the weather in town`;
    await complete(proxyUrl, 'm', prompt);
    // One at a time, each mirrored before the next: a request finds the prefixes the earlier ones left.
    await settle();
  }
}

/** The online counts of one model's pairs by cache split: compared (not incomparable, not prompt_mismatch) and shifted. */
function cacheCounts(pairs: MirroredPair[], cache: string) {
  const of = pairs.filter(
    (p) =>
      p.slice?.cache === cache &&
      p.analysis !== null &&
      p.analysis.verdict !== 'incomparable' &&
      p.analysis.verdict !== 'prompt_mismatch',
  );
  return { compared: of.length, shifted: of.filter((p) => SHIFTS.has(p.analysis!.verdict)).length };
}

test('a cache fault on ordinary traffic (no repeats) shows the hit/miss split in analyze', async (t) => {
  // A wrong restore of a cached prefix (the sim's existing `cacheHitShift`, the stand-in for llama's
  // `cache-hit:I`): every distribution computed on a reused prefix moves; a cold request is clean.
  // Shadow mode: the client's own request goes elsewhere, so a copy hits the candidate's cache only
  // where an earlier copy left a shared prefix — as a mirror in front of production sees it.
  const cand = await cachedEngine({ cacheHitShift: 0.6 });
  const base = await cachedEngine();
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await captureRun(t, cand, base, { mode: 'shadow', mirror: { concurrency: 1 } }, (url, settle) =>
    sharedPrefixTraffic(url, settle),
  );
  const hit = cacheCounts(r.pairs, 'hit');
  const miss = cacheCounts(r.pairs, 'miss');
  assert.ok(hit.compared >= 5 && miss.compared >= 5, `hits and misses both: ${JSON.stringify({ hit, miss })}`);
  assert.ok(hit.shifted / hit.compared >= 0.5, `the fault shifts the hits: ${JSON.stringify(hit)}`);
  assert.equal(miss.shifted, 0, 'a cold request is clean');

  const text = await runCli(['analyze', '--config', r.config, ...r.files], { timeoutMs: 60_000 });
  assert.equal(text.code, 0, text.stderr);
  const sentence = `model m: shifted on ${hit.shifted} of ${hit.compared} cache hits, ${miss.shifted} of ${miss.compared} misses: suspect the cache path (prefix cache / KV reuse)`;
  assert.ok(text.stdout.includes(sentence), `${sentence}\n---\n${text.stdout}`);
  const row = (c: string, n: { compared: number; shifted: number }) =>
    new RegExp(`^ {2}${c} +${n.compared} compared +${n.shifted} shifted`, 'm');
  assert.match(text.stdout, row('hit', hit));
  assert.match(text.stdout, row('miss', miss));
  // One model: no per-model table, and the alerts read as before (no model in their names).
  assert.doesNotMatch(text.stdout, /^by model/m);

  // The candidate's decode read the wrong restore, its prefill never reads the cache: the path
  // check sees the same hits, per backend, and its offline alert is the one that fired online.
  const pathBad = r.pairs
    .flatMap((p) => p.paths ?? [])
    .filter((p) => p.backend === 'candidate' && p.verdict === 'path_inconsistent').length;
  assert.ok(pathBad > 0);
  const checked = r.pairs
    .flatMap((p) => p.paths ?? [])
    .filter((p) => p.backend === 'candidate' && p.outcome === 'ok').length;
  assert.match(
    text.stdout,
    new RegExp(
      `^path check on the candidate \\(.*\\): ${checked} of ${checked} checked .*path_inconsistent ${pathBad}\\b`,
      'm',
    ),
  );
  assert.match(text.stdout, /^path check on the baseline .*; identical \d+$/m);
  assertAlertsReproduced(r, text.stdout, false);

  // --json: each pair's model and cache as captured, its path checks with their verdicts.
  const json = await runCli(['analyze', '--json', ...r.files], { timeoutMs: 60_000 });
  const rows = json.stdout
    .trim()
    .split('\n')
    .map(
      (l) =>
        JSON.parse(l) as {
          id: string;
          model: string;
          cache: string;
          paths?: Array<{ backend: string; verdict: string }>;
        },
    );
  const online = new Map(r.pairs.map((p) => [p.id, p]));
  assert.equal(rows.length, r.pairs.length);
  for (const row of rows) {
    const p = online.get(row.id)!;
    assert.deepEqual([row.model, row.cache], [p.slice!.model, p.slice!.cache]);
    assert.deepEqual(
      row.paths?.map((x) => [x.backend, x.verdict]),
      p.paths?.map((x) => [x.backend, x.verdict]),
    );
  }

  // The HTML report carries the same split and sentence.
  const html = join(r.dir, 'report.html');
  const page = await runCli(['analyze', '--html', html, ...r.files], { timeoutMs: 60_000 });
  assert.equal(page.code, 0, page.stderr);
  const doc = readFileSync(html, 'utf8');
  assert.ok(doc.includes(`<p class="cache-suspect">${sentence.replace(/\(/g, '(')}.</p>`), 'the sentence on the page');
  assert.match(
    doc,
    new RegExp(
      `data-model="m" data-cache="hit">.*?<td class="num">${hit.compared}</td><td class="num" data-shifted="${hit.shifted}">`,
    ),
  );
  assert.match(doc, /<section id="paths">/);
});

test('a fault on every request (not the cache) does not read as a cache fault', async (t) => {
  const cand = await cachedEngine({ stateShift: 0.6 });
  const base = await cachedEngine();
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await captureRun(
    t,
    cand,
    base,
    { mode: 'shadow', mirror: { concurrency: 1 }, path: { rate: 0 } },
    (url, settle) => sharedPrefixTraffic(url, settle, 24),
  );
  const hit = cacheCounts(r.pairs, 'hit');
  const miss = cacheCounts(r.pairs, 'miss');
  assert.ok(hit.compared >= 5 && miss.shifted >= 5, JSON.stringify({ hit, miss }));
  const text = await runCli(['analyze', ...r.files], { timeoutMs: 60_000 });
  assert.equal(text.code, 0, text.stderr);
  assert.doesNotMatch(text.stdout, /suspect the cache path/);
  assert.match(text.stdout, /the shifts do not concentrate on cache hits \(at least 5 hits and 5 misses compared/);
});

const MODELS = ['m', ...Array.from({ length: 8 }, (_, i) => `a${i + 1}`)];

/** A vLLM-like engine serving the base `m` and adapters a1..a8; `faults` by adapter id. */
function adapterEngine(faults: Record<string, Partial<SimAdapterOptions>> = {}): Promise<EngineServerHandle> {
  return startEngineServer({
    model: createSimModel({ seed: 5, id: 'm', adapters: MODELS.slice(1).map((id) => ({ id, ...faults[id] })) }),
    api: 'vllm',
  });
}

/**
 * Every alert that fired online (its model, backend, and the pair that fired it) is in analyze's
 * text as `ALERT (backend, model M) would fire at pair N, id ID`, N that pair's place in the
 * capture; and analyze names no other.
 */
function assertAlertsReproduced(
  r: { pairs: MirroredPair[]; firedBy: Array<{ alert: AlertTransition; id: string | null }> },
  text: string,
  manyModels: boolean,
): number {
  const place = new Map(r.pairs.map((p, i) => [p.id, i + 1]));
  for (const { alert: a, id } of r.firedBy) {
    assert.ok(id !== null, `a pair came after ${a.alert}`);
    const parts = [...(a.backend ? [a.backend] : []), ...(manyModels ? [`model ${a.model}`] : [])];
    const name = parts.length > 0 ? `${a.alert} (${parts.join(', ')})` : a.alert;
    const line = `  ${name} would fire at pair ${place.get(id)}, id ${id} (`;
    assert.ok(text.includes(line), `online: ${line}\n---\n${text}`);
  }
  const offline = text.split('\n').filter((l) => / would fire at pair /.test(l));
  assert.equal(offline.length, r.firedBy.length, offline.join('\n'));
  return r.firedBy.length;
}

test('analyze over the captures reproduces the online per-model verdicts and alert pairs', async (t) => {
  const cand = await adapterEngine({ a3: { stateShift: 0.35 }, a6: { promptWithoutAdapter: true } });
  const base = await adapterEngine();
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await captureRun(t, cand, base, { mirror: { concurrency: 4 } }, async (url) => {
    let next = 0;
    const one = async (): Promise<void> => {
      for (let i = next++; i < 9 * 24; i = next++)
        await complete(url, MODELS[i % MODELS.length]!, `Request ${i}: tell me about the weather and the layers`);
    };
    await Promise.all(Array.from({ length: 8 }, one));
  });
  const text = await runCli(['analyze', '--config', r.config, ...r.files], { timeoutMs: 60_000 });
  assert.equal(text.code, 0, text.stderr);
  const fired = assertAlertsReproduced(r, text.stdout, true);
  // a3's pairs moved (its pair alert; its decode moved, not its prefill: its path alert too), a6's
  // prompt logprobs lack its head (its path alert); no clean model's alert fires.
  const names = new Set(r.firedBy.map((f) => `${f.alert.alert}:${f.alert.model}`));
  assert.ok(names.has('LogprobGlobalShift:a3') && names.has('LogprobPathInconsistency:a6'), [...names].join(' '));
  assert.ok(
    r.firedBy.every((f) => f.alert.model === 'a3' || f.alert.model === 'a6'),
    [...names].join(' '),
  );
  assert.ok(fired >= 2);

  // The per-model table: each model's compared and shifted pairs as online.
  assert.match(text.stdout, /^by model \(9 models/m);
  for (const model of MODELS) {
    const own = r.pairs.filter((p) => p.slice?.model === model && p.analysis !== null);
    const shifted = own.filter((p) => SHIFTS.has(p.analysis!.verdict)).length;
    const alerts = r.alerts.filter((a) => a.model === model && a.to === 'firing').length;
    const row = text.stdout.split('\n').find((l) => l.startsWith(`  ${model.padEnd(20)} `));
    assert.ok(row, model);
    const cells = row.trim().split(/\s+/);
    assert.deepEqual([cells[1], cells[2]], [String(own.length), String(shifted)], `${model}: ${row}`);
    assert.equal(/would fire|at pair/.test(row), alerts > 0, row);
  }
  // The path check per model: a6's candidate path pairs are path_inconsistent, as online.
  const a6 = r.pairs.filter((p) => p.slice?.model === 'a6').flatMap((p) => p.paths ?? []);
  const bad = a6.filter((p) => p.backend === 'candidate' && p.verdict === 'path_inconsistent').length;
  const all = a6.filter((p) => p.backend === 'candidate' && p.verdict !== null).length;
  assert.ok(bad > 0);
  assert.match(text.stdout, new RegExp(`^ {2}path_inconsistent by model: .*\\ba6 ${bad} of ${all}\\b`, 'm'));
});

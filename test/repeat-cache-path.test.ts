import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { request } from 'undici';
import { createSimModel, startEngineServer, type EngineServerHandle, type SimOptions } from '@logprobe/engine';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import { captureLines, tempDir } from './helpers/capture.js';
import { runCli } from './helpers/cli.js';
import type { ConfigInput } from '../src/config/schema.js';
import type { AlertTransition } from '../src/core/detector.js';
import type { MirroredPair } from '../src/pair/types.js';
import { probeShape } from '../src/core/self.js';

// The cache path (issue #16): repeat probes (the same copy twice on one backend, cold then warm),
// the self-consistency verdict and alert, baseline-free mode, and a floor that learns from the
// trusted side only — on the simulated engines speaking llama-server's API with its one-slot
// prefix cache (`/slots/0?action=erase` empties it: the first run is cold for sure).

/** A simulated llama-server with its prefix cache and slot actions. */
function engine(o: SimOptions = {}): Promise<EngineServerHandle> {
  return startEngineServer({
    model: createSimModel({ seed: 7, id: 'm', ...o }),
    api: 'llamacpp',
    slotSavePath: '/tmp',
  });
}

/** n completions with distinct, long prompts (a cache hit needs a shared prefix to reuse). */
async function traffic(proxyUrl: string, n: number, from = 0, settle?: () => Promise<void>): Promise<void> {
  for (let i = from; i < from + n; i++) {
    const body = {
      model: 'm',
      prompt: `Request number ${i}: a prompt long enough for the prefix cache to matter`,
      max_tokens: 16,
    };
    const r = await request(`${proxyUrl}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify(body),
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(r.statusCode, 200);
    await r.body.dump();
    await settle?.();
  }
}

const FAST_ALERT = { window: 20, minRequests: 5, fireFraction: 0.5, forSeconds: 0 };

async function run(
  t: { after(fn: () => unknown): void },
  cand: EngineServerHandle,
  base: EngineServerHandle | null,
  config: ConfigInput,
  n: number,
  serial = false,
) {
  const pairs: MirroredPair[] = [];
  const alerts: AlertTransition[] = [];
  const lp = await startLogprobe(
    {
      candidate: { url: cand.url },
      baseline: base ? { url: base.url } : null,
      alert: FAST_ALERT,
      ...config,
      mirror: { sampleRate: 1, concurrency: 1, ...config.mirror },
    },
    { listeners: { onPair: (p) => pairs.push(p), onAlert: (a) => alerts.push(a) } },
  );
  t.after(() => lp.close());
  await traffic(lp.proxyUrl, n, 0, serial ? () => lp.runtime.mirror!.idle() : undefined);
  await lp.runtime.mirror!.idle();
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  const self = (backend: string) => pairs.flatMap((p) => p.repeats ?? []).filter((r) => r.backend === backend);
  return { lp, pairs, alerts, metrics, self };
}

test('a cache-hit fault: the candidate disagrees with itself on its warm repeats, the baseline does not; LogprobSelfInconsistency fires for the candidate within the window minimum', async (t) => {
  const cand = await engine({ cacheHitShift: 0.6 });
  const base = await engine();
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await run(
    t,
    cand,
    base,
    { mirror: { repeat: { rate: 1, backends: ['candidate', 'baseline'], flush: true } } },
    24,
  );
  const cs = r.self('candidate');
  const bs = r.self('baseline');
  assert.equal(cs.length, 24);
  assert.ok(
    cs.every((x) => x.flushed),
    'every first run was cold (the slot erased first)',
  );
  // A client request between the erase and a probe's first run can warm the prompt's shared start
  // (the engine says so): the ≥ 90% is over the probes whose first run was fully cold.
  const probes = cs.filter((x) => x.cached.first === 0 && (x.cached.second ?? 0) > 0);
  assert.ok(
    probes.length >= 18,
    `${probes.length} of 24 fully cold → warm: ${JSON.stringify(cs.map((x) => x.cached))}`,
  );
  const inconsistent = cs.filter((x) => x.verdict === 'self_inconsistent').length;
  const onProbes = probes.filter((x) => x.verdict === 'self_inconsistent').length;
  assert.ok(
    onProbes / probes.length >= 0.9,
    `self_inconsistent on ${onProbes} of ${probes.length} cold → warm repeat pairs`,
  );
  // The clean baseline (no noise, no fault) gives the same tokens and values on both runs of each of
  // its 24 repeat pairs.
  assert.equal(bs.length, 24, 'every request repeated on the baseline too');
  assert.deepEqual(
    bs.filter((x) => x.verdict !== 'identical').map((x) => [x.probe, x.verdict]),
    [],
    'the clean baseline agrees with itself',
  );
  const fired = r.alerts.find((a) => a.alert === 'LogprobSelfInconsistency' && a.to === 'firing');
  assert.ok(fired, 'LogprobSelfInconsistency fired');
  assert.equal(fired.backend, 'candidate');
  assert.ok(
    fired.evidence.requestsInWindow <= 8,
    `within the window's minimum (${fired.evidence.requestsInWindow} repeat pairs)`,
  );
  assert.equal(
    metricValue(r.metrics, 'logprobe_alert_firing', { alert: 'LogprobSelfInconsistency', backend: 'candidate' }),
    1,
  );
  assert.equal(
    metricValue(r.metrics, 'logprobe_alert_firing', { alert: 'LogprobSelfInconsistency', backend: 'baseline' }),
    0,
  );
  assert.equal(
    metricValue(r.metrics, 'logprobe_verdicts_total', {
      kind: 'self',
      backend: 'candidate',
      verdict: 'self_inconsistent',
    }),
    inconsistent,
  );
  assert.ok((metricValue(r.metrics, 'logprobe_self_shift_nats_count', { backend: 'candidate' }) ?? 0) > 0);
  assert.ok(
    r.lp.logs.lines.some((l) =>
      String(l.msg).startsWith(
        'LogprobSelfInconsistency (candidate, model m) firing: the candidate disagrees with itself between a cold and a warm run',
      ),
    ),
    'the warn line says what it means',
  );
});

test('clean engines with run-to-run noise and the prefix cache on: 200 repeat pairs, cold → warm probes that differ by noise only, no self_inconsistent verdict, no alert', async (t) => {
  // Noise on every logit (σ 0.002 nats, as a real engine's kernels give): the two runs of a probe
  // differ at every position, by far less than the floor (0.1). The slot is erased before each
  // first run, so the pairs are cache probes, not two cold runs.
  const cand = await engine({ noise: 0.002 });
  const base = await engine({ noise: 0.002 });
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await run(
    t,
    cand,
    base,
    { mirror: { repeat: { rate: 1, backends: ['candidate', 'baseline'], flush: true } } },
    100,
  );
  const all = [...r.self('candidate'), ...r.self('baseline')];
  assert.equal(all.length, 200);
  const shapes = JSON.stringify(all.map((x) => [x.probe, x.cached, x.verdict]));
  const probes = all.filter(
    (x) => x.flushed && x.probe === 'cold_warm' && x.cached.first === 0 && (x.cached.second ?? 0) > 0,
  );
  // Most, not all: a copy of another request can reach the engine between a flush and the first
  // run and leave a shared prefix in the cache (the probe is then `not_cold`, never alerted on):
  // 178–190 of 200 here, fewer the busier the machine.
  assert.ok(probes.length >= 160, `${probes.length} of 200 fully cold → warm: ${shapes}`);
  assert.ok(
    probes.every((x) => x.verdict === 'noise' && (x.analysis?.maxShift ?? 0) > 0 && x.analysis!.maxShift! < 0.1),
    `every cold → warm probe differs by noise, under the floor: ${JSON.stringify(probes.map((x) => [x.verdict, x.analysis?.maxShift]))}`,
  );
  assert.deepEqual(
    all.filter((x) => x.verdict !== 'noise' && x.verdict !== 'identical').map((x) => [x.backend, x.verdict, x.cached]),
    [],
    'no self_inconsistent and no incomparable repeat pair',
  );
  assert.ok(!r.alerts.some((a) => a.alert === 'LogprobSelfInconsistency'));
  assert.equal(
    metricValue(r.metrics, 'logprobe_alert_firing', { alert: 'LogprobSelfInconsistency', backend: 'candidate' }),
    0,
  );
});

test("noiseFloor auto learns from the baseline's repeats only: a cache bug on the candidate cannot raise the floor over itself", async (t) => {
  const cand = await engine({ cacheHitShift: 0.6 });
  const base = await engine({ noise: 0.002 });
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await run(
    t,
    cand,
    base,
    {
      analysis: { noiseFloor: 'auto' },
      calibration: { rate: 1, minSamples: 5, margin: 3, minFloor: 0.01 },
      mirror: { repeat: { rate: 1, backends: ['candidate', 'baseline'], flush: true } },
    },
    24,
  );
  const floor = metricValue(r.metrics, 'logprobe_noise_floor_nats', { model: 'm' })!;
  const candObserved = metricValue(r.metrics, 'logprobe_noise_floor_observed_nats', {
    backend: 'candidate',
    model: 'm',
  })!;
  assert.ok(candObserved > 0.3, `the candidate's repeats disagree (observed p99 ${candObserved})`);
  const baseObserved = metricValue(r.metrics, 'logprobe_noise_floor_observed_nats', {
    backend: 'baseline',
    model: 'm',
  })!;
  // minFloor under the baseline's p99 × margin: a floor that never calibrated stays at 0.01 and fails.
  assert.ok(baseObserved * 3 > 0.01, `the baseline's repeats were calibrated on (observed p99 ${baseObserved})`);
  assert.ok(
    Math.abs(floor - Math.max(0.01, baseObserved * 3)) < 1e-9,
    `the floor in force (${floor}) = max(minFloor, baseline p99 ${baseObserved} × margin), never from the candidate's ${candObserved}`,
  );
  assert.ok(
    floor < 0.1,
    `the floor in force (${floor}) comes from the baseline's noise, not the candidate's ${candObserved}`,
  );
  const late = r.self('candidate').slice(-10);
  assert.ok(late.filter((x) => x.verdict === 'self_inconsistent').length >= 9, 'still detected under auto');
  assert.ok(r.alerts.some((a) => a.alert === 'LogprobSelfInconsistency' && a.backend === 'candidate'));
});

test('baseline-free (baseline: null): the candidate alone, every mirrored request a repeat probe; captured, analysed, and a replay with --baseline none gates on it', async (t) => {
  const dir = tempDir(t);
  const cand = await engine({ cacheHitShift: 0.6 });
  t.after(() => cand.close());
  // Each request waits for its mirrored probe (serial): on one slot (llama-server's) a client
  // request landing between the flush and a probe's first run leaves the prompt's shared start
  // warm, and the simulated fault moves every position of a warm run alike, however much it
  // reused — such a probe (still cold_warm: the second run reused more) reads identical and
  // dilutes the window's pooled share under fireFraction on a busy machine.
  const r = await run(
    t,
    cand,
    null,
    { mirror: { repeat: { flush: true } }, capture: { enabled: true, dir } },
    12,
    true,
  );
  assert.ok(r.pairs.every((p) => p.baseline === null && p.analysis === null && p.outcome === 'ok'));
  const cs = r.self('candidate');
  assert.equal(cs.length, 12);
  const cold = cs.filter((x) => x.cached.first === 0 && (x.cached.second ?? 0) > 0);
  const shapes = JSON.stringify(cs.map((x) => [x.cached, x.verdict]));
  assert.equal(cold.length, 12, `every probe fully cold → warm: ${shapes}`);
  assert.ok(
    cold.every((x) => x.verdict === 'self_inconsistent'),
    `every fully cold → warm probe disagrees: ${shapes}`,
  );
  assert.ok(
    r.alerts.some((a) => a.alert === 'LogprobSelfInconsistency' && a.backend === 'candidate' && a.to === 'firing'),
    `LogprobSelfInconsistency fired for the candidate: ${shapes}`,
  );
  assert.equal(metricValue(r.metrics, 'logprobe_mirror_total', { outcome: 'ok' }), 12);
  await r.lp.close();

  const lines = captureLines(dir);
  assert.equal(lines.length, 12);
  const rec = JSON.parse(lines[0]!) as {
    v: number;
    baseline: unknown;
    repeats: Array<{ backend: string; verdict: string; second: { status: number } }>;
  };
  assert.equal(rec.v, 3);
  assert.equal(rec.baseline, null);
  assert.equal(rec.repeats[0]!.backend, 'candidate');
  assert.equal(rec.repeats[0]!.second.status, 200);
  const files = readFileSync(`${dir}/${(await import('node:fs')).readdirSync(dir)[0]}`, 'utf8');
  assert.ok(files.length > 0);
  const analysed = await runCli(['analyze', dir]);
  assert.equal(analysed.code, 0, analysed.stderr);
  assert.match(analysed.stdout, /baseline-free: 12 pairs had no baseline/);
  const mix =
    /repeats on the candidate \(the same request twice: cold, then warm from its cache\): 12 pairs, 12 with the cache emptied first[^;\n]*; .*self_inconsistent (\d+)/.exec(
      analysed.stdout,
    );
  assert.ok(mix, analysed.stdout);
  assert.equal(
    Number(mix[1]),
    cs.filter((x) => x.verdict === 'self_inconsistent').length,
    'offline, the same self verdicts as online',
  );
  assert.doesNotMatch(analysed.stdout, /^verdicts$/m, 'no empty pair sections when there is no baseline');

  // The same probe as a CI gate: replay --baseline none on the candidate alone.
  const prompts = `${dir}/prompts.jsonl`;
  (await import('node:fs')).writeFileSync(
    prompts,
    Array.from({ length: 6 }, (_, i) =>
      JSON.stringify({
        route: '/v1/completions',
        prompt: `Gate prompt ${i}: long enough for a cached prefix to be reused`,
        max_tokens: 12,
      }),
    ).join('\n'),
  );
  const gate = await runCli([
    'replay',
    prompts,
    '--candidate',
    cand.url,
    '--baseline',
    'none',
    '--out',
    `${dir}/replay.jsonl`,
    '--fail-on',
    'self_inconsistent',
  ]);
  assert.equal(gate.code, 1, gate.stdout + gate.stderr);
  assert.match(gate.stdout, /gate: FAIL \(self_inconsistent \d+/);
  const clean = await engine();
  t.after(() => clean.close());
  const pass = await runCli([
    'replay',
    prompts,
    '--candidate',
    clean.url,
    '--baseline',
    'none',
    '--out',
    `${dir}/replay2.jsonl`,
    '--fail-on',
    'self_inconsistent',
  ]);
  assert.equal(pass.code, 0, pass.stdout + pass.stderr);
  assert.match(pass.stdout, /gate: PASS/);
});

test('probes with flush run one at a time under concurrent traffic: every second run is warm (the engine says so) and disagrees with the first', async (t) => {
  // Eight prefixes kept, so that a client's request between a probe's runs does not evict it:
  // only a flush can (it empties them all).
  const cand = await engine({ cacheHitShift: 0.6, cacheSlots: 8 });
  t.after(() => cand.close());
  const pairs: MirroredPair[] = [];
  const lp = await startLogprobe(
    {
      candidate: { url: cand.url },
      baseline: null,
      alert: FAST_ALERT,
      mirror: { sampleRate: 1, concurrency: 4, repeat: { flush: true } },
    },
    { listeners: { onPair: (p) => pairs.push(p) } },
  );
  t.after(() => lp.close());
  // Eight clients at once: with four mirror workers, another probe's flush between a probe's
  // first and second run would leave the second cold.
  await Promise.all(Array.from({ length: 8 }, (_, k) => traffic(lp.proxyUrl, 3, k * 3)));
  await lp.runtime.mirror!.idle();
  const rs = pairs.flatMap((p) => p.repeats ?? []);
  assert.equal(rs.length, 24);
  // No second run found its prefix gone: no other probe's flush came between a probe's runs.
  const evicted = rs.filter((r) => r.cached.second === 0);
  assert.equal(
    evicted.length,
    0,
    `${evicted.length} of ${rs.length} second runs were cold: ${JSON.stringify(evicted.map((r) => r.cached))}`,
  );
  // A client's request may still land between the flush and the first run and warm a shared
  // prefix of it: the first run then reused part of the prompt (the engine says how much).
  const cold = rs.filter((r) => r.cached.first === 0);
  assert.ok(
    cold.length >= rs.length * 0.6,
    `${cold.length} of ${rs.length} first runs cold: ${JSON.stringify(rs.map((r) => r.cached))}`,
  );
  assert.ok(
    rs.every((r) => probeShape(r.cached) === 'cold_warm'),
    'every pair a cold→warm probe: the second run reused more than the first',
  );
  const inconsistent = cold.filter((r) => r.verdict === 'self_inconsistent').length;
  assert.ok(
    inconsistent / cold.length >= 0.9,
    `self_inconsistent on ${inconsistent} of ${cold.length} cold→warm pairs`,
  );
});

test('cachedPromptTokens reads what each engine reports of its cache hit; probeShape says what a pair probed; a second run served cold is cold↔cold offline too', async () => {
  const { cachedPromptTokens, probeShape, bothCold } = await import('../src/core/self.js');
  assert.equal(probeShape({ first: 0, second: 30 }), 'cold_warm');
  assert.equal(
    probeShape({ first: null, second: null }),
    'unprobed',
    'an engine that does not say, no flush confirmed: unknown is unknown (#22)',
  );
  assert.equal(
    probeShape({ first: null, second: null }, true),
    'cold_warm',
    'a confirmed flush made the first run cold',
  );
  assert.equal(
    probeShape({ first: 4, second: 30 }),
    'cold_warm',
    'the first run reused a shared template prefix, the second the whole prompt',
  );
  assert.equal(probeShape({ first: 30, second: 30 }), 'not_cold', 'both runs equally warm');
  assert.equal(probeShape({ first: 0, second: 0 }), 'not_warm');
  assert.equal(bothCold({ first: 0, second: 0 }, false), true);
  assert.equal(bothCold({ first: null, second: 0 }, true), true, 'flushed: cold for sure');
  assert.equal(bothCold({ first: null, second: 0 }, false), false);
  const { analyzeRepeat } = await import('../src/pair/analyze.js');
  assert.equal(
    cachedPromptTokens({ usage: { prompt_tokens: 20, prompt_tokens_details: { cached_tokens: 16 } } }),
    16,
    'vLLM / SGLang OpenAI usage',
  );
  assert.equal(cachedPromptTokens({ meta_info: { cached_tokens: 7 } }), 7, 'SGLang /generate');
  assert.equal(
    cachedPromptTokens({ usage: { prompt_tokens: 20 }, timings: { prompt_n: 1 } }),
    19,
    'llama-server: prompt tokens − evaluated',
  );
  assert.equal(cachedPromptTokens({ usage: { prompt_tokens: 20 }, timings: { prompt_n: 20 } }), 0);
  assert.equal(cachedPromptTokens({ usage: { prompt_tokens: 20, prompt_tokens_details: null } }), null, 'not reported');
  assert.equal(cachedPromptTokens('text'), null);
  // The same engine's answer twice, the second reported cold: identical, and marked not warm.
  const cand = await engine();
  try {
    const body = {
      model: 'm',
      prompt: 'A prompt for two runs of the same request',
      max_tokens: 8,
      temperature: 0,
      logprobs: 2,
    };
    const send = async () =>
      JSON.parse(
        await (
          await request(`${cand.url}/v1/completions`, {
            method: 'POST',
            body: JSON.stringify(body),
            headers: { 'content-type': 'application/json' },
          })
        ).body.text(),
      ) as {
        usage: { prompt_tokens: number };
        timings: { prompt_n: number };
      };
    const first = await send();
    await request(`${cand.url}/slots/0?action=erase`, { method: 'POST' }).then((r) => r.body.dump());
    const second = await send();
    assert.equal(second.timings.prompt_n, second.usage.prompt_tokens, 'the erased slot made the second run cold');
    const side = (b: unknown) => ({ status: 200, body: b });
    const r = analyzeRepeat(
      side(first),
      { backend: 'candidate', flushed: true, second: side(second) },
      { noiseFloor: 0.1, gapAmbiguous: 0.3, gapSystematic: 0.4, globalFraction: 0.8, minAligned: 3 },
    );
    assert.equal(r.probe, 'not_warm');
    assert.equal(r.verdict, 'identical');
  } finally {
    await cand.close();
  }
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, startSim } from './helpers/sim.js';
import { startUpstream } from './helpers/upstream.js';

const FAST_ALERTS = { window: 20, minRequests: 10, fireFraction: 0.5, forSeconds: 0, cusum: { k: 0.5, h: 5 } };

async function send(
  proxyUrl: string,
  i: number,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
) {
  const chat = i % 2 === 0;
  const body = chat
    ? {
        model: 'sim',
        messages: [{ role: 'user', content: `question number ${i}: why is the sky blue?` }],
        max_tokens: 24,
        temperature: 0.9,
        ...extra,
      }
    : { model: 'sim', prompt: `Prompt ${i}: the capital of France is`, max_tokens: 24, temperature: 0.9, ...extra };
  const res = await request(`${proxyUrl}${chat ? '/v1/chat/completions' : '/v1/completions'}`, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json', ...headers },
  });
  const text = await res.body.text();
  return { status: res.statusCode, text };
}

async function metrics(adminUrl: string): Promise<string> {
  const res = await request(`${adminUrl}/metrics`);
  return res.body.text();
}

test('a corrupted prefill state gives global_shift verdicts and fires LogprobGlobalShift within the window', async (t) => {
  const baseline = await startSim();
  const candidate = await startSim({ stateShift: 0.6 });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1 },
    alert: FAST_ALERTS,
  });
  t.after(() => lp.close());
  for (let i = 0; i < 20; i++) assert.equal((await send(lp.proxyUrl, i)).status, 200);
  await lp.runtime.mirror!.idle();
  const m = await metrics(lp.adminUrl);
  assert.equal(metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }), 1);
  const global = metricValue(m, 'logprobe_verdicts_total', { verdict: 'global_shift' }) ?? 0;
  const early = metricValue(m, 'logprobe_verdicts_total', { verdict: 'early_shift' }) ?? 0;
  assert.ok(global > 0, `global_shift verdicts: ${global}`);
  assert.equal(global + early, 20, 'every pair is a shift');
  assert.ok((metricValue(m, 'logprobe_window_global_shift_ratio') ?? 0) >= 0.5);
  assert.equal(metricValue(m, 'logprobe_mirror_total', { outcome: 'ok' }), 20);
  assert.ok((metricValue(m, 'logprobe_token_shift_nats_count') ?? 0) > 20, 'per-token shift histogram');
  assert.ok((metricValue(m, 'logprobe_token_crosspath_diff_nats_count') ?? 0) > 0);
  assert.ok((metricValue(m, 'logprobe_token_gap_nats_count') ?? 0) > 0);
  assert.ok((metricValue(m, 'logprobe_token_kl_nats_count') ?? 0) > 0);
  assert.ok((metricValue(m, 'logprobe_first_divergence_tokens_count') ?? 0) > 0);
  assert.ok((metricValue(m, 'logprobe_flip_gap_nats_count') ?? 0) > 0);
  assert.equal(metricValue(m, 'logprobe_upstream_duration_seconds_count', { backend: 'baseline' }), 20);
  assert.equal(metricValue(m, 'logprobe_noise_floor_nats', { model: 'sim' }), 0.1);
});

test('float noise (σ = 1e-3) gives no global_shift verdict and no alert over 500 mirrored requests', async (t) => {
  const baseline = await startSim();
  const candidate = await startSim({ noise: 0.001 });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1, concurrency: 4, queueSize: 1000 },
    alert: FAST_ALERTS,
  });
  t.after(() => lp.close());
  for (let batch = 0; batch < 50; batch++) {
    await Promise.all(Array.from({ length: 10 }, (_, j) => send(lp.proxyUrl, batch * 10 + j, { max_tokens: 16 })));
  }
  await lp.runtime.mirror!.idle();
  const m = await metrics(lp.adminUrl);
  assert.equal(metricValue(m, 'logprobe_mirror_total', { outcome: 'ok' }), 500);
  assert.equal(metricValue(m, 'logprobe_verdicts_total', { verdict: 'global_shift' }) ?? 0, 0);
  assert.equal(metricValue(m, 'logprobe_verdicts_total', { verdict: 'local_shift' }) ?? 0, 0);
  assert.equal(metricValue(m, 'logprobe_verdicts_total', { verdict: 'early_shift' }) ?? 0, 0);
  assert.ok((metricValue(m, 'logprobe_verdicts_total', { verdict: 'noise' }) ?? 0) > 400);
  assert.equal(metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }), 0);
  assert.equal(metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobSustainedShift' }), 0);
  assert.ok((metricValue(m, 'logprobe_cusum_statistic') ?? 1) < 1);
});

test("client responses are byte-identical to the candidate's while every request is mirrored", async (t) => {
  const baseline = await startSim();
  const candidate = await startSim({ stateShift: 0.6 });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1 },
  });
  t.after(() => lp.close());
  for (const [i, extra] of [
    [0, { temperature: 0 }],
    [1, { temperature: 0, logprobs: 3 }],
    [2, { temperature: 0, stream: true }],
    [3, { temperature: 0, stream: true, stream_options: { include_usage: true } }],
  ] as const) {
    const direct = await send(candidate.url, i, extra);
    const proxied = await send(lp.proxyUrl, i, extra);
    // Ids and timestamps differ per response; everything else must be the same bytes.
    const norm = (s: string) => s.replace(/"id":"[^"]*"/g, '"id":"X"').replace(/"created":\d+/g, '"created":0');
    assert.equal(proxied.status, direct.status);
    assert.equal(norm(proxied.text), norm(direct.text));
  }
  await lp.runtime.mirror!.idle();
});

test('a non-greedy client request reaches the candidate unchanged; both mirrored copies are greedy with logprobs; no client credential at the baseline', async (t) => {
  const baseline = await startSim();
  const candidate = await startSim();
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url, apiKey: 'sk-baseline-key' },
    mirror: { sampleRate: 0, topLogprobs: 4, maxTokens: 16 },
  });
  t.after(() => lp.close());
  const clientBody =
    '{"model":"sim","messages":[{"role":"user","content":"hi there"}],"temperature":1.3,"top_p":0.5,"max_tokens":40,"stream":true,"stream_options":{"include_usage":true},"presence_penalty":0.4,"logit_bias":{"5":3}}';
  const res = await request(`${lp.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    body: clientBody,
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-client-secret', 'x-logprobe-mirror': '1' },
  });
  assert.equal(res.statusCode, 200);
  await res.body.text();
  await lp.runtime.mirror!.idle();

  const atCandidate = candidate.requests.filter((r) => r.path === '/v1/chat/completions');
  assert.equal(atCandidate.length, 2, 'the client request and the mirrored copy');
  assert.equal(atCandidate[0]!.body, clientBody, 'the client body, byte for byte');
  assert.equal(atCandidate[0]!.headers['x-logprobe-mirror'], undefined);
  const copies = [atCandidate[1]!, ...baseline.requests.filter((r) => r.path === '/v1/chat/completions')];
  assert.equal(copies.length, 2);
  for (const copy of copies) {
    const b = JSON.parse(copy.body) as Record<string, unknown>;
    assert.equal(b.temperature, 0);
    assert.equal(b.top_p, 1);
    assert.equal(b.stream, false);
    assert.equal(b.stream_options, undefined);
    assert.equal(b.logprobs, true);
    assert.equal(b.top_logprobs, 4);
    assert.equal(b.max_tokens, 16);
    assert.equal(b.presence_penalty, 0);
    assert.equal(b.logit_bias, undefined);
  }
  assert.equal(copies[0]!.body, copies[1]!.body, 'both backends get the same copy');
  assert.equal(
    atCandidate[1]!.headers.authorization,
    'Bearer sk-client-secret',
    "the candidate is the client's own deployment",
  );
  assert.equal(copies[1]!.headers.authorization, 'Bearer sk-baseline-key');
  assert.ok(!JSON.stringify(baseline.requests).includes('sk-client-secret'), 'no client credential at the baseline');
  const m = await metrics(lp.adminUrl);
  assert.equal(metricValue(m, 'logprobe_verdicts_total', { verdict: 'identical' }), 1);
});

test('a full queue drops the mirror and counts it; clients are not slowed', async (t) => {
  const baseline = await startSim({ faults: 'slow:400' });
  const candidate = await startSim();
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1, concurrency: 1, queueSize: 2 },
  });
  t.after(() => lp.close());
  const started = Date.now();
  const results = await Promise.all(Array.from({ length: 12 }, (_, i) => send(lp.proxyUrl, i, { max_tokens: 4 })));
  const elapsed = Date.now() - started;
  assert.ok(results.every((r) => r.status === 200));
  assert.ok(elapsed < 1500, `clients answered in ${elapsed} ms, not behind the slow baseline`);
  await lp.runtime.mirror!.idle();
  const m = await metrics(lp.adminUrl);
  const dropped = metricValue(m, 'logprobe_mirror_total', { outcome: 'dropped' }) ?? 0;
  const ok = metricValue(m, 'logprobe_mirror_total', { outcome: 'ok' }) ?? 0;
  assert.ok(dropped >= 8, `dropped ${dropped}`);
  assert.equal(dropped + ok, 12);
});

for (const [fault, outcome] of [
  ['down', 'baseline_error'],
  ['http500', 'baseline_error'],
  ['garbage', 'unparseable'],
  ['reset', 'baseline_error'],
  ['nologprobs', 'incomparable'],
] as const) {
  test(`a baseline that is ${fault} lands in ${outcome}; clients are unaffected`, async (t) => {
    const candidate = await startSim();
    const baseline = await startSim(fault === 'down' ? {} : { faults: fault });
    const baselineUrl = baseline.url;
    if (fault === 'down') await baseline.close();
    t.after(() => Promise.all([candidate.close(), fault === 'down' ? undefined : baseline.close()]));
    const lp = await startLogprobe({
      candidate: { url: candidate.url },
      baseline: { url: baselineUrl },
      mirror: { sampleRate: 1 },
    });
    t.after(() => lp.close());
    for (let i = 0; i < 4; i++) {
      const direct = await send(candidate.url, i, { temperature: 0 });
      const proxied = await send(lp.proxyUrl, i, { temperature: 0 });
      assert.equal(proxied.status, 200);
      assert.equal(
        proxied.text.replace(/"id":"[^"]*"/g, '').replace(/"created":\d+/g, ''),
        direct.text.replace(/"id":"[^"]*"/g, '').replace(/"created":\d+/g, ''),
      );
    }
    await lp.runtime.mirror!.idle();
    const m = await metrics(lp.adminUrl);
    assert.equal(metricValue(m, 'logprobe_mirror_total', { outcome }), 4);
  });
}

test('a request the candidate refused is skipped; a mirrored copy the candidate fails lands in candidate_error', async (t) => {
  const baseline = await startSim();
  // Answers client requests, fails mirrored copies (they carry logprobs): the mirror's own failure.
  const candidate = await startUpstream((req, res, body) => {
    // Only generations: the scoring's probes of a diverged pair (GET /v1/models, …) get a 404.
    if (req.method !== 'POST' || !req.url!.endsWith('completions')) return res.writeHead(404).end();
    const b = JSON.parse(body.toString()) as Record<string, unknown>;
    if (b.refuse) {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"refused","type":"invalid_request_error","param":null,"code":null}}');
      return;
    }
    res.writeHead(b.logprobs ? 500 : 200, { 'content-type': 'application/json' });
    res.end(
      b.logprobs
        ? '{"error":{"message":"boom","type":"server_error","param":null,"code":null}}'
        : '{"choices":[{"index":0,"text":"x","finish_reason":"stop","logprobs":null}]}',
    );
  });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe(
    { candidate: { url: candidate.url }, baseline: { url: baseline.url }, mirror: { sampleRate: 1 } },
    { level: 'debug' },
  );
  t.after(() => lp.close());
  assert.equal((await send(lp.proxyUrl, 1)).status, 200);
  assert.equal((await send(lp.proxyUrl, 3, { refuse: true })).status, 400);
  await lp.runtime.mirror!.idle();
  const m = await metrics(lp.adminUrl);
  assert.equal(metricValue(m, 'logprobe_mirror_total', { outcome: 'candidate_error' }), 1);
  assert.equal(metricValue(m, 'logprobe_mirror_total', { outcome: 'skipped' }), 1);
  // The skipped copy says why, at debug.
  const skipped = lp.logs.lines.filter((l) => l.msg === 'mirror skipped');
  assert.equal(skipped.length, 1, JSON.stringify(skipped));
  assert.match(String(skipped[0]!.reason), /the candidate answered 400/);
});

test('a graceful stop finishes the mirrored pairs still queued instead of dropping them', async (t) => {
  const baseline = await startSim({ faults: 'slow:150' });
  const candidate = await startSim();
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const pairs: string[] = [];
  const lp = await startLogprobe(
    {
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1, concurrency: 1, queueSize: 10 },
    },
    { listeners: { onPair: (p) => pairs.push(p.outcome) } },
  );
  for (let i = 0; i < 5; i++) assert.equal((await send(lp.proxyUrl, i, { max_tokens: 4 })).status, 200);
  assert.ok(lp.runtime.mirror!.detectorState !== undefined);
  await lp.close();
  assert.deepEqual(pairs, ['ok', 'ok', 'ok', 'ok', 'ok'], 'every queued pair completed before the stop');
  // Drops at the hand-over to the mirror's worker are counted on the proxy's thread.
  const m = await lp.runtime.metrics.registry.metrics();
  assert.equal(metricValue(m, 'logprobe_mirror_total', { outcome: 'dropped' }) ?? 0, 0);
});

test("candidate.model / baseline.model: every mirrored copy and scoring call names the backend's served model; the client path is untouched", async (t) => {
  const { startEngineServer, createSimModel } = await import('@logprobe/engine');
  const engines = await Promise.all([
    startEngineServer({ model: createSimModel({ seed: 11, stateShift: 0.6 }), concurrency: 0, api: 'vllm' }),
    startEngineServer({ model: createSimModel({ seed: 11 }), concurrency: 0, api: 'vllm' }),
  ]);
  // Each backend behind a recorder: the path and the `model` of every request it got.
  const seen: Record<'candidate' | 'baseline', Array<{ path: string; model: unknown; mirrored: boolean }>> = {
    candidate: [],
    baseline: [],
  };
  const front = (side: 'candidate' | 'baseline', target: string) =>
    startUpstream(async (req, res, body) => {
      const json = body.length > 0 ? (JSON.parse(body.toString()) as Record<string, unknown>) : {};
      seen[side].push({ path: req.url!, model: json.model, mirrored: json.logprobs !== undefined });
      const up = await request(target + req.url, {
        method: req.method as 'GET' | 'POST',
        body: body.length > 0 ? body : undefined,
        headers: { 'content-type': 'application/json' },
      });
      res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type'] ?? 'application/json') });
      res.end(Buffer.from(await up.body.arrayBuffer()));
    });
  const [candidate, baseline] = await Promise.all([
    front('candidate', engines[0].url),
    front('baseline', engines[1].url),
  ]);
  t.after(() => Promise.all([candidate.close(), baseline.close(), ...engines.map((e) => e.close())]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url, engine: 'vllm', model: 'cand-served' },
    baseline: { url: baseline.url, engine: 'vllm', model: 'base-served' },
    mirror: { sampleRate: 1 },
  });
  t.after(() => lp.close());
  for (let i = 0; i < 4; i++) assert.equal((await send(lp.proxyUrl, i, { model: 'client-name' })).status, 200);
  await lp.runtime.mirror!.idle();
  const client = seen.candidate.filter((s) => !s.mirrored && /completions$/.test(s.path) && s.model === 'client-name');
  assert.equal(client.length, 4, "the client path carries the client's model, byte for byte");
  const copies = {
    candidate: seen.candidate.filter((s) => s.mirrored),
    baseline: seen.baseline.filter((s) => s.mirrored),
  };
  assert.ok(
    copies.candidate.length >= 4 && copies.candidate.every((s) => s.model === 'cand-served'),
    JSON.stringify(copies.candidate),
  );
  assert.ok(
    copies.baseline.length >= 4 && copies.baseline.every((s) => s.model === 'base-served'),
    JSON.stringify(copies.baseline),
  );
  // The pairs diverged: scoring ran (vLLM profile: /tokenize, prompt_logprobs), also under the served names.
  const scoring = seen.baseline.filter((s) => !s.mirrored && s.model !== undefined);
  assert.ok(scoring.length > 0, JSON.stringify(seen.baseline.map((s) => s.path)));
  assert.ok(
    scoring.every((s) => s.model === 'base-served'),
    JSON.stringify(scoring),
  );
  assert.ok(
    seen.candidate
      .filter(
        (s) =>
          !s.mirrored && s.path !== '/v1/completions' && s.path !== '/v1/chat/completions' && s.model !== undefined,
      )
      .every((s) => s.model === 'cand-served'),
  );
});

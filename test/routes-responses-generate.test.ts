import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { request } from 'undici';
import { createSimModel, startEngineServer, type SimOptions } from '@logprobe/engine';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';
import { captureLines, tempDir } from './helpers/capture.js';
import type { AlertTransition } from '../src/core/detector.js';
import type { MirroredPair } from '../src/pair/types.js';
import type { ConfigInput } from '../src/config/schema.js';

// Every API the clients in front of staging servers speak: OpenAI's Responses API (the Agents
// SDK, newer openai clients) as vLLM serves it, and SGLang's native /generate (the RL rollout
// frameworks): passed through byte for byte, mirrored greedy with logprobs, compared, alerted on.

const ALERT = { window: 20, minRequests: 5, fireFraction: 0.5, forSeconds: 0 };

function engine(api: 'vllm' | 'sglang', o: SimOptions = {}, server: { engineVersion?: string } = {}) {
  return startEngineServer({ model: createSimModel({ seed: 21, id: 'm', ...o }), api, ...server });
}

async function mirror(
  t: { after(fn: () => unknown): void },
  cand: { url: string },
  base: { url: string },
  config: ConfigInput = {},
) {
  const pairs: MirroredPair[] = [];
  const alerts: AlertTransition[] = [];
  const lp = await startLogprobe(
    {
      candidate: { url: cand.url },
      baseline: { url: base.url },
      alert: ALERT,
      ...config,
      mirror: { sampleRate: 1, concurrency: 2, ...config.mirror },
    },
    { listeners: { onPair: (p) => pairs.push(p), onAlert: (a) => alerts.push(a) } },
  );
  t.after(() => lp.close());
  return { lp, pairs, alerts };
}

/** A recording tee in front of an engine: the bytes it answered, response by response. */
async function tee(t: { after(fn: () => unknown): void }, upstream: string) {
  const answers: Buffer[] = [];
  /** Each exchange: the request body it carried and the bytes answered. */
  const exchanges: Array<{ request: string; answer: Buffer }> = [];
  const server = createServer((req, res) => {
    const u = new URL(upstream);
    const sent: Buffer[] = [];
    req.on('data', (c: Buffer) => sent.push(c));
    const out = httpRequest(
      { host: u.hostname, port: u.port, method: req.method, path: req.url, headers: req.headers },
      (up) => {
        const parts: Buffer[] = [];
        res.writeHead(up.statusCode!, up.headers);
        up.on('data', (c: Buffer) => {
          parts.push(c);
          res.write(c);
        });
        up.on('end', () => {
          answers.push(Buffer.concat(parts));
          exchanges.push({ request: Buffer.concat(sent).toString('utf8'), answer: Buffer.concat(parts) });
          res.end();
        });
      },
    );
    req.pipe(out);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, answers, exchanges };
}

test('the openai client’s responses.create through the proxy, JSON and streamed: the engine’s bytes exactly; the copies mirrored with logprobs and store false', async (t) => {
  const cand = await engine('vllm');
  const base = await engine('vllm');
  t.after(() => Promise.all([cand.close(), base.close()]));
  const recorded = await tee(t, cand.url);
  const pairs: MirroredPair[] = [];
  const lp = await startLogprobe(
    { candidate: { url: recorded.url }, baseline: { url: base.url }, mirror: { sampleRate: 1 } },
    { listeners: { onPair: (p) => pairs.push(p) } },
  );
  t.after(() => lp.close());
  // Raw bytes first: what the client reads is what the engine wrote.
  for (const stream of [false, true]) {
    const res = await request(`${lp.proxyUrl}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', input: 'Tell me about caches', max_output_tokens: 12, stream }),
    });
    const got = Buffer.from(await res.body.arrayBuffer());
    assert.equal(res.statusCode, 200);
    assert.ok(got.equals(recorded.answers.at(-1)!), `stream ${stream}: byte for byte`);
    if (stream) assert.match(got.toString(), /^event: response\.created\ndata: /);
  }
  const client = new OpenAI({ baseURL: `${lp.proxyUrl}/v1`, apiKey: 'sk-test', maxRetries: 0 });
  const r = await client.responses.create({ model: 'm', input: 'Say something', max_output_tokens: 10 });
  assert.equal(r.status, 'completed');
  assert.ok(r.output_text.length > 0);
  const events: string[] = [];
  for await (const ev of await client.responses.create({
    model: 'm',
    input: [{ role: 'user', content: 'Say something else' }],
    instructions: 'Be brief.',
    max_output_tokens: 10,
    stream: true,
  }))
    events.push(ev.type);
  assert.equal(events[0], 'response.created');
  assert.equal(events.at(-1), 'response.completed');
  await lp.runtime.mirror!.idle();
  assert.equal(pairs.length, 4);
  for (const p of pairs) {
    assert.equal(p.route, '/v1/responses');
    assert.equal(p.outcome, 'ok', JSON.stringify(p.analysis?.explanation));
    assert.equal(p.request.store, false);
    assert.equal(p.request.stream, false);
    assert.deepEqual(p.request.include, ['message.output_text.logprobs']);
    assert.equal(p.analysis!.verdict, 'identical');
    assert.ok(p.analysis!.comparable > 0);
  }
});

const SHIFTS = new Set(['global_shift', 'early_shift', 'local_shift']);

test('Responses traffic with a corrupted state on the candidate: the same verdicts and figures as the same requests sent as chat, ≥ 90% shifted, LogprobGlobalShift fires; clean twins: none', async (t) => {
  for (const shifted of [true, false]) {
    const runs: Record<string, { verdicts: unknown[]; shifts: unknown[]; fired: number; alerts: number }> = {};
    for (const api of ['responses', 'chat'] as const) {
      const cand = await engine('vllm', shifted ? { stateShift: 0.6 } : {});
      const base = await engine('vllm');
      t.after(() => Promise.all([cand.close(), base.close()]));
      const r = await mirror(t, cand, base, { mirror: { concurrency: 1 } });
      const client = new OpenAI({ baseURL: `${r.lp.proxyUrl}/v1`, apiKey: 'sk-test', maxRetries: 0 });
      for (let i = 0; i < 20; i++) {
        const q = `Question ${i}: what is a KV cache?`;
        if (api === 'responses') await client.responses.create({ model: 'm', input: q, max_output_tokens: 16 });
        else
          await client.chat.completions.create({
            model: 'm',
            messages: [{ role: 'user', content: q }],
            max_tokens: 16,
          });
        await r.lp.runtime.mirror!.idle();
      }
      runs[api] = {
        verdicts: r.pairs.map((p) => p.analysis?.verdict),
        shifts: r.pairs.map((p) => p.analysis?.maxShift?.toFixed(6)),
        fired: r.alerts.filter((a) => a.alert === 'LogprobGlobalShift' && a.to === 'firing').length,
        alerts: r.alerts.length,
      };
      await r.lp.close();
    }
    assert.deepEqual(runs.responses, runs.chat, 'the same pairs, verdicts, shifts and alerts as chat');
    const verdicts = runs.responses!.verdicts;
    if (shifted) {
      assert.ok(verdicts.filter((v) => SHIFTS.has(v as string)).length >= 18, JSON.stringify(verdicts));
      assert.equal(runs.responses!.fired, 1);
    } else {
      assert.ok(
        verdicts.every((v) => v === 'identical'),
        JSON.stringify(verdicts),
      );
      assert.equal(runs.responses!.alerts, 0);
    }
  }
});

test('a Responses request continuing a stored response is passed through and never mirrored (counted skipped)', async (t) => {
  const cand = await startEngineServer({
    model: createSimModel({ seed: 21, id: 'm' }),
    api: 'vllm',
    responsesStore: true,
  });
  const base = await engine('vllm');
  t.after(() => Promise.all([cand.close(), base.close()]));
  const r = await mirror(t, cand, base);
  const client = new OpenAI({ baseURL: `${r.lp.proxyUrl}/v1`, apiKey: 'sk-test', maxRetries: 0 });
  const first = await client.responses.create({ model: 'm', input: 'Hello', max_output_tokens: 6, store: true });
  const second = await client.responses.create({
    model: 'm',
    input: 'And then?',
    max_output_tokens: 6,
    previous_response_id: first.id,
  });
  assert.equal(second.status, 'completed');
  await r.lp.runtime.mirror!.idle();
  assert.equal(r.pairs.length, 1, 'the first only');
  const m = await (await request(`${r.lp.adminUrl}/metrics`)).body.text();
  assert.equal(metricValue(m, 'logprobe_mirror_total', { route: '/v1/responses', outcome: 'skipped' }), 1);
  assert.equal(metricValue(m, 'logprobe_mirror_skipped_total', { reason: 'stored_state' }), 1, 'with its reason');
  assert.equal(metricValue(m, 'logprobe_mirror_skipped_total', { reason: 'not_json' }), 0);
});

test('an engine whose Responses route returns no logprobs (vLLM before 0.10.2): the copy goes as chat completions, and the capture says so', async (t) => {
  const cand = await engine('vllm', { stateShift: 0.6 }, { engineVersion: '0.10.1' });
  const base = await engine('vllm', {}, { engineVersion: '0.10.1' });
  t.after(() => Promise.all([cand.close(), base.close()]));
  const dir = tempDir(t);
  const r = await mirror(t, cand, base, { capture: { enabled: true, dir } });
  const client = new OpenAI({ baseURL: `${r.lp.proxyUrl}/v1`, apiKey: 'sk-test', maxRetries: 0 });
  for (let i = 0; i < 8; i++)
    await client.responses.create({
      model: 'm',
      instructions: 'Answer.',
      input: `Question ${i} about caches`,
      max_output_tokens: 12,
    });
  await r.lp.runtime.mirror!.idle();
  assert.equal(r.pairs.length, 8);
  for (const p of r.pairs) {
    assert.deepEqual(p.translated, { from: '/v1/responses', to: '/v1/chat/completions' });
    assert.equal(p.route, '/v1/responses', 'counted under the client’s route');
    assert.deepEqual((p.request.messages as unknown[]).length, 2);
  }
  assert.ok(r.pairs.filter((p) => p.analysis?.verdict === 'global_shift').length >= 7);
  await r.lp.close();
  const recs = captureLines(dir).map((l) => JSON.parse(l) as { translated?: unknown });
  assert.ok(
    recs.length === 8 &&
      recs.every(
        (x) => JSON.stringify(x.translated) === JSON.stringify({ from: '/v1/responses', to: '/v1/chat/completions' }),
      ),
  );
});

test('SGLang /generate clients (text and input_ids, as slime and verl send them): bytes unchanged, mirrored with logprobs, a shift caught, clean twins quiet', async (t) => {
  for (const shifted of [true, false]) {
    const cand = await engine('sglang', shifted ? { stateShift: 0.6 } : {});
    const base = await engine('sglang');
    t.after(() => Promise.all([cand.close(), base.close()]));
    const recorded = await tee(t, cand.url);
    const r = await mirror(t, recorded, base);
    for (let i = 0; i < 20; i++) {
      const body =
        i % 2 === 0
          ? { text: `Rollout ${i}: the policy says`, sampling_params: { temperature: 1, max_new_tokens: 16 } }
          : {
              input_ids: [5, 17, 42, 8 + i, 99],
              sampling_params: { temperature: 0.7, max_new_tokens: 16 },
              return_logprob: true,
            };
      const payload = JSON.stringify(body);
      const res = await request(`${r.lp.proxyUrl}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: payload,
      });
      assert.equal(res.statusCode, 200);
      const got = Buffer.from(await res.body.arrayBuffer());
      // The client's own request reached the candidate unchanged, and its answer came back byte for byte.
      const own = recorded.exchanges.filter((e) => e.request === payload);
      assert.equal(own.length, 1, 'the client request reached the candidate as sent');
      assert.ok(got.equals(own[0]!.answer), `request ${i}: byte for byte`);
      assert.equal(typeof (JSON.parse(got.toString('utf8')) as { text: unknown }).text, 'string');
    }
    await r.lp.runtime.mirror!.idle();
    assert.equal(r.pairs.length, 20);
    assert.ok(r.pairs.every((p) => p.route === '/generate' && p.request.return_logprob === true));
    const verdicts = r.pairs.map((p) => p.analysis?.verdict);
    if (shifted) {
      assert.ok(verdicts.filter((v) => SHIFTS.has(v as string)).length >= 18, JSON.stringify(verdicts));
      assert.ok(r.alerts.some((a) => a.alert === 'LogprobGlobalShift' && a.to === 'firing'));
    } else {
      assert.ok(
        verdicts.every((v) => v === 'identical'),
        JSON.stringify(verdicts),
      );
      assert.deepEqual(r.alerts, []);
    }
    await r.lp.close();
  }
});

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { request } from 'undici';
import type { EngineServerHandle } from '@logprobe/engine';
import type { ConfigInput } from '../src/config/schema.js';
import { MIRROR_OUTCOMES } from '../src/metrics/catalog.js';
import { startLogprobe, type StartedLogprobe } from './helpers/logprobe.js';
import { metricValue, startSim } from './helpers/sim.js';
import {
  deadUrl,
  errorBody,
  forward,
  relay,
  startFaultServer,
  type FaultReply,
  type FaultRequest,
  type FaultServer,
} from './helpers/fault-server.js';

/**
 * The fault matrix (issue #9): the mirrored copy meets a backend that is down, refuses, is slow,
 * fails, or answers something broken. In every case the client gets the candidate's own bytes,
 * the pair lands in one counted outcome of `logprobe_mirror_total`, and the proxy keeps serving.
 */

type Outcome = (typeof MIRROR_OUTCOMES)[number];
type Kind = 'chat' | 'completions';
const PATH: Record<Kind, string> = { chat: '/v1/chat/completions', completions: '/v1/completions' };

let candSim: EngineServerHandle;
let baseSim: EngineServerHandle;

before(async () => {
  // The same seeded model on both sides: a healthy pair compares as identical.
  [candSim, baseSim] = await Promise.all([startSim(), startSim()]);
});
after(() => Promise.all([candSim.close(), baseSim.close()]));

function clientBody(kind: Kind, n: number): Record<string, unknown> {
  return kind === 'chat'
    ? {
        model: 'sim',
        messages: [{ role: 'user', content: `fault case ${n}: tell me about rivers` }],
        max_tokens: 12,
        temperature: 0,
      }
    : { model: 'sim', prompt: `Fault case ${n}: the longest river is`, max_tokens: 12, temperature: 0 };
}

interface ClientAnswer {
  status: number;
  contentType: string;
  text: string;
}

/** One client request with undici. */
async function sendRaw(base: string, kind: Kind, n: number): Promise<ClientAnswer> {
  const res = await request(`${base}${PATH[kind]}`, {
    method: 'POST',
    body: JSON.stringify(clientBody(kind, n)),
    headers: { 'content-type': 'application/json' },
  });
  return { status: res.statusCode, contentType: String(res.headers['content-type']), text: await res.body.text() };
}

/** One client request with the official openai client, read as the raw HTTP response. */
async function sendOpenAI(base: string, kind: Kind, n: number): Promise<ClientAnswer> {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sk-test', maxRetries: 0, timeout: 10_000 });
  const body = clientBody(kind, n);
  const res =
    kind === 'chat'
      ? await client.chat.completions
          .create(body as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
          .asResponse()
      : await client.completions.create(body as unknown as OpenAI.CompletionCreateParamsNonStreaming).asResponse();
  return { status: res.status, contentType: res.headers.get('content-type') ?? '', text: await res.text() };
}

async function scrape(lp: StartedLogprobe): Promise<string> {
  const res = await request(`${lp.adminUrl}/metrics`);
  return res.body.text();
}

/** The one outcome counted for `route`, asserting that exactly one pair was counted. */
function countedOutcome(metrics: string, route: string): Outcome {
  const counted = MIRROR_OUTCOMES.filter(
    (o) => (metricValue(metrics, 'logprobe_mirror_total', { route, outcome: o }) ?? 0) > 0,
  );
  assert.equal(counted.length, 1, `one outcome counted, got ${counted.join(', ') || 'none'}`);
  assert.equal(metricValue(metrics, 'logprobe_mirror_total', { route, outcome: counted[0]! }), 1);
  return counted[0]!;
}

interface FaultCase {
  name: string;
  /** Which backend's mirrored copy misbehaves. */
  side: 'baseline' | 'candidate';
  kind: Kind;
  outcome: Outcome;
  client?: 'openai' | 'undici';
  /** The misbehaving answer to a mirrored copy; `healthy` is the sim that would have answered it. */
  reply?: (req: FaultRequest, healthy: string) => FaultReply | Promise<FaultReply>;
  /** A baseline where nothing listens. */
  down?: boolean;
  /** The baseline drops connections at accept. */
  refuse?: 'close' | 'reset';
  config?: ConfigInput;
  /** More assertions once the follow-up request's pair is done too. */
  check?: (ctx: { n: number; lp: StartedLogprobe; fault: FaultServer | undefined }) => void | Promise<void>;
}

/** A sim answer to the same mirrored copy, altered textually (for values JSON cannot hold). */
const alteredRelay = (transform: (text: string) => string) => async (req: FaultRequest, healthy: string) =>
  relay(await forward(healthy, req), transform);

/** Replaces the first chosen-token logprob with `literal` (raw JSON text: NaN, -Infinity, …). */
const firstLogprob = (literal: string) => (text: string) => {
  const out = text.replace(/"logprob":-?[\d.eE+-]+/, `"logprob":${literal}`);
  assert.notEqual(out, text, 'the answer had a logprob to alter');
  return out;
};
const firstTokenLogprob = (literal: string) => (text: string) => {
  const out = text.replace(/"token_logprobs":\[-?[\d.eE+-]+/, `"token_logprobs":[${literal}`);
  assert.notEqual(out, text, 'the answer had a token logprob to alter');
  return out;
};

/** The sim's streamed answer to the copy (the mirror asked for JSON), cut before its last event and `[DONE]`. */
const sseWithoutDone = async (req: FaultRequest, healthy: string): Promise<FaultReply> => {
  const f = await forward(healthy, req, JSON.stringify({ ...req.json, stream: true }));
  assert.match(f.contentType, /text\/event-stream/);
  const events = f.text.split('\n\n').filter((e) => e.trim() !== '' && !e.includes('[DONE]'));
  return {
    type: 'respond',
    headers: { 'content-type': 'text/event-stream' },
    body: `${events.slice(0, -1).join('\n\n')}\n\n`,
  };
};

/** A backend with a logprobs cap: copies over it get a 400 with `message(k)`, the rest the sim's answer. */
const capped =
  (field: 'top_logprobs' | 'logprobs', cap: number, message: (k: number) => string) =>
  async (req: FaultRequest, healthy: string): Promise<FaultReply> => {
    const k = req.json?.[field];
    if (typeof k === 'number' && k > cap) return { type: 'respond', status: 400, body: message(k) };
    return relay(await forward(healthy, req));
  };

/** What each mirrored copy asked for, in arrival order. */
function copiesAsked(seen: ReadonlyArray<{ body: string }>, field: string): unknown[] {
  return seen
    .map((r) => JSON.parse(r.body) as Record<string, unknown>)
    .filter((b) => b.repetition_penalty === 1)
    .map((b) => b[field]);
}

/** The mirrored copies a shared sim got for case `n` (its request and the follow-up). */
function simCopies(sim: EngineServerHandle, n: number): Array<{ body: string }> {
  return sim.requests.filter((r) => r.body.includes(`ault case ${n}:`) || r.body.includes(`ault case ${n + 1000}:`));
}

function assertLearnedOnce(lp: StartedLogprobe, backend: string, limit: number): void {
  const lines = lp.logs.lines.filter((l) => l.limit !== undefined);
  assert.equal(lines.length, 1, 'one log line when the cap is learned');
  assert.equal(lines[0]!.level, 'info');
  assert.equal(lines[0]!.backend, backend);
  assert.equal(lines[0]!.limit, limit);
  assert.match(String(lines[0]!.msg), new RegExp(`${backend} caps .* at ${limit}`));
}

const INVALID_JSON =
  '{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},';

const CASES: FaultCase[] = [
  // The baseline misbehaves; the candidate is the sim, on the client path and for its copy.
  {
    name: 'baseline down (connection refused)',
    side: 'baseline',
    kind: 'chat',
    client: 'openai',
    down: true,
    outcome: 'baseline_error',
  },
  {
    name: 'baseline accepts then closes at once',
    side: 'baseline',
    kind: 'completions',
    refuse: 'close',
    outcome: 'baseline_error',
  },
  {
    name: 'baseline accepts then resets at once',
    side: 'baseline',
    kind: 'chat',
    refuse: 'reset',
    outcome: 'baseline_error',
  },
  {
    name: 'baseline slower than baseline.timeoutMs',
    side: 'baseline',
    kind: 'chat',
    client: 'openai',
    reply: () => ({ type: 'hang' }),
    config: { baseline: { timeoutMs: 300 } },
    outcome: 'baseline_error',
  },
  {
    name: 'baseline answers 500',
    side: 'baseline',
    kind: 'completions',
    reply: () => ({ type: 'respond', status: 500, body: errorBody('engine crashed', 'InternalServerError', 500) }),
    outcome: 'baseline_error',
  },
  {
    name: 'baseline answers invalid JSON',
    side: 'baseline',
    kind: 'chat',
    reply: () => ({ type: 'respond', body: INVALID_JSON }),
    outcome: 'unparseable',
  },
  {
    name: 'baseline answers valid JSON without logprobs',
    side: 'baseline',
    kind: 'chat',
    reply: alteredRelay((t) =>
      JSON.stringify({ ...JSON.parse(t), choices: [{ ...JSON.parse(t).choices[0], logprobs: null }] }),
    ),
    outcome: 'incomparable',
  },
  {
    name: 'baseline truncates its body (content-length larger, then close)',
    side: 'baseline',
    kind: 'completions',
    reply: async (req, h) => ({ type: 'truncate', body: (await forward(h, req)).text.slice(0, 40), missing: 500 }),
    outcome: 'baseline_error',
  },
  {
    name: 'baseline resets mid-body',
    side: 'baseline',
    kind: 'chat',
    client: 'openai',
    reply: async (req, h) => ({ type: 'resetMidBody', body: (await forward(h, req)).text, bytes: 60 }),
    outcome: 'baseline_error',
  },
  // The copy asks for JSON (stream: false); a stream is still read, and one cut short compares its common prefix.
  {
    name: 'baseline answers an SSE stream that stops without [DONE]',
    side: 'baseline',
    kind: 'chat',
    reply: sseWithoutDone,
    outcome: 'ok',
  },
  {
    name: 'baseline logprob is a bare NaN',
    side: 'baseline',
    kind: 'chat',
    reply: alteredRelay(firstLogprob('NaN')),
    outcome: 'ok',
  },
  {
    name: 'baseline logprob is a bare -Infinity',
    side: 'baseline',
    kind: 'completions',
    reply: alteredRelay(firstTokenLogprob('-Infinity')),
    outcome: 'ok',
  },
  {
    name: 'baseline logprob is the -9999 sentinel',
    side: 'baseline',
    kind: 'chat',
    reply: alteredRelay(firstLogprob('-9999.0')),
    outcome: 'ok',
  },
  {
    name: 'baseline repeats the "logprob" key',
    side: 'baseline',
    kind: 'chat',
    reply: alteredRelay((t) => t.replace(/"logprob":(-?[\d.eE+-]+)/, '"logprob":$1,"logprob":$1')),
    outcome: 'ok',
  },
  {
    name: 'baseline repeats a key in a completions top dict',
    side: 'baseline',
    kind: 'completions',
    reply: alteredRelay((t) =>
      t.replace(/"top_logprobs":\[\{("[^"]*"):(-?[\d.eE+-]+)/, '"top_logprobs":[{$1:$2,$1:-20'),
    ),
    outcome: 'ok',
  },
  {
    name: 'baseline refuses with an unrelated 400 (no retry)',
    side: 'baseline',
    kind: 'chat',
    reply: () => ({ type: 'respond', status: 400, body: errorBody("'messages' is too long") }),
    outcome: 'baseline_error',
  },

  // A backend capping logprobs below mirror.topLogprobs (5): one retry within the cap, then every copy within it.
  {
    name: 'baseline caps logprobs at 2 (vLLM text): retried once within the cap, later copies within it from the start',
    side: 'baseline',
    kind: 'chat',
    client: 'openai',
    reply: capped('top_logprobs', 2, (k) =>
      errorBody(
        `Requested sample logprobs of ${k}, which is greater than max allowed: 2 (parameter=logprobs, value=${k})`,
      ),
    ),
    outcome: 'ok',
    check: async ({ n, lp, fault }) => {
      assert.deepEqual(
        copiesAsked(fault!.seen, 'top_logprobs'),
        [5, 2, 2],
        'the refused copy, its one retry, then the next copy within the cap',
      );
      assert.deepEqual(
        copiesAsked(simCopies(candSim, n), 'top_logprobs'),
        [5, 2, 2],
        'the candidate is compared over the same top-k',
      );
      assert.equal(
        metricValue(await scrape(lp), 'logprobe_verdicts_total', { verdict: 'identical' }),
        2,
        'same model, same top-k: identical',
      );
      assertLearnedOnce(lp, 'baseline', 2);
    },
  },
  {
    name: 'candidate copy caps logprobs at 3 (older vLLM text, completions)',
    side: 'candidate',
    kind: 'completions',
    reply: capped('logprobs', 3, (k) => errorBody(`Requested sample logprobs of ${k}, which is greater than max of 3`)),
    outcome: 'ok',
    check: async ({ n, lp, fault }) => {
      assert.deepEqual(copiesAsked(fault!.seen, 'logprobs'), [5, 3, 3]);
      assert.deepEqual(copiesAsked(simCopies(baseSim, n), 'logprobs'), [5, 3, 3]);
      assert.equal(metricValue(await scrape(lp), 'logprobe_verdicts_total', { verdict: 'identical' }), 2);
      assertLearnedOnce(lp, 'candidate', 3);
    },
  },
  {
    name: 'baseline caps top_logprobs at 4 (OpenAI text)',
    side: 'baseline',
    kind: 'chat',
    reply: capped('top_logprobs', 4, (k) =>
      errorBody(
        `Invalid 'top_logprobs': integer above maximum value. Expected a value <= 4, but got ${k} instead.`,
        'invalid_request_error',
        null,
      ),
    ),
    outcome: 'ok',
    check: ({ fault }) => assert.deepEqual(copiesAsked(fault!.seen, 'top_logprobs'), [5, 4, 4]),
  },
  {
    name: 'baseline still refuses the lowered copy: retried once only',
    side: 'baseline',
    kind: 'chat',
    reply: (req) => ({
      type: 'respond',
      status: 400,
      body: errorBody(
        `Requested sample logprobs of ${String(req.json?.top_logprobs)}, which is greater than max allowed: 1`,
      ),
    }),
    outcome: 'baseline_error',
    check: ({ fault }) =>
      assert.deepEqual(
        copiesAsked(fault!.seen, 'top_logprobs'),
        [5, 1, 1],
        'one retry for the first copy, none for the next (sent within the cap)',
      ),
  },

  // The candidate's mirrored copy misbehaves; its client requests are answered by the sim.
  {
    name: 'candidate copy answers 500',
    side: 'candidate',
    kind: 'chat',
    client: 'openai',
    reply: () => ({ type: 'respond', status: 500, body: errorBody('boom', 'InternalServerError', 500) }),
    outcome: 'candidate_error',
  },
  {
    name: 'candidate copy closes the connection',
    side: 'candidate',
    kind: 'completions',
    reply: () => ({ type: 'close' }),
    outcome: 'candidate_error',
  },
  {
    name: 'candidate copy slower than candidate.timeoutMs',
    side: 'candidate',
    kind: 'chat',
    reply: () => ({ type: 'hang' }),
    config: { candidate: { timeoutMs: 400 } },
    outcome: 'candidate_error',
  },
  {
    name: 'candidate copy answers invalid JSON',
    side: 'candidate',
    kind: 'completions',
    reply: () => ({ type: 'respond', body: '{"choices":[{"text":' }),
    outcome: 'unparseable',
  },
  {
    name: 'candidate copy answers without logprobs',
    side: 'candidate',
    kind: 'completions',
    reply: alteredRelay((t) =>
      JSON.stringify({ ...JSON.parse(t), choices: [{ ...JSON.parse(t).choices[0], logprobs: null }] }),
    ),
    outcome: 'incomparable',
  },
  {
    name: 'candidate copy truncated',
    side: 'candidate',
    kind: 'chat',
    reply: async (req, h) => ({ type: 'truncate', body: (await forward(h, req)).text.slice(0, 80), missing: 200 }),
    outcome: 'candidate_error',
  },
  {
    name: 'candidate copy reset mid-body',
    side: 'candidate',
    kind: 'completions',
    client: 'openai',
    reply: async (req, h) => ({ type: 'resetMidBody', body: (await forward(h, req)).text, bytes: 30 }),
    outcome: 'candidate_error',
  },
  {
    name: 'candidate copy answers an SSE stream without [DONE]',
    side: 'candidate',
    kind: 'chat',
    reply: sseWithoutDone,
    outcome: 'ok',
  },
  {
    name: 'candidate copy logprob is a bare NaN',
    side: 'candidate',
    kind: 'completions',
    reply: alteredRelay(firstTokenLogprob('NaN')),
    outcome: 'ok',
  },
];

/**
 * The candidate seen by clients: a fixed server replaying, byte for byte, what the sim answered the
 * first time to the same request (so a direct and a proxied request get the very same bytes, ids
 * and timestamps included). Mirrored copies get `copy`.
 */
function fixedCandidate(copy: (req: FaultRequest) => FaultReply | Promise<FaultReply>): Promise<FaultServer> {
  const answers = new Map<string, Promise<FaultReply>>();
  return startFaultServer((req) => {
    if (req.mirrored) return copy(req);
    const key = `${req.path} ${req.body}`;
    let answer = answers.get(key);
    if (!answer) {
      answer = forward(candSim.url, req).then((f) => relay(f));
      answers.set(key, answer);
    }
    return answer;
  });
}

async function runCase(c: FaultCase): Promise<void> {
  const n = CASES.indexOf(c);
  const reply = (req: FaultRequest, healthy: string) =>
    c.reply ? c.reply(req, healthy) : forward(healthy, req).then((f) => relay(f));
  const candidate = await fixedCandidate((req) =>
    c.side === 'candidate' ? reply(req, candSim.url) : forward(candSim.url, req).then((f) => relay(f)),
  );
  let baseline: FaultServer | undefined;
  if (c.side === 'baseline' && !c.down) {
    baseline = await startFaultServer((req) => reply(req, baseSim.url));
    if (c.refuse) baseline.refuse(c.refuse);
  }
  const baselineUrl = c.side === 'baseline' ? (baseline ? baseline.url : await deadUrl()) : baseSim.url;
  /** The server whose mirrored copies misbehave. */
  const fault = c.side === 'candidate' ? candidate : baseline;
  const lp = await startLogprobe({
    ...c.config,
    candidate: { url: candidate.url, ...c.config?.candidate },
    baseline: { url: baselineUrl, ...(c.config?.baseline ?? {}) },
    mirror: { sampleRate: 1, ...c.config?.mirror },
    // The fault servers answer copies only: the path check's engine detection and prefill are not theirs to serve.
    path: { rate: 0 },
  });
  try {
    const send = c.client === 'openai' ? sendOpenAI : sendRaw;
    // (a) The client's bytes are the candidate's: the same request sent directly and through the proxy.
    const direct = await send(candidate.url, c.kind, n);
    const proxied = await send(lp.proxyUrl, c.kind, n);
    assert.equal(direct.status, 200);
    assert.equal(proxied.status, direct.status);
    assert.equal(proxied.contentType, direct.contentType);
    assert.equal(proxied.text, direct.text);

    // (b) The pair lands in exactly one counted outcome.
    await lp.runtime.mirror!.idle();
    assert.equal(countedOutcome(await scrape(lp), PATH[c.kind]), c.outcome);

    // (c) The proxy keeps serving.
    const next = await sendRaw(lp.proxyUrl, c.kind, n + 1000);
    assert.equal(next.status, 200);
    assert.ok((JSON.parse(next.text) as { choices: unknown[] }).choices.length > 0);
    const health = await request(`${lp.adminUrl}/healthz`);
    assert.equal(health.statusCode, 200);
    await health.body.text();
    await lp.runtime.mirror!.idle();
    await c.check?.({ n, lp, fault });
  } finally {
    await lp.close();
    await Promise.all([candidate.close(), baseline?.close()]);
  }
}

describe('fault matrix: client bytes unchanged, one counted outcome, proxy still serving', () => {
  for (const c of CASES) test(`${c.name} → ${c.outcome}`, () => runCase(c));
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { IncomingHttpHeaders } from 'node:http';
import fc from 'fast-check';
import OpenAI from 'openai';
import { request } from 'undici';
import { startEngineServer, createSimModel } from '@logprobe/engine';
import { buildRecord, recordLine, type RecordOptions } from '../src/capture/record.js';
import { CREDENTIAL_HEADERS, MIN_SECRET_LENGTH, Redaction } from '../src/log/redact.js';
import { compare, DEFAULT_THRESHOLDS } from '../src/core/index.js';
import { notScored } from '../src/core/scored.js';
import { createLogger, scrubFields } from '../src/log/logger.js';
import { buildGoldenRecord } from '../src/replay/golden.js';
import { allText, makePair, tempDir } from './helpers/capture.js';
import { LogSink, startLogprobe } from './helpers/logprobe.js';
import { runCli } from './helpers/cli.js';
import { startUpstream } from './helpers/upstream.js';

// One redaction rule (src/log/redact.ts) for captures, golden files and logs: every credential
// header the docs name, every `log.redact` name and `baseline.apiKey`, planted with random values
// and quoted back by upstreams that echo the request's headers (in 200 answers and in 4xx error
// bodies, of the mirrored copies, the repeat probes and the scoring calls), is found in no file and
// no log line.

const THRESHOLDS = { gapAmbiguous: 0.3, gapSystematic: 0.4, globalFraction: 0.8, minAligned: 3 };
/** A `log.redact` name, spelled as a user might (the rule compares names case-insensitively). */
const CUSTOM = 'X-Custom-Token';
/** Every kind planted: the credential headers, the custom one, and the configured key. */
const HEADER_KINDS = [
  // The credentials docs/operations.md names, written out here: the test must not follow the code's list.
  'authorization',
  'proxy-authorization',
  'cookie',
  'set-cookie',
  'x-api-key',
  'api-key',
  'x-goog-api-key',
  'openai-organization',
  'openai-project',
  CUSTOM.toLowerCase(),
];

/**
 * A planted value: a marker no ordinary output holds (`Zq`, the kind's letter), random characters
 * that HTTP allows in a header value and JSON must escape (`"`, `\`), and a last letter so that the
 * value is what a header carries (no space trimmed away). 8 characters at least.
 */
const valueArb = (letter: string) =>
  fc
    .string({
      unit: fc.constantFrom(...'abcXYZ0189-_.~+/="\\<>&%\' '.split('')),
      minLength: MIN_SECRET_LENGTH - 4,
      maxLength: 24,
    })
    .map((s) => `Zq${letter}${s}Q`);

/** One value per kind, all different, plus the baseline's key. */
const plantedArb = fc.record({
  ...Object.fromEntries(HEADER_KINDS.map((k, i) => [k, valueArb(String.fromCharCode(65 + i))])),
  key: valueArb('k'),
}) as fc.Arbitrary<Record<string, string> & { key: string; authorization: string }>;

/** The request headers that carry the planted values, as a client sends them. */
function plantedHeaders(v: Record<string, string>): Record<string, string> {
  const h: Record<string, string> = {};
  for (const k of HEADER_KINDS) {
    if (k === 'authorization') h[k] = `Bearer ${v[k]}`;
    else if (k === 'proxy-authorization') h[k] = `Basic ${v[k]}`;
    else if (k === 'cookie') h[k] = `theme=dark; sid=${v[k]}`;
    else if (k === 'set-cookie') h[k] = `sid=${v[k]}; Path=/; HttpOnly`;
    else h[k] = v[k]!;
  }
  return h;
}

/**
 * What an echoing upstream says about the headers it got: as a JSON object and as free text, the
 * credentials first (an error message cut to one line then cuts through them).
 */
function echoOf(headers: IncomingHttpHeaders | Record<string, string>): {
  headers: Record<string, unknown>;
  text: string;
} {
  const entries = Object.entries(headers).sort(
    ([a], [b]) => Number(!HEADER_KINDS.includes(a)) - Number(!HEADER_KINDS.includes(b)),
  );
  return { headers: { ...headers }, text: entries.map(([k, v]) => `${k}: ${String(v)}`).join('\n') };
}

/**
 * The planted values found in `text`, whole or in part: a value's marker (`Zq` and its letter)
 * appears nowhere else, so finding it means that some of the value survived (a message cut in
 * the middle of a secret leaks its first half).
 */
function leaks(text: string, values: readonly string[]): string[] {
  return values.filter((v) => text.includes(v.slice(0, 3)));
}

test('property: a record, a golden record and a log line hold none of the planted credentials, whatever echoes them and wherever', () => {
  fc.assert(
    fc.property(plantedArb, fc.boolean(), fc.boolean(), (v, candidate4xx, baseline4xx) => {
      const headers = {
        ...plantedHeaders(v),
        'user-agent': 'prop/1',
        'content-type': 'application/json',
        'x-request-id': 'prop-1',
      };
      const values = Object.values(v);
      const echo = echoOf(headers);
      const baselineEcho = echoOf({ authorization: `Bearer ${v.key}`, 'content-type': 'application/json' });
      const pair = makePair(1, { headers });
      const answer = (e: typeof echo, status: number) =>
        status >= 400
          ? {
              status,
              latencyMs: 3,
              body: { error: { message: `rejected ${e.text}`, type: 'invalid_request_error', headers: e.headers } },
              serverHeaders: {},
              error: null,
            }
          : { ...pair.candidate, body: { ...(pair.candidate.body as object), echo: e } };
      pair.candidate = answer(echo, candidate4xx ? 401 : 200);
      pair.baseline = answer(baselineEcho, baseline4xx ? 403 : 200);
      pair.candidate.serverHeaders = {
        server: 'echo/1',
        'openai-organization': v['openai-organization']!,
        'x-engine-version': `1 ${v.key}`,
      };
      pair.outcome = candidate4xx ? 'candidate_error' : baseline4xx ? 'baseline_error' : 'ok';
      pair.analysis =
        pair.outcome === 'ok'
          ? {
              ...compare(pair.candidate.body, pair.baseline.body, DEFAULT_THRESHOLDS),
              scored: notScored('failed', `/tokenize answered 400: ${echo.text}`),
            }
          : null;
      pair.repeats = [
        {
          backend: 'candidate',
          flushed: false,
          flushError: `POST /reset_prefix_cache answered 401: ${echo.text}`,
          second: { ...answer(echo, 400), error: `ECONNRESET: ${echo.text}` },
          cached: { first: null, second: null },
          counts: { first: null, second: null },
          confirmedFlush: false,
          probe: 'unprobed',
          sides: { first: { by: 'generation', readCache: null }, second: { by: 'generation', readCache: null } },
          analysis: null,
          verdict: null,
        },
      ];
      const options: RecordOptions = {
        includePrompts: true,
        thresholds: THRESHOLDS,
        secrets: [v.key],
        redactFields: [CUSTOM],
      };

      const line = recordLine(pair, options);
      assert.deepEqual(leaks(line, values), [], 'the capture line');
      assert.equal(
        line,
        JSON.stringify(buildRecord(pair, options)),
        "the writer's fast path gives the full scrub's line",
      );
      const record = JSON.parse(line) as {
        clientHeaders: Record<string, string>;
        candidate: { body: { echo?: { headers: Record<string, string> } }; serverHeaders: Record<string, string> };
      };
      assert.deepEqual(
        Object.keys(record.clientHeaders).sort(),
        ['content-type', 'user-agent', 'x-request-id'],
        'no credential header is kept',
      );
      assert.equal(
        record.candidate.serverHeaders['openai-organization'],
        undefined,
        'a credential response header is removed by name',
      );
      if (!candidate4xx) {
        // By name in the body too, whatever the value's length; the logprobs are untouched.
        for (const k of HEADER_KINDS) assert.equal(record.candidate.body.echo!.headers[k], '[redacted]', k);
        assert.equal(
          compare(
            record.candidate.body,
            (JSON.parse(line) as { baseline: { body: unknown } }).baseline.body,
            DEFAULT_THRESHOLDS,
          ).verdict,
          compare(pair.candidate.body, pair.baseline.body, DEFAULT_THRESHOLDS).verdict,
        );
      }

      // `logprobe record`: the backend got only its key; its answer and its scoring's reason quote it.
      const golden = buildGoldenRecord(
        {
          id: 'g:1',
          ts: pair.ts,
          route: pair.route,
          path: pair.path,
          request: pair.request,
          clientHeaders: {},
          baseline: answer(baselineEcho, baseline4xx ? 401 : 200),
          outcome: 'ok',
          noiseFloor: 0,
        },
        'sha256:00',
        { outcome: 'failed', reason: `/tokenize answered 400: ${baselineEcho.text}` },
        { includePrompts: true, thresholds: THRESHOLDS, secrets: [v.key], redactFields: [CUSTOM] },
      );
      assert.deepEqual(leaks(JSON.stringify(golden), [v.key]), [], 'the golden record');

      // The logger: names by its pino paths, the configured key in every line, a request's values where the mirror logs about it.
      const sink = new LogSink();
      const logger = createLogger({ level: 'debug', redact: [CUSTOM], keys: [v.key], destination: sink });
      const rule = new Redaction({ fields: [CUSTOM], keys: [v.key] });
      logger.info({ headers, req: { headers } }, 'request');
      logger.warn(
        scrubFields(
          { reqId: 'prop-1', reason: `/tokenize answered 400: ${echo.text}`, err: new Error(`answered ${echo.text}`) },
          rule,
          rule.secrets(headers),
        ),
        'scoring failed',
      );
      logger.error({ detail: `the baseline said: ${baselineEcho.text}` }, 'a line about the configured key');
      logger.flush();
      assert.equal(sink.raw.length, 3);
      assert.deepEqual(leaks(sink.text(), values), [], 'log lines');
      for (const l of sink.raw) JSON.parse(l);
    }),
    { numRuns: 150, includeErrorInReport: true },
  );
});

test('the code redacts the credential headers the docs name', () => {
  assert.deepEqual([...CREDENTIAL_HEADERS].sort(), HEADER_KINDS.filter((k) => k !== CUSTOM.toLowerCase()).sort());
  const ops = readFileSync(new URL('../docs/operations.md', import.meta.url), 'utf8');
  for (const h of CREDENTIAL_HEADERS)
    assert.ok(ops.toLowerCase().includes(`\`${h}\``), `docs/operations.md names ${h}`);
});

test(`values under ${MIN_SECRET_LENGTH} characters are removed by name only, never searched for in text (docs/operations.md)`, () => {
  const short = 'abc1234';
  const pair = makePair(2, { headers: { 'x-goog-api-key': short, cookie: 'theme=dark' } });
  pair.candidate.body = {
    ...(pair.candidate.body as object),
    echo: { 'X-Goog-Api-Key': short, text: `x-goog-api-key: ${short}` },
  };
  const record = buildRecord(pair, { includePrompts: true, thresholds: THRESHOLDS });
  const echo = (record.candidate.body as { echo: Record<string, string> }).echo;
  assert.equal(echo['X-Goog-Api-Key'], '[redacted]', 'a field named like a credential is redacted whatever its length');
  assert.equal(echo.text, `x-goog-api-key: ${short}`, 'a short value is not scrubbed from free text');
  assert.equal(recordLine(pair, { includePrompts: true, thresholds: THRESHOLDS }), JSON.stringify(record));
});

// ---------------------------------------------------------------- end to end

type Mode = 'echo' | 'copy4xx' | 'score4xx';

/**
 * An echoing front for a simulated vLLM: every JSON answer gains `echo` (the request's headers, as
 * an object and as text); in `copy4xx` a mirrored copy (it asks for logprobs) gets a 4xx quoting
 * them, in `score4xx` a scoring call (`/tokenize`) does.
 */
async function echoingFront(engineUrl: string, mode: () => Mode, status: number, refuseScoring = true) {
  return startUpstream(async (req, res, body) => {
    const echo = echoOf(req.headers);
    const json = body.length > 0 ? (JSON.parse(body.toString()) as Record<string, unknown>) : {};
    const copy = json.logprobs !== undefined && /completions$/.test(req.url ?? '');
    // The mode: the test's, or named in the prompt (which the copies and the scoring calls carry).
    const m = (['copy4xx', 'score4xx'] as const).find((x) => body.includes(x)) ?? mode();
    if ((m === 'copy4xx' && copy) || (refuseScoring && m === 'score4xx' && req.url === '/tokenize')) {
      // The credential the request led with straddles character 200, where one-line reasons are cut.
      const token = String(req.headers.authorization ?? '').replace(/^Bearer /, '');
      const message = `${'.'.repeat(Math.max(0, 200 - 'rejected: Bearer '.length - Math.ceil(token.length / 2)))}rejected: Bearer ${token}\n${echo.text}`;
      res.writeHead(status, { 'content-type': 'application/json' });
      return res.end(
        JSON.stringify({ error: { message, type: 'invalid_request_error', code: status, headers: echo.headers } }),
      );
    }
    const up = await request(engineUrl + req.url, {
      method: req.method as 'POST',
      body: body.length > 0 ? body : undefined,
      headers: { 'content-type': 'application/json' },
    });
    const text = await up.body.text();
    let out = text;
    try {
      const parsed = JSON.parse(text) as unknown;
      if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed))
        out = JSON.stringify({ ...parsed, echo });
    } catch {
      // not JSON: passed on as it is
    }
    res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type'] ?? 'application/json') });
    res.end(out);
  });
}

test('end to end: echoing upstreams (200 and 4xx, copies, repeats, scoring calls) leave no planted credential in the capture files or the log lines', async (t) => {
  const engines = await Promise.all([
    startEngineServer({ model: createSimModel({ seed: 11, stateShift: 0.6 }), concurrency: 0, api: 'vllm' }),
    startEngineServer({ model: createSimModel({ seed: 11 }), concurrency: 0, api: 'vllm' }),
  ]);
  let mode: Mode = 'echo';
  const candidate = await echoingFront(engines[0].url, () => mode, 400);
  // The baseline scores: the candidate's refusal (quoting the client's headers) is the one logged.
  const baseline = await echoingFront(engines[1].url, () => mode, 401, false);
  t.after(() => Promise.all([candidate.close(), baseline.close(), ...engines.map((e) => e.close())]));
  const seen = { records: 0, scoringFailed: 0, notCompared: 0 };

  await fc.assert(
    fc.asyncProperty(plantedArb, async (v) => {
      const dir = tempDir(t);
      const lp = await startLogprobe(
        {
          candidate: { url: candidate.url, engine: 'vllm' },
          baseline: { url: baseline.url, engine: 'vllm', apiKey: v.key },
          mirror: { sampleRate: 1, repeat: { rate: 1, backends: ['candidate', 'baseline'] } },
          analysis: { scoring: { when: 'always' } },
          capture: { enabled: true, dir },
          log: { redact: [CUSTOM] },
        },
        { level: 'debug' },
      );
      const { authorization: _a, 'openai-organization': org, 'openai-project': project, ...others } = plantedHeaders(v);
      const client = new OpenAI({
        baseURL: `${lp.proxyUrl}/v1`,
        apiKey: v.authorization,
        organization: org,
        project,
        maxRetries: 0,
        defaultHeaders: others,
      });
      try {
        for (const m of ['echo', 'copy4xx', 'score4xx'] as const) {
          mode = m;
          const before = candidate.seen.length;
          const answer = await client.chat.completions.create({
            model: 'sim',
            messages: [{ role: 'user', content: `tell me about ${m}` }],
            max_tokens: 6,
          });
          assert.ok(answer.choices.length > 0);
          await lp.runtime.mirror!.idle();
          // The candidate really got (and so quoted) every planted header but the hop-by-hop one.
          const copy = candidate.seen.slice(before).find((s) => s.body.includes('"logprobs"'));
          assert.ok(copy, 'the mirrored copy reached the candidate');
          for (const k of HEADER_KINDS.filter((h) => h !== 'proxy-authorization'))
            assert.ok(String(copy.headers[k]).includes(v[k]!), `the candidate got ${k}`);
        }
      } finally {
        await lp.close();
      }
      const capture = allText(dir);
      const logs = lp.logs.text();
      seen.records += capture.split('\n').filter((l) => l.startsWith('{')).length;
      seen.scoringFailed += lp.logs.raw.filter((l) => l.includes('"scoring failed"')).length;
      seen.notCompared += lp.logs.raw.filter((l) => l.includes('mirror pair not compared')).length;
      const values = Object.values(v);
      assert.deepEqual(leaks(capture, values), [], 'capture files');
      assert.deepEqual(leaks(logs, values), [], 'log lines');
      assert.match(capture, /\[redacted\]/);
    }),
    { numRuns: 2, endOnFailure: true, includeErrorInReport: true },
  );
  // Not vacuous: every path ran.
  assert.equal(seen.records, 6, 'one record per mirrored request');
  assert.ok(seen.scoringFailed >= 2, `scoring failures were logged (${seen.scoringFailed})`);
  assert.ok(seen.notCompared >= 2, `pairs not compared were logged (${seen.notCompared})`);
});

test('end to end: logprobe record writes a golden file without the key its backend quotes (answers, 4xx bodies, scoring errors)', async (t) => {
  const engine = await startEngineServer({ model: createSimModel({ seed: 11 }), concurrency: 0, api: 'vllm' });
  const backend = await echoingFront(engine.url, () => 'echo', 401);
  t.after(() => Promise.all([backend.close(), engine.close()]));
  const dir = tempDir(t);
  const input = join(dir, 'prompts.jsonl');
  // One prompt per mode: an echoed 200, a 401 to the copy, a 401 to the scoring call.
  const modes: Mode[] = ['echo', 'copy4xx', 'score4xx'];
  writeFileSync(
    input,
    modes
      .map(
        (m) =>
          `${JSON.stringify({ route: '/v1/chat/completions', body: { model: 'sim', messages: [{ role: 'user', content: `hello ${m}` }], max_tokens: 4 } })}\n`,
      )
      .join(''),
  );
  await fc.assert(
    fc.asyncProperty(valueArb('k'), async (key) => {
      const config = join(dir, 'logprobe.yaml');
      writeFileSync(
        config,
        `baseline: { engine: vllm, apiKey: ${JSON.stringify(key)} }\nanalysis: { scoring: { when: always } }\nlog: { redact: [${CUSTOM}] }\n`,
      );
      const out = join(dir, 'golden.jsonl');
      const before = backend.seen.length;
      const r = await runCli(['record', input, '--backend', backend.url, '--out', out, '--config', config]);
      assert.equal(r.code, 1, `a copy and a scoring call were refused: exit 1\n${r.stderr}`);
      assert.ok(
        backend.seen.slice(before).every((s) => s.headers.authorization === `Bearer ${key}`),
        'every call carried the key (and the backend quoted it)',
      );
      const golden = readFileSync(out, 'utf8');
      assert.equal(golden.split('\n').filter((l) => l.startsWith('{')).length, 3);
      assert.ok(golden.includes('[redacted]'), `the backend's quote of its key was scrubbed: ${golden.slice(0, 300)}`);
      assert.deepEqual(leaks(golden + r.stdout + r.stderr, [key]), [], 'golden file and output');
    }),
    { numRuns: 2, endOnFailure: true, includeErrorInReport: true },
  );
});

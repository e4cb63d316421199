import assert from 'node:assert/strict';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { createSimModel, startEngineServer, type EngineServerHandle, type EngineServerOptions } from '@logprobe/engine';
import {
  KeyRejectedError,
  probeEngine,
  UnreachableError,
  type CapabilityName,
  type ProbeOptions,
  type ProbeReport,
} from '../src/probe/probe.js';
import { runCli } from './helpers/cli.js';
import { startLlamaReplay } from './helpers/llama-replay.js';
import { startUpstream, type TestUpstream } from './helpers/upstream.js';
import { detectEngine, KeyRefusedError } from '../src/backend/engines/detect.js';
import { llamacppProfile } from '../src/backend/engines/llamacpp.js';
import { Pool } from 'undici';
import { Backends } from '../src/backend/client.js';

const servers: EngineServerHandle[] = [];
after(async () => {
  for (const s of servers) await s.close();
});

async function engine(
  options: Omit<EngineServerOptions, 'model'> & { batchNoise?: number } = {},
): Promise<EngineServerHandle> {
  const { batchNoise, ...rest } = options;
  const s = await startEngineServer({
    model: createSimModel({ seed: 11, ...(batchNoise !== undefined ? { batchNoise } : {}) }),
    ...rest,
  });
  servers.push(s);
  return s;
}

const probe = (url: string, o: Partial<ProbeOptions> = {}): Promise<ProbeReport> =>
  probeEngine({ url, timeoutMs: 5000, topK: 5, flush: true, required: [], ...o });
const cap = (r: ProbeReport, name: CapabilityName) => {
  const c = r.capabilities.find((x) => x.name === name);
  assert.ok(c, `no ${name} line`);
  return c;
};

describe('logprobe probe against the vLLM double', () => {
  test('default flags: the cap asked (20), no cache counts, no flush, each with the flag that enables it', async () => {
    const s = await engine({ api: 'vllm' });
    const r = await probe(s.url);
    assert.equal(r.engine, 'vllm');
    assert.equal(r.version, '0.11.0');
    const topk = cap(r, 'top_k_cap');
    assert.equal(topk.ok, true);
    assert.match(
      topk.detail,
      /^20 \(asked 21: HTTP 400: Requested sample logprobs of 21, which is greater than max allowed: 20/,
    );
    assert.match(topk.detail, /prompt_logprobs: 20/);
    assert.equal(cap(r, 'token_ids').ok, true);
    assert.equal(cap(r, 'scoring').ok, true);
    assert.match(cap(r, 'scoring').detail, /does not read the cache/);
    assert.equal(cap(r, 'prompt_top_k').ok, true);
    assert.equal(cap(r, 'cache_counts').ok, false);
    assert.equal(cap(r, 'cache_counts').enable, '--enable-prompt-tokens-details');
    assert.equal(cap(r, 'flush').ok, false);
    assert.match(cap(r, 'flush').detail, /not available: \/reset_prefix_cache answered HTTP 404/);
    assert.equal(cap(r, 'flush').enable, 'VLLM_SERVER_DEV_MODE=1');
    assert.equal(cap(r, 'cache_path').ok, false);
    assert.equal(cap(r, 'chat_rendering').ok, true);
    assert.equal(cap(r, 'determinism').ok, true);
  });

  test('--enable-prompt-tokens-details and --dev-mode: counts reported (the cold 0 dropped), flush confirmed by them', async () => {
    const s = await engine({ api: 'vllm', promptTokensDetails: true, devMode: true });
    const r = await probe(s.url);
    assert.equal(cap(r, 'cache_counts').ok, true);
    assert.match(cap(r, 'cache_counts').detail, /^reported: cold no count \(a 0 is dropped/);
    assert.equal(cap(r, 'flush').ok, true);
    assert.match(cap(r, 'flush').detail, /confirmed: the next run read nothing from the cache/);
    assert.equal(cap(r, 'cache_path').ok, true);
  });

  test('--engine-version 0.21.0: a cold 0 reported as 0 (older releases drop it)', async () => {
    const s = await engine({ api: 'vllm', promptTokensDetails: true, engineVersion: '0.21.0' });
    const r = await probe(s.url, { flush: false });
    assert.equal(r.version, '0.21.0');
    assert.match(cap(r, 'cache_counts').detail, /^reported: cold 0, warm \d+$/);
  });

  test('--max-logprobs 4 below mirror.topLogprobs 5: the cap line fails and names the flag', async () => {
    const s = await engine({ api: 'vllm', maxLogprobs: 4 });
    const r = await probe(s.url, { required: ['top_k_cap'] });
    const topk = cap(r, 'top_k_cap');
    assert.equal(topk.ok, false);
    assert.match(topk.detail, /^4 \(asked 21: .*max allowed: 4/);
    assert.match(topk.enable ?? '', /--max-logprobs/);
    assert.deepEqual(r.missing, ['top_k_cap']);
  });

  test('the V2 model runner: prompt logprobs without top-k', async () => {
    const s = await engine({ api: 'vllm', v2ModelRunner: true });
    const r = await probe(s.url);
    assert.equal(cap(r, 'prompt_top_k').ok, false);
    assert.match(cap(r, 'prompt_top_k').detail, /prompt token only/);
    assert.match(cap(r, 'prompt_top_k').enable ?? '', /VLLM_USE_V2_MODEL_RUNNER=0/);
  });

  test('batch noise: 16 concurrent copies differ from the lone run; VLLM_BATCH_INVARIANT=1 makes them bitwise equal', async () => {
    const noisy = await engine({ api: 'vllm', prefixCache: false, concurrency: 0, tokenDelayMs: 2, batchNoise: 0.05 });
    const r = await probe(noisy.url, { required: ['determinism'] });
    const d = cap(r, 'determinism');
    assert.equal(d.ok, false, d.detail);
    assert.match(d.detail, /of 16 concurrent copies differ from the lone run/);
    assert.match(d.enable ?? '', /VLLM_BATCH_INVARIANT=1.*#51187/);
    assert.deepEqual(r.missing, ['determinism']);
    const invariant = await engine({
      api: 'vllm',
      prefixCache: false,
      concurrency: 0,
      tokenDelayMs: 2,
      batchNoise: 0.05,
      batchInvariant: true,
    });
    const r2 = await probe(invariant.url, { required: ['determinism'] });
    assert.equal(cap(r2, 'determinism').ok, true, cap(r2, 'determinism').detail);
    assert.deepEqual(r2.missing, []);
  });
});

describe('logprobe probe against the SGLang double', () => {
  test('default flags: no cache report; the flush works while idle', async () => {
    const s = await engine({ api: 'sglang' });
    const r = await probe(s.url);
    assert.equal(r.engine, 'sglang');
    assert.equal(r.version, '0.5.0');
    assert.equal(cap(r, 'cache_counts').ok, false);
    assert.equal(cap(r, 'cache_counts').enable, '--enable-cache-report');
    assert.equal(cap(r, 'flush').ok, true);
    assert.match(cap(r, 'scoring').detail, /sglang \/generate input_token_logprobs.*does not read the cache/);
  });

  test('--enable-cache-report: counts above 0 only; --admin-api-key: the flush needs that key', async () => {
    const s = await engine({ api: 'sglang', enableCacheReport: true, adminApiKey: 'admin-secret' });
    const r = await probe(s.url);
    assert.equal(cap(r, 'cache_counts').ok, true);
    assert.match(cap(r, 'cache_counts').detail, /cold no count \(a 0 is dropped/);
    const f = cap(r, 'flush');
    assert.equal(f.ok, false);
    assert.equal(f.detail, '/flush_cache requires an API key: none was sent (pass --api-key): HTTP 401: Unauthorized');
    assert.match(f.enable ?? '', /admin-api-key/);
    const withKey = await probe(s.url, { apiKey: 'admin-secret' });
    assert.equal(cap(withKey, 'flush').ok, true, cap(withKey, 'flush').detail);
  });

  test('batch noise off under --enable-deterministic-inference', async () => {
    const noisy = await engine({
      api: 'sglang',
      prefixCache: false,
      concurrency: 0,
      tokenDelayMs: 2,
      batchNoise: 0.05,
    });
    assert.equal(cap(await probe(noisy.url), 'determinism').ok, false);
    const det = await engine({
      api: 'sglang',
      prefixCache: false,
      concurrency: 0,
      tokenDelayMs: 2,
      batchNoise: 0.05,
      batchInvariant: true,
    });
    const d = cap(await probe(det.url), 'determinism');
    assert.equal(d.ok, true, d.detail);
    assert.match(d.detail, /server_info enable_deterministic_inference: true$/);
  });
});

describe('logprobe probe against the llama-server double and recordings', () => {
  test('--slot-save-path: the flush erases the slot, confirmed by timings; without it the flag is named', async () => {
    const on = await engine({ api: 'llamacpp', slotSavePath: mkdtempSync(join(tmpdir(), 'probe-slots-')) });
    const r = await probe(on.url);
    assert.equal(r.engine, 'llamacpp');
    assert.equal(cap(r, 'cache_counts').ok, true);
    assert.match(cap(r, 'cache_counts').detail, /^reported: cold 0, warm \d+/);
    assert.equal(cap(r, 'flush').ok, true);
    assert.match(cap(r, 'scoring').detail, /reads the cache/);
    const off = await engine({ api: 'llamacpp' });
    const f = cap(await probe(off.url), 'flush');
    assert.equal(f.ok, false);
    assert.match(f.detail, /501/);
    assert.equal(f.enable, '--slot-save-path DIR');
  });

  test("llama-server b4748's recorded answers: engine, build, logprobs with ids, top-k as recorded", async () => {
    const replay = await startLlamaReplay();
    try {
      const r = await probe(replay.url, { flush: false });
      assert.equal(r.engine, 'llamacpp');
      assert.equal(r.evidence, 'server: llama.cpp');
      assert.equal(r.version, 'b4748-c392e5094');
      assert.equal(r.model, 'models/clean.gguf');
      assert.equal(cap(r, 'logprobs').ok, true);
      assert.match(cap(r, 'logprobs').detail, /^8 of 8 tokens with a logprob, top-5$/);
      assert.equal(cap(r, 'token_ids').ok, true);
      // The recording asked for 5: the replayed answer to 21 holds 5 per token, read as a cap of 5.
      assert.match(cap(r, 'top_k_cap').detail, /^asked 21: answered 5 per token/);
      // Nothing was recorded for the cache check's longer prompt: the replay says so (404), the line fails.
      assert.equal(cap(r, 'cache_counts').ok, false);
      assert.match(cap(r, 'cache_counts').detail, /HTTP 404: File Not Found/);
      assert.equal(cap(r, 'flush').ok, null);
      assert.ok(replay.requests.includes('GET /props'));
    } finally {
      await replay.close();
    }
  });

  test('a URL that answers nothing', async () => {
    await assert.rejects(
      probe('http://127.0.0.1:9'),
      (err: unknown) => err instanceof UnreachableError && /^ECONNREFUSED 127\.0\.0\.1:9$/.test(err.message),
    );
  });
});

describe('logprobe probe (the command)', () => {
  test('exit 0 when the configuration works, 1 naming what is missing, 2 for a dead URL; --json', async () => {
    const llama = await engine({ api: 'llamacpp' });
    const ok = await runCli(['probe', llama.url]);
    assert.equal(ok.code, 0, ok.stdout + ok.stderr);
    assert.match(ok.stdout, /^http:\/\/127\.0\.0\.1:\d+: llamacpp b4748-c392e5094 \(server: llama\.cpp\)/);
    assert.match(
      ok.stdout,
      /\ndeterminism +yes +two lone runs bitwise equal, with the cache and without it; no concurrent copies: one slot \(total_slots 1\) batches no requests together; analysis\.noiseFloor: exact is usable\n/,
    );
    assert.match(ok.stdout, /every feature the configuration uses works/);

    // Baseline-free: repeat probes need a visible cache path; a default vLLM shows none.
    const vllm = await engine({ api: 'vllm' });
    const dir = mkdtempSync(join(tmpdir(), 'probe-cfg-'));
    const cfg = join(dir, 'one.yaml');
    writeFileSync(cfg, 'baseline: null\n');
    const missing = await runCli(['probe', vllm.url, '--config', cfg]);
    assert.equal(missing.code, 1, missing.stdout + missing.stderr);
    assert.match(missing.stdout, /\ncache path \* +no +not visible/);
    assert.match(
      missing.stderr,
      /^logprobe: http:\/\/127\.0\.0\.1:\d+ lacks what the configuration uses: cache path \(--enable-prompt-tokens-details \(dev mode alone does not do: its flush answers 200 without proof\)\)\n$/,
    );

    const json = await runCli(['probe', vllm.url, '--config', cfg, '--json']);
    assert.equal(json.code, 1);
    const j = JSON.parse(json.stdout) as ProbeReport;
    assert.deepEqual(Object.keys(j), [
      'url',
      'engine',
      'evidence',
      'version',
      'model',
      'capabilities',
      'required',
      'missing',
      'meaning',
    ]);
    assert.equal(j.engine, 'vllm');
    // No dev mode: vLLM does not say its --logprobs-mode, and the numbers are logprobs.
    assert.equal(j.meaning.mode, null);
    assert.match(j.meaning.detail, /VLLM_SERVER_DEV_MODE=1/);
    assert.deepEqual(j.missing, ['cache_path']);
    assert.ok(j.required.includes('cache_path') && j.required.includes('scoring'));
    for (const c of j.capabilities) assert.deepEqual(Object.keys(c), ['name', 'ok', 'detail', 'enable']);

    const dead = await runCli(['probe', 'http://127.0.0.1:9']);
    assert.equal(dead.code, 2);
    assert.equal(dead.stdout, '');
    assert.equal(dead.stderr, 'logprobe: http://127.0.0.1:9 answers nothing: ECONNREFUSED 127.0.0.1:9\n');
  });
});

/**
 * A llama-server stand-in with the behaviour the determinism check must tell apart (measured on
 * llama-server b4748): a prompt served from a slot's cache moves each logprob by `cacheShift`;
 * with `loneJitter`, two cold lone runs differ too (as with -np 4). It counts concurrent
 * completions and records each slot erased.
 */
async function llamaLike(o: {
  slots: number;
  cacheShift: number;
  loneJitter?: number;
}): Promise<TestUpstream & { maxInFlight: () => number; erased: number[]; order: string[] }> {
  let inFlight = 0;
  let max = 0;
  let runs = 0;
  const erased: number[] = [];
  const order: string[] = [];
  const cached = new Set<string>();
  const up = await startUpstream(async (req, res, raw) => {
    const path = req.url ?? '';
    order.push(`${req.method} ${path.split('?')[0]}`);
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { server: 'llama.cpp', 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (path === '/v1/models') return json(200, { object: 'list', data: [{ id: 'm', owned_by: 'llamacpp' }] });
    if (path === '/props') return json(200, { total_slots: o.slots, build_info: 'b4748-test' });
    const slot = /^\/slots\/(\d+)\?action=erase$/.exec(path);
    if (slot) {
      erased.push(Number(slot[1]));
      cached.clear();
      return json(200, { id_slot: Number(slot[1]), n_erased: 3 });
    }
    if (path !== '/v1/completions') return json(404, { error: { code: 404, message: 'File Not Found' } });
    const body = JSON.parse(raw.toString()) as { prompt: string; cache_prompt?: boolean; max_tokens?: number };
    inFlight++;
    max = Math.max(max, inFlight);
    await new Promise((r) => setTimeout(r, 5));
    const warm = body.cache_prompt !== false && cached.has(body.prompt);
    if (body.cache_prompt !== false) cached.add(body.prompt);
    const jitter = o.loneJitter && body.cache_prompt === false ? (runs++ % 2) * o.loneJitter : 0;
    const n = Math.min(body.max_tokens ?? 4, 4);
    const lp = (i: number) => -0.5 - i / 10 + (warm ? o.cacheShift : 0) + jitter;
    inFlight--;
    json(200, {
      choices: [
        {
          text: 'abcd'.slice(0, n),
          logprobs: {
            tokens: [...'abcd'.slice(0, n)],
            token_logprobs: Array.from({ length: n }, (_, i) => lp(i)),
            top_logprobs: Array.from({ length: n }, (_, i) => ({ ['abcd'[i]!]: lp(i), z: lp(i) - 2 })),
          },
          finish_reason: 'length',
        },
      ],
      usage: { prompt_tokens: 8, completion_tokens: n },
    });
  });
  return Object.assign(up, { maxInFlight: () => max, erased, order });
}

describe('the determinism check: the prefix cache told apart from batching, only what would change the figure', () => {
  test('one slot, a cached prefix moves the logprobs: differ with the cache, equal without; exact usable with the cache skipped; no -np 1; no burst', async () => {
    const s = await llamaLike({ slots: 1, cacheShift: 2.6e-4 });
    try {
      const r = await probe(s.url, { engine: 'llamacpp', flush: false, required: ['determinism'] });
      const d = cap(r, 'determinism');
      assert.equal(d.ok, true, d.detail);
      assert.equal(
        d.detail,
        'two lone runs differ with the cache (max 2.6e-4 nats) and are bitwise equal without it (cache_prompt: false): the prefix cache, not batching; ' +
          'no concurrent copies: one slot (total_slots 1) batches no requests together; ' +
          'analysis.noiseFloor: exact is usable with the cache skipped (mirror.extraParams: {cache_prompt: false})',
      );
      assert.equal(d.enable, null, 'a server at one slot is never told -np 1');
      assert.equal(s.maxInFlight(), 1, 'no concurrent burst on one slot');
      assert.deepEqual(r.missing, []);
    } finally {
      await s.close();
    }
  });

  test('four slots: lone runs differ without the cache too (-np 1 suggested, naming the slots); the burst bounded by total_slots', async () => {
    const s = await llamaLike({ slots: 4, cacheShift: 2.6e-4, loneJitter: 8.3e-6 });
    try {
      const r = await probe(s.url, { engine: 'llamacpp', flush: false, copies: 16, required: ['determinism'] });
      const d = cap(r, 'determinism');
      assert.equal(d.ok, false);
      assert.match(d.detail, /^two lone runs differ without the cache too \(max 8\.3e-6 nats, cache_prompt: false\)/);
      assert.match(d.detail, /of 4 concurrent copies differ from the lone run/);
      assert.doesNotMatch(d.detail, /noiseFloor: exact/);
      assert.equal(d.enable, '-np 1 (this server has 4 slots)');
      assert.ok(s.maxInFlight() <= 4, `at most total_slots in flight, saw ${s.maxInFlight()}`);
      assert.ok(s.maxInFlight() > 1, 'the burst is concurrent');
    } finally {
      await s.close();
    }
  });

  test('the burst follows probe.concurrentCopies (copies) on an engine without slots', async () => {
    const s = await engine({ api: 'vllm', prefixCache: false, concurrency: 0, tokenDelayMs: 2 });
    const d = cap(await probe(s.url, { copies: 3 }), 'determinism');
    assert.equal(
      d.detail,
      'two lone runs bitwise equal; bitwise equal in each of 3 concurrent copies; analysis.noiseFloor: exact is usable',
    );
  });

  test('detection runs before any completion, and the engine is told before the burst', async () => {
    const s = await llamaLike({ slots: 2, cacheShift: 0 });
    try {
      let toldAfter = -1;
      const r = await probe(s.url, {
        flush: false,
        onEngine: () => (toldAfter = s.order.filter((x) => x === 'POST /v1/completions').length),
      });
      assert.equal(r.engine, 'llamacpp');
      assert.equal(toldAfter, 0, 'told before any completion was sent');
      assert.ok(s.order.indexOf('GET /v1/models') < s.order.indexOf('POST /v1/completions'));
    } finally {
      await s.close();
    }
  });
});

test("the mirror's client adopts the engine the start-up probe told, and asks the server nothing for it", async () => {
  const pool = new Pool('http://127.0.0.1:9');
  const hooks: string[] = [];
  const scoring = {
    when: 'diverged' as const,
    maxPositions: 8,
    topK: 5,
    engines: { candidate: 'auto' as const, baseline: 'vllm' as const },
  };
  const options = {
    pool,
    ownsPool: true,
    url: 'http://127.0.0.1:9',
    timeoutMs: 1000,
    idleTimeoutMs: 1000,
    headers: { role: 'candidate' as const },
  };
  const b = new Backends(
    { candidate: options, baseline: { ...options, ownsPool: false, headers: { role: 'baseline' as const } } },
    scoring,
    {
      onProfile: (backend, profile, evidence) => hooks.push(`${backend} ${profile} ${evidence}`),
    },
  );
  try {
    b.candidate.adopt('llamacpp', 'server: llama.cpp');
    assert.equal((await b.candidate.profile()).name, 'llamacpp', 'no request to the dead port: the adopted profile');
    b.baseline!.adopt('sglang', 'probe');
    assert.equal((await b.baseline!.profile()).name, 'vllm', 'a configured engine is never replaced');
    assert.deepEqual(hooks, ['candidate llamacpp server: llama.cpp', 'baseline vllm configured']);
  } finally {
    await b.close();
  }
});

test('a detection that gets no answer says it was detection, which request and why (not a bare undici code)', async () => {
  const hung = await startUpstream(() => undefined);
  const pool = new Pool(hung.url);
  try {
    await assert.rejects(
      detectEngine({ pool, url: hung.url, headers: {}, timeoutMs: 60_000 }),
      (err: unknown) =>
        (err as Error).message ===
        'engine detection failed: GET /v1/models: no answer within 3000 ms (UND_ERR_HEADERS_TIMEOUT)',
    );
  } finally {
    await pool.destroy();
    await hung.close();
  }
});

describe('the llama-server flush empties every slot', () => {
  test('the probe and the engine profile erase each of /props total_slots', async () => {
    const s = await llamaLike({ slots: 4, cacheShift: 0 });
    try {
      const r = await probe(s.url, { engine: 'llamacpp', flush: true });
      assert.deepEqual(s.erased, [0, 1, 2, 3]);
      assert.match(cap(r, 'flush').detail, /^\/slots\/\{0\.\.3\}\?action=erase \(every slot\) answered 200/);
      s.erased.length = 0;
      const pool = new Pool(s.url);
      try {
        await llamacppProfile.flush({ pool, url: s.url, headers: {}, timeoutMs: 5000 });
      } finally {
        await pool.close();
      }
      assert.deepEqual(s.erased, [0, 1, 2, 3]);
    } finally {
      await s.close();
    }
  });
});

describe('a key the server refuses is named, and no engine is guessed from the refusal', () => {
  test('SGLang with --api-key: detection refuses to guess; the probe names the key sent, or that none was', async () => {
    const s = await engine({ api: 'sglang', apiKey: 'right-key' });
    const pool = new Pool(s.url);
    try {
      await assert.rejects(
        detectEngine({ pool, url: s.url, headers: { authorization: 'Bearer wrong' }, timeoutMs: 5000 }),
        (err: unknown) =>
          err instanceof KeyRefusedError && /GET \/v1\/models answered HTTP 401: Unauthorized/.test(err.message),
      );
      assert.equal(
        (await detectEngine({ pool, url: s.url, headers: { authorization: 'Bearer right-key' }, timeoutMs: 5000 }))
          .engine,
        'sglang',
      );
    } finally {
      await pool.close();
    }
    await assert.rejects(
      probe(s.url, { apiKey: 'wrong', keyName: 'baseline.apiKey' }),
      (err: unknown) =>
        err instanceof KeyRejectedError &&
        err.message === 'rejected the API key (baseline.apiKey): HTTP 401: Unauthorized',
    );
    await assert.rejects(
      probe(s.url),
      (err: unknown) =>
        err instanceof KeyRejectedError &&
        err.message === 'requires an API key: none was sent (pass --api-key): HTTP 401: Unauthorized',
    );
    const ok = await probe(s.url, { apiKey: 'right-key' });
    assert.equal(ok.engine, 'sglang');

    const cli = await runCli(['probe', s.url, '--api-key', 'wrong']);
    assert.equal(cli.code, 2);
    assert.equal(cli.stdout, '');
    assert.equal(cli.stderr, `logprobe: ${s.url} rejected the API key (--api-key): HTTP 401: Unauthorized\n`);
  });
});

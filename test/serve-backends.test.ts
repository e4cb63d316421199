import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { existsSync } from 'node:fs';
import { request } from 'undici';
import { chromium } from 'playwright-core';
import type { Logger } from 'pino';
import { createSimModel, startEngineServer, type EngineServerHandle } from '@logprobe/engine';
import { BackendHealth, FAILURE_LOG_MS } from '../src/backend/health.js';
import { startLogprobe, type StartedLogprobe } from './helpers/logprobe.js';
import { metricValue } from './helpers/sim.js';

const started: Array<{ close(): Promise<void> }> = [];
after(async () => {
  for (const s of started.reverse()) await s.close();
});

async function until<T>(f: () => T | undefined | null | false, what: string, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const DEAD = 'http://127.0.0.1:9';
const CHROMIUM = '/usr/bin/chromium';

test('serve with a dead baseline: said at start with the cause, failures logged rate-limited, /readyz 200 naming it, /ui shows it; the candidate probed and exported', async () => {
  const candidate: EngineServerHandle = await startEngineServer({ model: createSimModel({ seed: 11 }), api: 'vllm' });
  started.push(candidate);
  const lp: StartedLogprobe = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: DEAD },
    mirror: { sampleRate: 1 },
    probe: { atStart: 'full' },
  });
  started.push(lp);
  const lines = () => lp.logs.lines;

  // At start, in the background: the dead baseline with its cause, the candidate with its engine.
  const dead = await until(
    () => lines().find((l) => l.backend === 'baseline' && l.reason !== undefined && l.outcome === undefined),
    'the baseline state line',
  );
  assert.equal(dead.level, 'warn');
  assert.equal(
    dead.msg,
    "baseline unreachable at 127.0.0.1:9: ECONNREFUSED 127.0.0.1:9 (the mirror's copies to it will fail until it answers)",
  );
  const up = await until(
    () =>
      lines().find(
        (l) => l.backend === 'candidate' && typeof l.msg === 'string' && l.msg.startsWith('candidate reachable'),
      ),
    'the candidate state line',
  );
  assert.match(String(up.msg), /^candidate reachable at 127\.0\.0\.1:\d+: vllm 0\.11\.0$/);
  const probeLine = await until(
    () => lines().find((l) => typeof l.msg === 'string' && l.msg.startsWith('candidate probe:')),
    'the candidate probe line',
  );
  assert.match(
    String(probeLine.msg),
    /^candidate probe: vllm 0\.11\.0; works: logprobs, top-k cap, token ids, scoring, prompt top-k, chat rendering, determinism; does not: cache counts \(.*enable: --enable-prompt-tokens-details\)/,
  );
  assert.equal(
    lines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith('candidate probe:')).length,
    1,
    'logged once',
  );

  // Six client requests: all answered by the candidate; six baseline failures, one line (the first, at once).
  for (let i = 0; i < 6; i++) {
    const res = await request(`${lp.proxyUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim', prompt: `dead baseline ${i}`, max_tokens: 4 }),
    });
    assert.equal(res.statusCode, 200);
    await res.body.text();
  }
  await lp.runtime.mirror!.idle();
  const failures = lines().filter((l) => l.outcome === 'baseline_error');
  assert.equal(failures.length, 1, JSON.stringify(failures));
  assert.equal(failures[0]!.reason, 'ECONNREFUSED 127.0.0.1:9');
  assert.match(
    String(failures[0]!.msg),
    /^baseline_error: ECONNREFUSED 127\.0\.0\.1:9 \(mirrored copies to baseline fail; further failures are logged at most once a minute\)$/,
  );

  // /readyz: about the client path (200), its body naming the backend the mirror cannot reach.
  const ready = await request(`${lp.adminUrl}/readyz`);
  assert.equal(ready.statusCode, 200);
  const body = (await ready.body.json()) as {
    status: string;
    mirror?: Array<{ backend: string; host: string; reason: string }>;
  };
  assert.equal(body.status, 'ready');
  assert.deepEqual(
    body.mirror?.map((m) => [m.backend, m.host, m.reason]),
    [['baseline', '127.0.0.1:9', 'ECONNREFUSED 127.0.0.1:9']],
  );

  // /ui/data: each backend's state with the last error.
  const ui = (await (await request(`${lp.adminUrl}/ui/data`)).body.json()) as {
    data: {
      backends: Array<{
        backend: string;
        state: string;
        engine: string | null;
        failures: number;
        lastError: { reason: string; outcome: string } | null;
      }>;
    };
  };
  const base = ui.data.backends.find((b) => b.backend === 'baseline')!;
  assert.equal(base.state, 'unreachable');
  assert.deepEqual(
    [base.lastError?.outcome, base.lastError?.reason, base.failures],
    ['baseline_error', 'ECONNREFUSED 127.0.0.1:9', 6],
  );
  const cand = ui.data.backends.find((b) => b.backend === 'candidate')!;
  assert.deepEqual([cand.state, cand.engine, cand.lastError], ['reachable', 'vllm', null]);

  // The probe's capabilities, exported by the worker.
  const metrics = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  assert.equal(
    metricValue(metrics, 'logprobe_engine_capability', { backend: 'candidate', capability: 'top_k_cap' }),
    1,
  );
  assert.equal(
    metricValue(metrics, 'logprobe_engine_capability', { backend: 'candidate', capability: 'cache_counts' }),
    0,
  );
  assert.equal(
    metricValue(metrics, 'logprobe_engine_capability', { backend: 'candidate', capability: 'flush' }),
    undefined,
    'not asked: mirror.repeat.flush is off',
  );
  assert.equal(
    metricValue(metrics, 'logprobe_engine_capability', { backend: 'baseline', capability: 'logprobs' }),
    undefined,
    'an unreachable backend has no capability series',
  );
});

test('serve with a baseline that refuses baseline.apiKey: named at start (no engine guessed), in the failure line, /readyz and /ui; a candidate that wants the client key is not blamed for the probe having none', async () => {
  // SGLang with --api-key answers every route 401 without the key (srt/utils/auth.py).
  const baseline: EngineServerHandle = await startEngineServer({
    model: createSimModel({ seed: 11 }),
    api: 'sglang',
    apiKey: 'the-right-key',
  });
  started.push(baseline);
  const candidate: EngineServerHandle = await startEngineServer({
    model: createSimModel({ seed: 11 }),
    api: 'sglang',
    apiKey: 'client-key',
  });
  started.push(candidate);
  const lp: StartedLogprobe = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url, apiKey: 'a-wrong-key' },
    mirror: { sampleRate: 1 },
    probe: { atStart: 'full' },
  });
  started.push(lp);
  const lines = () => lp.logs.lines;
  const host = new URL(baseline.url).host;
  const rejected = 'rejected the API key (baseline.apiKey): HTTP 401: Unauthorized';

  const start = await until(
    () => lines().find((l) => l.backend === 'baseline' && l.reason !== undefined && l.outcome === undefined),
    'the baseline state line',
  );
  assert.equal(start.level, 'warn');
  assert.equal(
    start.msg,
    `baseline at ${host} ${rejected} (the mirror's copies to it will fail until the key is right)`,
  );
  const cand = await until(
    () => lines().find((l) => l.backend === 'candidate' && typeof l.msg === 'string' && l.msg.includes('answers at')),
    'the candidate state line',
  );
  assert.equal(cand.level, 'info');
  assert.match(
    String(cand.msg),
    /^candidate answers at 127\.0\.0\.1:\d+ but requires an API key: none was sent \(the start-up probe has no key for the candidate\): HTTP 401: Unauthorized; its engine and capabilities are not probed at start/,
  );
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(
    lines().filter((l) => typeof l.msg === 'string' && /reachable at|engine profile: openai/.test(l.msg)).length,
    0,
    'no backend called reachable, no engine guessed from a 401',
  );

  for (let i = 0; i < 3; i++) {
    const res = await request(`${lp.proxyUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer client-key' },
      body: JSON.stringify({ model: 'sim', prompt: `wrong key ${i}`, max_tokens: 4 }),
    });
    assert.equal(res.statusCode, 200);
    await res.body.text();
  }
  await lp.runtime.mirror!.idle();
  const failures = lines().filter((l) => l.outcome === 'baseline_error');
  assert.equal(failures.length, 1, JSON.stringify(failures));
  assert.equal(
    failures[0]!.msg,
    `baseline_error: ${rejected} (mirrored copies to baseline fail; further failures are logged at most once a minute)`,
  );

  // /readyz: the client path is fine (200), as with a refused connection; the body says what is wrong.
  const ready = await request(`${lp.adminUrl}/readyz`);
  assert.equal(ready.statusCode, 200);
  const body = (await ready.body.json()) as {
    status: string;
    mirror?: Array<{ backend: string; host: string; state: string; reason: string }>;
  };
  assert.deepEqual(
    body.mirror?.map((m) => [m.backend, m.host, m.state, m.reason]),
    [['baseline', host, 'rejected', rejected]],
  );

  const ui = (await (await request(`${lp.adminUrl}/ui/data`)).body.json()) as {
    data: { backends: Array<{ backend: string; state: string; lastError: { reason: string } | null }> };
  };
  const base = ui.data.backends.find((b) => b.backend === 'baseline')!;
  assert.deepEqual([base.state, base.lastError?.reason], ['rejected', rejected]);
  const c = ui.data.backends.find((b) => b.backend === 'candidate')!;
  assert.deepEqual([c.state, c.lastError], ['reachable', null], 'the copies carried the client key');
  assert.doesNotMatch(lp.logs.text(), /a-wrong-key|client-key|the-right-key/);

  // The page's backends table draws it (where the browser is installed: .ci/run installs it).
  if (existsSync(CHROMIUM)) {
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu'],
    });
    try {
      const page = await browser.newPage();
      await page.goto(`${lp.adminUrl}/ui`, { waitUntil: 'load' });
      await page.waitForSelector('tr[data-backend="baseline"][data-state="rejected"]', { timeout: 10_000 });
      const row = (await page.textContent('tr[data-backend="baseline"]'))!;
      assert.match(row, /key rejected/);
      assert.ok(row.includes(`baseline_error: ${rejected}`), row);
      assert.equal(await page.getAttribute('tr[data-backend="baseline"] .badge', 'class'), 'badge a-firing');
    } finally {
      await browser.close();
    }
  }
});

test('failure lines: the first at once, then at most one a minute with the count since the last line', () => {
  const logged: Array<{ obj: Record<string, unknown>; msg: string }> = [];
  const log = {
    warn: (obj: Record<string, unknown>, msg: string) => logged.push({ obj, msg }),
    info: () => {},
  } as unknown as Logger;
  let now = 1_000_000;
  const h = new BackendHealth(
    log,
    [{ backend: 'baseline', url: DEAD }],
    () => {},
    () => now,
  );
  h.failed('baseline', 'baseline_error', 'ECONNREFUSED 127.0.0.1:9', 0);
  assert.equal(logged.length, 1);
  for (let i = 0; i < 5; i++) {
    now += 1000;
    h.failed('baseline', 'baseline_error', 'ECONNREFUSED 127.0.0.1:9', 0);
  }
  assert.equal(logged.length, 1, 'nothing more within the minute');
  now += FAILURE_LOG_MS;
  h.failed('baseline', 'baseline_error', 'HTTP 503: overloaded', 503);
  assert.equal(logged.length, 2);
  assert.equal(
    logged[1]!.msg,
    'baseline_error: HTTP 503: overloaded (6 failed copies in the last minute, 7 since the start)',
  );
  assert.deepEqual([logged[1]!.obj.count, logged[1]!.obj.total], [6, 7]);
  now += 10;
  h.failed('baseline', 'baseline_error', 'HTTP 503: overloaded', 503);
  h.close();
  assert.equal(logged.length, 3, 'what is pending is said at close');
  assert.equal(logged[2]!.obj.count, 1);
  assert.equal(h.snapshot()[0]!.state, 'unreachable');
  h.answered('baseline');
  assert.equal(h.snapshot()[0]!.state, 'reachable');
});

test('a shutdown never waits for the start-up probe: a candidate that never answers, SIGTERM, the process exits within drainSeconds', async () => {
  const { startCli } = await import('./helpers/cli.js');
  const { startUpstream } = await import('./helpers/upstream.js');
  const { mkdtempSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  // Holds every request open (the probe's too) until the test ends.
  const hung = await startUpstream(() => undefined);
  started.push(hung);
  const file = join(mkdtempSync(join(tmpdir(), 'logprobe-probe-stop-')), 'logprobe.yaml');
  writeFileSync(
    file,
    `listen: { host: 127.0.0.1, port: 0 }\nadmin: { host: 127.0.0.1, port: 0 }\ncandidate: { url: ${hung.url} }\nbaseline: null\ncapture: { enabled: false }\n` +
      `shutdown: { drainSeconds: 1 }\nprobe: { atStart: full, timeoutMs: 60000 }\n`,
  );
  const p = await startCli(['serve', '--config', file], /"msg":"logprobe listening"/);
  await until(() => hung.seen.length > 0, 'the probe to reach the candidate');
  const signalled = performance.now();
  p.child.kill('SIGTERM');
  const code = await Promise.race([
    p.exited,
    new Promise<'still running'>((r) => setTimeout(() => r('still running'), 8000)),
  ]);
  const after = performance.now() - signalled;
  if (code === 'still running') p.child.kill('SIGKILL');
  assert.equal(code, 0, `exit after ${Math.round(after)} ms:\n${p.output()}`);
  assert.ok(
    after < 4000,
    `exited ${Math.round(after)} ms after SIGTERM (drainSeconds 1, the probe's requests hung for 60 s)`,
  );
});

/**
 * The engine doubles' switches through the CLI (`logprobe engine --sim --api vllm|sglang …`), as
 * the demo and the other branches' tests start them: each flag and environment variable reaches
 * the behaviour it names. Runs the TypeScript CLI through tsx, so it needs no build.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
const SCRIPT = `import { runEngineCli } from ${JSON.stringify(CLI)}; process.exitCode = await runEngineCli(process.argv.slice(1));`;
const LINE = /logprobe engine \(sim\) listening on (http:\/\/127\.0\.0\.1:\d+)\n/;

function startEngine(t: TestContext, args: string[], env: Record<string, string> = {}): Promise<string> {
  const child: ChildProcess = spawn(
    process.execPath,
    ['--import', 'tsx', '--input-type=module', '-e', SCRIPT, '--', '--sim', '--port', '0', ...args],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    },
  );
  const exited = new Promise<void>((resolve) => child.on('close', () => resolve()));
  t.after(() => {
    child.kill('SIGTERM');
    return exited;
  });
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line: ${out}`)), 30_000);
    child.stderr?.on('data', (c: Buffer) => (out += c.toString()));
    child.stdout?.on('data', (c: Buffer) => {
      out += c.toString();
      const m = LINE.exec(out);
      if (m?.[1]) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`engine exited: ${out}`));
    });
  });
}

async function call(url: string, path: string, body?: unknown, key?: string): Promise<{ status: number; json: any }> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  const res = await fetch(
    url + path,
    body === undefined ? { headers } : { method: 'POST', headers, body: JSON.stringify(body) },
  );
  const text = await res.text();
  try {
    return { status: res.status, json: JSON.parse(text) };
  } catch {
    return { status: res.status, json: text };
  }
}

test('vLLM: --engine-version, --max-logprobs, --enable-prompt-tokens-details, --batch-noise; VLLM_USE_V2_MODEL_RUNNER=1 and VLLM_BATCH_INVARIANT=1 from the environment', async (t) => {
  const url = await startEngine(
    t,
    [
      '--api',
      'vllm',
      '--engine-version',
      '0.21.0',
      '--max-logprobs',
      '3',
      '--enable-prompt-tokens-details',
      '--batch-noise',
      '0.05',
      '--token-delay',
      '2',
    ],
    {
      VLLM_USE_V2_MODEL_RUNNER: '1',
      VLLM_BATCH_INVARIANT: '1',
    },
  );
  assert.deepEqual((await call(url, '/version')).json, { version: '0.21.0' });
  const prompt = [5, 9, 17, 33, 65, 100, 7];
  const over = await call(url, '/v1/completions', { prompt, max_tokens: 1, logprobs: 4 });
  assert.equal(
    over.json.error.message,
    'Requested sample logprobs of 4, which is greater than max allowed: 3 (parameter=logprobs, value=4)',
  );
  const scored = await call(url, '/v1/completions', { prompt, max_tokens: 1, prompt_logprobs: 3 });
  assert.deepEqual(scored.json.usage.prompt_tokens_details, { cached_tokens: 0 });
  for (let i = 1; i < prompt.length; i++)
    assert.deepEqual(
      Object.keys(scored.json.choices[0].prompt_logprobs[i]),
      [String(prompt[i])],
      'V2 runner: no top-k',
    );
  const body = { prompt, max_tokens: 6, temperature: 0, logprobs: 1 };
  const solo = (await call(url, '/v1/completions', body)).json.choices[0].logprobs.token_logprobs;
  const crowd = await Promise.all(Array.from({ length: 4 }, () => call(url, '/v1/completions', body)));
  for (const r of crowd)
    assert.deepEqual(r.json.choices[0].logprobs.token_logprobs, solo, 'batch-invariant: no batch noise');
});

test('SGLang: --api-key, --admin-api-key, --enable-cache-report, --enable-deterministic-inference, --engine-version', async (t) => {
  const url = await startEngine(t, [
    '--api',
    'sglang',
    '--api-key',
    'k',
    '--admin-api-key',
    'a',
    '--enable-cache-report',
    '--enable-deterministic-inference',
    '--engine-version',
    '0.5.4',
  ]);
  assert.equal((await call(url, '/server_info')).status, 401);
  const info = (await call(url, '/server_info', undefined, 'k')).json;
  assert.equal(info.version, '0.5.4');
  assert.equal(info.enable_deterministic_inference, true);
  assert.equal(info.enable_cache_report, true);
  assert.equal((await call(url, '/flush_cache', {}, 'k')).status, 401, 'the plain key is refused on the admin route');
  assert.equal((await call(url, '/flush_cache', {}, 'a')).status, 200);
  assert.equal((await call(url, '/v1/tokenize', { messages: [{ role: 'user', content: 'hi' }] }, 'k')).status, 200);
  const body = { prompt: 'The cache holds the key and the value', max_tokens: 1 };
  assert.equal((await call(url, '/v1/completions', body, 'k')).json.usage.prompt_tokens_details, null);
  assert.ok((await call(url, '/v1/completions', body, 'k')).json.usage.prompt_tokens_details.cached_tokens > 0);
});

test('--lora serves adapters with their own knobs; /v1/models lists them; a bad --lora is a usage error', async (t) => {
  const url = await startEngine(t, [
    '--api',
    'vllm',
    '--model-id',
    'm',
    '--lora',
    'a1=/srv/a1',
    '--lora',
    'a3,prompt-without-adapter,spec-decode-shift=0.5',
  ]);
  const models = await call(url, '/v1/models');
  assert.deepEqual(
    models.json.data.map((d: { id: string; root: string; parent: string | null }) => [d.id, d.root, d.parent]),
    [
      ['m', 'm', null],
      ['a1', '/srv/a1', 'm'],
      ['a3', '/adapters/a3', 'm'],
    ],
  );
  const res = await call(url, '/v1/completions', { model: 'a3', prompt: 'x', max_tokens: 2 });
  assert.equal(res.status, 200);
  assert.equal(res.json.model, 'a3');
  assert.equal((await call(url, '/v1/completions', { model: 'a2', prompt: 'x', max_tokens: 1 })).status, 404);
});

test('parseLoraSpec: names, paths, knobs in either case; unknown knobs and bad values named', async () => {
  const { parseLoraSpec } = await import('../src/cli.js');
  assert.deepEqual(parseLoraSpec('a3=/p,promptWithoutAdapter,stale-buffer=0.5,zero-decode-logprobs=false'), {
    id: 'a3',
    path: '/p',
    promptWithoutAdapter: true,
    staleBuffer: 0.5,
    zeroDecodeLogprobs: false,
  });
  assert.throws(() => parseLoraSpec('a3,warp=1'), /--lora a3: unknown knob 'warp'/);
  assert.throws(() => parseLoraSpec('a3,spec-decode-shift=x'), /specDecodeShift: expected a number/);
  assert.throws(() => parseLoraSpec('=p'), /--lora: expected NAME/);
});

/**
 * The llama.cpp engine's CLI (`logprobe engine --llama`, `logprobe-engine --llama`) as the demo and e2e tests use it: one listening line, real llama.cpp
 * logprobs over HTTP, bitwise equal between two separate clean processes, moved by a `--fault`,
 * and a clean exit on SIGTERM. Runs the TypeScript CLI through tsx, so it needs no build.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { withoutEval } from '../src/llama/runtime.js';

const CLI = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
const SCRIPT = `import { runEngineCli } from ${JSON.stringify(CLI)}; process.exitCode = await runEngineCli(process.argv.slice(1));`;
const LINE = /^logprobe engine \(llama\) listening on (http:\/\/127\.0\.0\.1:\d+)\n$/;

interface Engine {
  readonly url: string;
  stop(): Promise<number | null>;
}

function startEngine(args: string[]): Promise<Engine> {
  const child: ChildProcess = spawn(
    process.execPath,
    ['--import', 'tsx', '--input-type=module', '-e', SCRIPT, '--', '--llama', '--port', '0', '--threads', '1', ...args],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no listening line: ${out}`));
    }, 30_000);
    child.stderr?.on('data', (c: Buffer) => (out += c.toString()));
    child.stdout?.on('data', (c: Buffer) => {
      out += c.toString();
      const m = out.match(LINE);
      if (m?.[1]) {
        clearTimeout(timer);
        resolve({ url: m[1], stop: () => (child.kill('SIGTERM'), exited) });
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`engine exited with ${code}: ${out}`));
    });
  });
}

interface Logprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Array<Record<string, number>>;
}

async function complete(url: string): Promise<Logprobs> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'm',
      prompt: 'Once upon a time, in a small village by the sea,',
      max_tokens: 16,
      temperature: 0,
      logprobs: 5,
    }),
  });
  assert.equal(res.status, 200);
  const body = (await res.json()) as { choices: Array<{ logprobs: Logprobs }> };
  const lp = body.choices[0]?.logprobs;
  assert.ok(lp);
  return lp;
}

test('two clean engine processes agree bit for bit; a zeroed layer moves logprobs by nats', async (t) => {
  const engines = await Promise.all([
    startEngine(['--seed', '1']),
    startEngine(['--seed', '1']),
    startEngine(['--seed', '1', '--fault', 'zero-layer:1']),
  ]);
  t.after(async () => {
    for (const e of engines) await e.stop();
  });
  const [a, b, bad] = await Promise.all(engines.map((e) => complete(e.url)));
  assert.ok(a && b && bad);
  assert.equal(a.tokens.length, 16);
  assert.deepEqual(b, a);
  // Position 0 shares its context on both sides: compare the tokens both top-5 lists hold.
  const first = a.top_logprobs[0] ?? {};
  const moved = Object.entries(bad.top_logprobs[0] ?? {})
    .filter(([tok]) => tok in first)
    .map(([tok, lp]) => Math.abs(lp - (first[tok] ?? lp)));
  const shift = Math.max(Math.abs((bad.token_logprobs[0] ?? 0) - (a.token_logprobs[0] ?? 0)), ...moved);
  assert.ok(shift > 0.5, `zero-layer:1 moved the first step by ${shift}`);
  const codes = await Promise.all(engines.map((e) => e.stop()));
  assert.deepEqual(codes, [0, 0, 0]);
});

async function completion(
  url: string,
  prompt: string,
): Promise<{ probs: Array<{ id: number; logprob: number }>; promptN: number }> {
  const res = await fetch(`${url}/completion`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, n_predict: 4, n_probs: 3, temperature: 0 }),
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('server'), 'llama.cpp');
  const body = (await res.json()) as {
    completion_probabilities: Array<{ id: number; logprob: number }>;
    timings: { prompt_n: number };
  };
  return {
    probs: body.completion_probabilities.map((p) => ({ id: p.id, logprob: p.logprob })),
    promptN: body.timings.prompt_n,
  };
}

test('--api llamacpp --fault cache-hit:3: a cold request agrees with a clean engine, its warm repeat does not; --prefix-cache off keeps it clean', async (t) => {
  const engines = await Promise.all([
    startEngine(['--seed', '1', '--api', 'llamacpp']),
    startEngine(['--seed', '1', '--api', 'llamacpp', '--fault', 'cache-hit:3']),
    startEngine(['--seed', '1', '--api', 'llamacpp', '--fault', 'cache-hit:3', '--prefix-cache', 'off']),
  ]);
  t.after(async () => {
    for (const e of engines) await e.stop();
  });
  const [clean, faulty, off] = engines.map((e) => e.url) as [string, string, string];
  const prompt = 'Once upon a time, in a small village by the sea,';
  const ref = await completion(clean, prompt);
  const cold = await completion(faulty, prompt);
  const warm = await completion(faulty, prompt);
  assert.deepEqual(cold.probs, ref.probs);
  assert.equal(warm.promptN, 1, 'the repeat reused all but the last prompt token');
  assert.notDeepEqual(warm.probs, ref.probs);
  for (let r = 0; r < 2; r++) {
    const got = await completion(off, prompt);
    assert.deepEqual(got.probs, ref.probs);
    assert.ok(got.promptN > 1, 'no reuse with --prefix-cache off');
  }
});

test('the binary check forked by node-llama-cpp gets execArgv without eval flags (engines started with node -e)', () => {
  assert.deepEqual(withoutEval(['--import', 'tsx', '--input-type=module', '-e', 'code']), ['--import', 'tsx']);
  assert.deepEqual(withoutEval(['--print', 'x', '--eval=y', '--input-type', 'module', '--enable-source-maps']), [
    '--enable-source-maps',
  ]);
});

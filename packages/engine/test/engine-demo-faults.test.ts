/**
 * The demo's new faults: decode-state:I and cache-hit:I run as themselves on llama.cpp and as
 * decode-shift / cache-hit on the simulated engines (and back); a cache-hit plan turns the
 * prefix cache on for both engines, so the candidate's warm repeats move while the baseline's
 * stay exact. The CLI refuses the new switches where they do not apply.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runEngineCli } from '../src/cli.js';
import { chooseEngines } from '../src/demo/engines.js';
import { needsPrefixCache, planFault, SIM_DEMO_FAULTS } from '../src/demo/faults.js';
import { FAULT_FORMS } from '../src/llama/faults.js';
import { post } from './helpers/engine-sim.js';

test('the plan: decode-state ↔ decode-shift, cache-hit ↔ cache-hit; the old names unchanged', () => {
  assert.ok(FAULT_FORMS.includes('decode-state:I') && FAULT_FORMS.includes('cache-hit:I'));
  assert.deepEqual(SIM_DEMO_FAULTS.slice(0, 6), ['state-shift', 'subtle', 'none', 'noise', 'local', 'tokenizer']);
  const table: Array<[string, string | null, string]> = [
    ['decode-state:3', 'decode-state:3', 'decode-shift'],
    ['cache-hit:3', 'cache-hit:3', 'cache-hit'],
    ['cache-hit:0,flash-attention', 'cache-hit:0,flash-attention', 'cache-hit'],
    ['decode-shift', 'decode-state:3', 'decode-shift'],
    ['cache-hit', 'cache-hit:3', 'cache-hit'],
    ['zero-layer:1', 'zero-layer:1', 'state-shift'],
    ['drop-prompt-token:3', 'drop-prompt-token:3', 'state-shift'],
    ['local', null, 'local'],
  ];
  for (const [requested, llama, sim] of table)
    assert.deepEqual(planFault(requested), { requested, llama, sim }, requested);
  assert.equal(needsPrefixCache(planFault('cache-hit:2')), true);
  assert.equal(needsPrefixCache(planFault('cache-hit')), true);
  assert.equal(needsPrefixCache(planFault('decode-state:2')), false);
  assert.equal(needsPrefixCache(planFault('none')), false);
});

test('the simulated cache-hit demo: both engines cache; a cold request agrees, its warm repeat moves on the candidate only', async () => {
  const engines = await chooseEngines({ choice: 'sim', plan: planFault('cache-hit'), notice: () => {} });
  try {
    const body = { prompt: 'The cache holds the key and the value', max_tokens: 6, temperature: 0, logprobs: 3 };
    const [b1, c1] = await Promise.all([
      post(engines.baselineUrl, '/v1/completions', body),
      post(engines.candidateUrl, '/v1/completions', body),
    ]);
    assert.deepEqual(
      c1.json.choices[0].logprobs.token_logprobs,
      b1.json.choices[0].logprobs.token_logprobs,
      'cold: equal',
    );
    const [b2, c2] = await Promise.all([
      post(engines.baselineUrl, '/v1/completions', body),
      post(engines.candidateUrl, '/v1/completions', body),
    ]);
    assert.deepEqual(b2.json.choices[0].logprobs, b1.json.choices[0].logprobs, 'the baseline is exact warm');
    assert.notDeepEqual(
      c2.json.choices[0].logprobs.token_logprobs,
      c1.json.choices[0].logprobs.token_logprobs,
      'the candidate moved warm',
    );
  } finally {
    await engines.close();
  }
});

test('the simulated decode-shift demo: the first step agrees, later steps move, without any cache', async () => {
  const engines = await chooseEngines({ choice: 'sim', plan: planFault('decode-shift'), notice: () => {} });
  try {
    const body = { prompt: 'The state of the model', max_tokens: 6, temperature: 0, logprobs: 3 };
    const [b, c] = await Promise.all([
      post(engines.baselineUrl, '/v1/completions', body),
      post(engines.candidateUrl, '/v1/completions', body),
    ]);
    const lb = b.json.choices[0].logprobs.token_logprobs as number[];
    const lc = c.json.choices[0].logprobs.token_logprobs as number[];
    assert.equal(lc[0], lb[0]);
    assert.notDeepEqual(lc.slice(1), lb.slice(1));
  } finally {
    await engines.close();
  }
});

async function usage(argv: string[]): Promise<{ code: number; err: string }> {
  let err = '';
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array) => {
    err += String(chunk);
    return true;
  }) as typeof process.stderr.write;
  try {
    return { code: await runEngineCli(argv), err };
  } finally {
    process.stderr.write = write;
  }
}

test('--help lists the engines\u2019 switches', async () => {
  let out = '';
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array) => {
    out += String(chunk);
    return true;
  }) as typeof process.stdout.write;
  try {
    assert.equal(await runEngineCli(['--help']), 0);
  } finally {
    process.stdout.write = write;
  }
  for (const flag of [
    '--engine-version',
    '--max-logprobs',
    '--v2-model-runner',
    '--batch-invariant',
    '--batch-noise',
    '--enable-cache-report',
    '--enable-deterministic-inference',
    '--api-key',
    '--admin-api-key',
  ]) {
    assert.ok(out.includes(flag), flag);
  }
});

test('the CLI refuses a bad --api, a bad --prefix-cache and the engines\u2019 switches under another api', async () => {
  const cases: Array<[string[], RegExp]> = [
    [['--sim', '--api', 'tgi'], /--api: expected one of logprobe, vllm, sglang, llamacpp, openai, got 'tgi'/],
    [['--sim', '--prefix-cache', 'yes'], /--prefix-cache: expected on or off/],
    [['--sim', '--api', 'sglang', '--dev-mode'], /--dev-mode applies to --api vllm only/],
    [['--sim', '--slot-save-path', '/tmp'], /--slot-save-path applies to --api llamacpp only/],
    [['--sim', '--api', 'llamacpp', '--enable-prompt-tokens-details'], /applies to --api vllm only/],
    [['--sim', '--decode-shift', 'x'], /--decode-shift: expected a number/],
    [['--sim', '--api', 'sglang', '--max-logprobs', '5'], /--max-logprobs applies to --api vllm only/],
    [['--sim', '--api', 'vllm', '--max-logprobs', '-2'], /--max-logprobs: must be ≥ -1/],
    [['--sim', '--api', 'sglang', '--v2-model-runner'], /--v2-model-runner applies to --api vllm only/],
    [['--sim', '--api', 'sglang', '--batch-invariant'], /--batch-invariant applies to --api vllm only/],
    [['--sim', '--api', 'vllm', '--enable-cache-report'], /--enable-cache-report applies to --api sglang only/],
    [
      ['--sim', '--api', 'vllm', '--enable-deterministic-inference'],
      /--enable-deterministic-inference applies to --api sglang only/,
    ],
    [['--sim', '--api', 'vllm', '--api-key', 'k'], /--api-key applies to --api sglang only/],
    [['--sim', '--api', 'llamacpp', '--admin-api-key', 'k'], /--admin-api-key applies to --api sglang only/],
    [
      ['--sim', '--api', 'llamacpp', '--engine-version', '0.11.0'],
      /--engine-version applies to --api vllm and sglang only/,
    ],
    [
      ['--sim', '--api', 'vllm', '--engine-version', 'latest'],
      /--engine-version: expected a release number such as 0.11.0, got 'latest'/,
    ],
    [['--llama', '--batch-noise', '0.1'], /--batch-noise applies to --sim only/],
    [['--sim', '--batch-noise', '-1'], /--batch-noise: must be ≥ 0/],
  ];
  for (const [argv, message] of cases) {
    const { code, err } = await usage(argv);
    assert.equal(code, 2, argv.join(' '));
    assert.match(err, message);
  }
});

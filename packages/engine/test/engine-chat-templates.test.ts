/**
 * `--chat-template NAME` (llama-server's flag; llama.cpp's built-in templates as
 * `llm_chat_apply_template` in src/llama-chat.cpp writes them): the same chat request renders to
 * other prompt tokens, on the llama engine (a candidate with `--chat-template llama2` against
 * the default template) and on the simulated one, and `/apply-template` and `/props` say so.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { applyChatTemplate } from '../src/chat-template.js';
import { runEngineCli } from '../src/cli.js';
import { startEngineServer } from '../src/openai-server.js';
import { get, post, startSim } from './helpers/engine-sim.js';

const MESSAGES = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Hello' },
  { role: 'assistant', content: 'Hi.' },
  { role: 'user', content: 'How are you?' },
];

test('the built-in templates render as llama.cpp writes them', () => {
  assert.equal(
    applyChatTemplate(MESSAGES, {}, 'llama2'),
    '[INST] Be brief.\nHello [/INST]Hi.</s>[INST] How are you? [/INST]',
  );
  assert.equal(
    applyChatTemplate(MESSAGES, {}, 'llama2-sys'),
    '[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHello [/INST]Hi.</s>[INST] How are you? [/INST]',
  );
  assert.equal(
    applyChatTemplate(MESSAGES, {}, 'chatml'),
    '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi.<|im_end|>\n' +
      '<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n',
  );
  assert.equal(
    applyChatTemplate(MESSAGES, { addGenerationPrompt: false }, 'chatml').endsWith('How are you?<|im_end|>\n'),
    true,
  );
  assert.equal(
    applyChatTemplate(MESSAGES, {}, 'gemma'),
    '<start_of_turn>user\nBe brief.\n\nHello<end_of_turn>\n<start_of_turn>model\nHi.<end_of_turn>\n' +
      '<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n',
  );
  // The default stays the plain template.
  assert.equal(
    applyChatTemplate(MESSAGES),
    'system: Be brief.\nuser: Hello\nassistant: Hi.\nuser: How are you?\nassistant:',
  );
});

test('an unknown template name is refused by the server options and the CLI', async () => {
  const { createSimModel } = await import('../src/sim/model.js');
  await assert.rejects(
    startEngineServer({ model: createSimModel(), chatTemplate: 'nope' }),
    /chatTemplate must be one of chatml, llama2/,
  );
  const err: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((s: string) => (err.push(String(s)), true)) as typeof process.stderr.write;
  try {
    assert.equal(await runEngineCli(['--sim', '--chat-template', 'nope']), 2);
  } finally {
    process.stderr.write = write;
  }
  assert.match(err.join(''), /--chat-template: expected one of chatml, llama2/);
});

test('sim, every API: the chat prompt follows the template (vLLM /tokenize, usage.prompt_tokens)', async (t) => {
  const plain = await startSim(t, { seed: 3 }, { api: 'vllm' });
  const llama2 = await startSim(t, { seed: 3 }, { api: 'vllm', chatTemplate: 'llama2' });
  const ids = async (url: string): Promise<number[]> =>
    (await post(url, '/tokenize', { messages: MESSAGES })).json.tokens as number[];
  const [a, b] = [await ids(plain.url), await ids(llama2.url)];
  assert.notDeepEqual(a, b);
  const sim = (await import('../src/sim/model.js')).createSimModel({ seed: 3 });
  assert.deepEqual(b, sim.tokenize(applyChatTemplate(MESSAGES, {}, 'llama2')));
  const chat = async (url: string): Promise<number> =>
    (await post(url, '/v1/chat/completions', { model: 'm', messages: MESSAGES, max_tokens: 1 })).json.usage
      .prompt_tokens as number;
  assert.equal(await chat(plain.url), a.length);
  assert.equal(await chat(llama2.url), b.length);
});

const CLI = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
const SCRIPT = `import { runEngineCli } from ${JSON.stringify(CLI)}; process.exitCode = await runEngineCli(process.argv.slice(1));`;
const LINE = /logprobe engine \(llama\) listening on (http:\/\/127\.0\.0\.1:\d+)\n/;

function startLlama(args: string[]): Promise<{ url: string; stop(): Promise<number | null> }> {
  const child: ChildProcess = spawn(
    process.execPath,
    ['--import', 'tsx', '--input-type=module', '-e', SCRIPT, '--', '--llama', '--port', '0', '--threads', '1', ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no listening line: ${out}`));
    }, 60_000);
    child.stderr?.on('data', (c: Buffer) => (out += c.toString()));
    child.stdout?.on('data', (c: Buffer) => {
      out += c.toString();
      const m = LINE.exec(out);
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

test('llama-server with --chat-template llama2 against its default: other prompt tokens for one chat request', async (t) => {
  const [candidate, baseline] = await Promise.all([
    startLlama(['--seed', '1', '--api', 'llamacpp', '--chat-template', 'llama2']),
    startLlama(['--seed', '1', '--api', 'llamacpp']),
  ]);
  t.after(async () => {
    await Promise.all([candidate.stop(), baseline.stop()]);
  });
  const messages = [{ role: 'user', content: 'The capital of France is' }];
  const cand = await post(candidate.url, '/apply-template', { messages });
  const base = await post(baseline.url, '/apply-template', { messages });
  assert.equal(cand.json.prompt, '[INST] The capital of France is [/INST]');
  assert.equal(base.json.prompt, 'user: The capital of France is\nassistant:');
  const tok = async (url: string, content: string): Promise<number[]> =>
    (await post(url, '/tokenize', { content, add_special: true })).json.tokens as number[];
  const [ct, bt] = [await tok(candidate.url, cand.json.prompt), await tok(baseline.url, base.json.prompt)];
  assert.notDeepEqual(ct, bt);
  // /props reports the template in force.
  assert.equal((await get(candidate.url, '/props')).json.chat_template, 'llama2');
  assert.match((await get(baseline.url, '/props')).json.chat_template as string, /message\.role/);
  // The chat route reads the same prompt: its usage counts the tokens /tokenize gave.
  const chat = async (url: string): Promise<number> =>
    (await post(url, '/v1/chat/completions', { messages, max_tokens: 1, temperature: 0 })).json.usage
      .prompt_tokens as number;
  assert.equal(await chat(candidate.url), ct.length);
  assert.equal(await chat(baseline.url), bt.length);
});

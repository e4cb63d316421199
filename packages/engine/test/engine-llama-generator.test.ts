import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildModel, ensureModelFile, sha256 } from '../src/llama/generate-model.js';
import { toHalfBits } from '../src/llama/gguf.js';
import { buildVocab } from '../src/llama/vocab.js';

const tempDir = (): string => mkdtempSync(join(tmpdir(), 'logprobe-gguf-'));

test('the same seed generates a bit-identical model file, in memory and on disk', async () => {
  const a = buildModel(7);
  const b = buildModel(7);
  assert.equal(sha256(a), sha256(b));
  const [p1, p2] = await Promise.all([
    ensureModelFile({ seed: 7, dir: tempDir() }),
    ensureModelFile({ seed: 7, dir: tempDir() }),
  ]);
  assert.equal(sha256(readFileSync(p1)), sha256(a));
  assert.equal(sha256(readFileSync(p2)), sha256(a));
});

test('another seed or a fault variant gives a different file', () => {
  const clean = sha256(buildModel(7));
  assert.notEqual(sha256(buildModel(8)), clean);
  assert.notEqual(sha256(buildModel(7, { weights: 'f32', zeroAttentionOutputLayer: 1 })), clean);
  assert.notEqual(sha256(buildModel(7, { weights: 'f32', ffnDownNoise: 0.01 })), clean);
});

test('the model is a ~1.5 MB GGUF v3 file; the f16 variant is about half', () => {
  const f32 = buildModel(1);
  const f16 = buildModel(1, { weights: 'f16' });
  assert.equal(f32.subarray(0, 4).toString('ascii'), 'GGUF');
  assert.equal(f32.readUInt32LE(4), 3);
  assert.ok(f32.length > 1_000_000 && f32.length < 2_000_000, `size ${f32.length}`);
  assert.ok(f16.length > f32.length * 0.45 && f16.length < f32.length * 0.55, `f16 size ${f16.length}`);
});

test('concurrent writers of the same file (as from racing processes) leave one complete file and no temp files', async () => {
  const dir = tempDir();
  const paths = await Promise.all([1, 2, 3, 4].map(() => ensureModelFile({ seed: 3, dir })));
  assert.equal(new Set(paths).size, 1);
  assert.deepEqual(readdirSync(dir), [paths[0]?.split('/').pop()]);
  assert.equal(sha256(readFileSync(paths[0] ?? '')), sha256(buildModel(3)));
});

test('the vocabulary is byte-level: 256 bytes, merges built from earlier tokens, BOS and EOS', () => {
  const v = buildVocab();
  assert.ok(v.tokens.length >= 280 && v.tokens.length <= 300, `${v.tokens.length} tokens`);
  assert.equal(new Set(v.tokens).size, v.tokens.length, 'token strings are unique');
  assert.equal(v.tokens[0x20], 'Ġ');
  assert.equal(v.tokens[0x0a], 'Ċ');
  for (const merge of v.merges) {
    const [left, right] = merge.split(' ');
    assert.ok(left !== undefined && v.tokens.includes(left) && right !== undefined && v.tokens.includes(right), merge);
    assert.ok(v.tokens.includes(`${left}${right}`), `${merge} produces a token`);
  }
  assert.equal(v.tokens[v.eosId], '<|endoftext|>');
  assert.deepEqual(Array.from(v.bytes[v.tokens.indexOf('Ġthe')] ?? []), Array.from(Buffer.from(' the')));
});

test('f32 → f16 rounds to nearest even and handles overflow and subnormals', () => {
  const cases: Array<[number, number]> = [
    [0, 0x0000],
    [-0, 0x8000],
    [1, 0x3c00],
    [-2, 0xc000],
    [65504, 0x7bff],
    [65520, 0x7c00], // halfway to the next exponent rounds up to Inf
    [1e6, 0x7c00],
    [2 ** -24, 0x0001], // smallest subnormal
    [2 ** -25, 0x0000], // a tie rounds to even (zero)
    [1 + 2 ** -11, 0x3c00], // a tie rounds to even (down)
    [1 + 3 * 2 ** -11, 0x3c02], // a tie rounds to even (up)
    [Infinity, 0x7c00],
  ];
  for (const [value, bits] of cases) assert.equal(toHalfBits(value), bits, `${value}`);
  assert.equal(toHalfBits(NaN) & 0x7c00, 0x7c00);
  assert.notEqual(toHalfBits(NaN) & 0x03ff, 0);
});

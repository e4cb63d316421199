import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

// `logprobe serve` and the Docker image (which prunes dev dependencies) must never load
// node-llama-cpp: only type imports and dynamic import() may reach it or the llama engine.
const root = join(import.meta.dirname, '..');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/** Static (non-type) import/export-from specifiers of a TypeScript source. */
function staticImports(text: string): string[] {
  const out: string[] = [];
  const re = /^\s*(import|export)\s+(type\s+)?[^'";]*?\bfrom\s+['"]([^'"]+)['"]|^\s*import\s+['"]([^'"]+)['"]/gm;
  for (const m of text.matchAll(re)) {
    if (m[2]) continue;
    const spec = m[3] ?? m[4];
    if (spec) out.push(spec);
  }
  return out;
}

test('node-llama-cpp is imported statically nowhere, and the llama engine only from itself', () => {
  const offenders: string[] = [];
  for (const file of sources(join(root, 'src'))) {
    const rel = relative(root, file);
    const inLlama = rel.startsWith(join('src', 'engine', 'llama'));
    for (const spec of staticImports(readFileSync(file, 'utf8'))) {
      if (spec === 'node-llama-cpp' || spec.startsWith('node-llama-cpp/')) offenders.push(`${rel} → ${spec}`);
      if (!inLlama && /(^|\/)llama\//.test(spec)) offenders.push(`${rel} → ${spec}`);
    }
  }
  assert.deepEqual(offenders, []);
});

test('the import scan sees static imports and skips type-only ones', () => {
  const text = "import type { A } from 'node-llama-cpp';\nimport { b } from './llama/model.js';\nconst c = await import('node-llama-cpp');\n";
  assert.deepEqual(staticImports(text), ['./llama/model.js']);
});

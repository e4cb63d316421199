import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';

// The engines' entry (`@logprobe/engine`, what the demo and `logprobe engine --sim` load) must
// never load node-llama-cpp: only type imports and dynamic import() may reach it or the llama
// engine, so the simulated engine runs where llama.cpp cannot.
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

test('node-llama-cpp is imported statically nowhere, and nothing the package entry loads reaches it', () => {
  const offenders: string[] = [];
  for (const file of sources(join(root, 'src'))) {
    const rel = relative(root, file);
    for (const spec of staticImports(readFileSync(file, 'utf8'))) {
      if (spec === 'node-llama-cpp' || spec.startsWith('node-llama-cpp/')) offenders.push(`${rel} → ${spec}`);
    }
  }
  assert.deepEqual(offenders, []);

  // Everything the entry loads statically: pure llama helpers (fault parsing, the model
  // generator) may be in it; the modules that load llama.cpp (runtime, model) may not.
  const seen = new Set<string>();
  const queue = [join(root, 'src', 'index.ts')];
  while (queue.length > 0) {
    const file = queue.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    for (const spec of staticImports(readFileSync(file, 'utf8'))) {
      if (spec.startsWith('.')) queue.push(join(dirname(file), spec.replace(/\.js$/, '.ts')));
    }
  }
  const loaded = [...seen].map((f) => relative(root, f));
  for (const native of ['runtime.ts', 'model.ts', 'sequence.ts']) {
    assert.ok(
      !loaded.includes(join('src', 'llama', native)),
      `src/llama/${native} is loaded statically by the package entry`,
    );
  }
  assert.ok(
    loaded.includes(join('src', 'openai-server.ts')) && loaded.includes(join('src', 'cli.ts')),
    'the scan follows the imports',
  );
});

test('the import scan sees static imports and skips type-only ones', () => {
  const text =
    "import type { A } from 'node-llama-cpp';\nimport { b } from './llama/model.js';\nconst c = await import('node-llama-cpp');\n";
  assert.deepEqual(staticImports(text), ['./llama/model.js']);
});

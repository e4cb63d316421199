import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

// The product (`src/`, what `dist`, the npm package and the Docker image carry) never imports
// the test engines or llama.cpp statically: `logprobe demo` and `logprobe engine` load
// `@logprobe/engine` with a dynamic import (src/cli/engines.ts) and say so in one line when it is
// not installed; every other command runs without it.
const root = join(import.meta.dirname, '..');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

test('no product source imports @logprobe/engine or node-llama-cpp but as a type or dynamically', () => {
  const offenders: string[] = [];
  const re = /^\s*(import|export)\s+(type\s+)?[^'";]*?\bfrom\s+['"]([^'"]+)['"]|^\s*import\s+['"]([^'"]+)['"]/gm;
  for (const file of sources(join(root, 'src'))) {
    for (const m of readFileSync(file, 'utf8').matchAll(re)) {
      const spec = m[3] ?? m[4] ?? '';
      if (!m[2] && (spec.startsWith('@logprobe/engine') || spec.startsWith('node-llama-cpp')))
        offenders.push(`${relative(root, file)} → ${spec}`);
    }
  }
  assert.deepEqual(offenders, []);
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
  };
  assert.equal(pkg.dependencies['@logprobe/engine'], undefined, 'the engines are a dev dependency');
  assert.equal(pkg.dependencies['node-llama-cpp'], undefined);
  assert.ok(pkg.devDependencies['@logprobe/engine']);
});

test('npm pack: the product package carries dist, bin and config, and none of the engines', async () => {
  const { execFileSync } = await import('node:child_process');
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8' });
  const [info] = JSON.parse(out) as Array<{ files: Array<{ path: string }> }>;
  const files = info!.files.map((f) => f.path);
  assert.ok(
    files.includes('dist/cli/main.js') &&
      files.includes('bin/logprobe.js') &&
      files.includes('config/logprobe.example.yaml'),
  );
  assert.ok(
    ['strip', 'report', 'live'].every((s) => files.includes(`dist/browser/${s}.js`)),
    'the pages inline their scripts from dist/browser',
  );
  // The engine package's modules: its directories and files, wherever they would land.
  const engines = files.filter((f) =>
    /packages\/|\/(sim|llama|demo\/engines?)\/|openai-server|gguf|generate-model|engine-process/.test(f),
  );
  assert.deepEqual(engines, [], 'no engine module in the product package');
  assert.ok(files.includes('dist/cli/engines.js'), 'the thin loader that imports them on demand');
});

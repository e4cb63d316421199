/**
 * The direction of src/'s imports (ARCHITECTURE.md "Layers" refers to this list): a module
 * imports only from its own layer or the ones below it. The layers, bottom first; each entry is a
 * folder (`core/`), and a folder is in one layer whole: a file that belongs lower moves to a
 * folder of that layer. Type-only imports count too: a type is a dependency as much as a value.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export const LAYERS: readonly (readonly string[])[] = [
  // The pure core, the error catalogue, the pages' scripts: they import nothing of src/ outside themselves.
  ['errors/', 'core/', 'browser/'],
  // Parts every runtime piece uses: the config, the metrics, the logger and its redaction rule.
  ['config/', 'metrics/', 'log/'],
  // The two transports: the client path, and a backend's client (its pool, copies, caps, engine profile, health).
  ['backend/', 'proxy/'],
  // One pair of a comparison: its record, its pipeline (send, classify, score, repeat).
  ['pair/'],
  // The online mirror: queue, sampling, detectors, calibration, alerts.
  ['mirror/'],
  // What reads and writes mirrored pairs: captures, the start-up probe, the offline report.
  ['capture/', 'probe/', 'report/'],
  // The live page's feed and page, the replay gate.
  ['live/', 'replay/'],
  // The admin port, the canary probes (they send through the pair pipeline, against a golden reference),
  // and the mirror's worker thread (its entry wires capture, the live feed, the probe, the canaries) with its handle on the proxy's thread.
  ['admin/', 'canary/', 'worker/'],
  // One process of serve.
  ['server/'],
  // Several processes (the cluster), the demo.
  ['cluster/', 'demo/'],
  // The commands.
  ['cli/'],
];

const SRC = fileURLToPath(new URL('../src/', import.meta.url));

/** The layer of a file under src/ (its path relative to src/), by the folder it is in; -1 when none names it. */
export function layerOf(path: string): number {
  return LAYERS.findIndex((entries) => entries.some((folder) => path.startsWith(folder)));
}

/** The relative imports of a TypeScript source (static, re-exports, dynamic with a literal). */
export function importsOf(source: string): string[] {
  const out: string[] = [];
  const re =
    /(?:^|[;\s])(?:import|export)\s(?:[^'";]*?\sfrom\s)?['"](\.{1,2}\/[^'"]+)['"]|\bimport\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g;
  for (const m of source.matchAll(re)) out.push((m[1] ?? m[2])!);
  return out;
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? sources(join(dir, d.name)) : d.name.endsWith('.ts') ? [join(dir, d.name)] : [],
  );
}

/** Every import of src/ that goes up a layer, as `from → to (layer → layer)`. */
export function upwardImports(files: readonly { path: string; source: string }[]): string[] {
  const bad: string[] = [];
  for (const { path, source } of files) {
    const from = layerOf(path);
    for (const spec of importsOf(source)) {
      const target = normalize(join(dirname(path), spec)).replace(/\.js$/, '.ts');
      if (target.startsWith('..')) continue;
      const to = layerOf(target);
      if (to > from) bad.push(`${path} → ${target} (layer ${from + 1} imports layer ${to + 1})`);
    }
  }
  return bad;
}

const files = sources(SRC).map((f) => ({
  path: relative(SRC, f).split('\\').join('/'),
  source: readFileSync(f, 'utf8'),
}));

test('the layers name folders only, each once', () => {
  const entries = LAYERS.flat();
  assert.deepEqual(
    entries.filter((e) => !e.endsWith('/')),
    [],
  );
  assert.equal(new Set(entries).size, entries.length);
});

test('every module of src/ is in a layer', () => {
  assert.ok(files.length > 100, `${files.length} sources read`);
  assert.deepEqual(
    files.filter((f) => layerOf(f.path) < 0).map((f) => f.path),
    [],
  );
});

test('no module imports from a layer above its own', () => {
  const edges = files.reduce((n, f) => n + importsOf(f.source).length, 0);
  assert.ok(edges > 300, `${edges} relative imports read`);
  assert.deepEqual(upwardImports(files), []);
});

test('the check sees an upward import, a re-export, a type-only and a dynamic import, across lines', () => {
  const bad = upwardImports([
    { path: 'core/x.ts', source: "import {\n  a,\n  b,\n} from '../mirror/mirror.js';" },
    {
      path: 'metrics/y.ts',
      source: "export { c } from '../proxy/budget.js';\nimport type { D } from '../cli/main.js';",
    },
    { path: 'config/z.ts', source: "const m = await import('../server/server.js');" },
    { path: 'cli/ok.ts', source: "import { e } from '../core/index.js';\nimport { f } from './options.js';" },
  ]);
  assert.deepEqual(bad, [
    'core/x.ts → mirror/mirror.ts (layer 1 imports layer 5)',
    'metrics/y.ts → proxy/budget.ts (layer 2 imports layer 3)',
    'metrics/y.ts → cli/main.ts (layer 2 imports layer 11)',
    'config/z.ts → server/server.ts (layer 2 imports layer 9)',
  ]);
});

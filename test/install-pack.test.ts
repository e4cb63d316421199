// logprobe installed on a user's own machine, away from the clone: the package `npm pack` makes
// of this checkout's build is installed with the README's install line into an empty prefix in a
// temporary directory (nothing of the clone around it: no node_modules up the tree, no
// NODE_PATH, no npm_* variables of a parent npm), and the installed `logprobe` — found on PATH —
// answers --version, checks a config file, and probes an engine this test starts. Its
// dependencies come from the npm registry, as a user's would; the test engines' workspace
// package must not be among them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSimModel, startEngineServer } from '@logprobe/engine';
import { readmeBlock } from './helpers/readme.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  dependencies: Record<string, string>;
};
const TARBALL = `logprobe-${PKG.version}.tgz`;

/** The environment of a shell on a machine without the clone: no variables of a parent npm or node. */
function cleanEnv(prefix: string, extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined || /^npm_/i.test(k) || k === 'NODE_OPTIONS' || k === 'NODE_PATH' || k === 'INIT_CWD') continue;
    env[k] = v;
  }
  // The prefix's bin first, then the node (and npm) running this test.
  env['PATH'] = [join(prefix, 'bin'), dirname(process.execPath), env['PATH'] ?? ''].join(delimiter);
  return { ...env, ...extra };
}

function sh(
  cmd: string,
  cwd: string,
  env: Record<string, string>,
  timeoutMs = 120_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', cmd], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${cmd} timed out\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

test('the packed tarball, installed with the README line into an empty prefix away from the clone, runs --version, serve --check-config and probe', async (t) => {
  assert.ok(existsSync(join(ROOT, 'dist', 'cli', 'run.js')), 'dist/ is built (npm run build; npm test builds first)');
  const block = readmeBlock('install');
  assert.equal(block.length, 3, block.join('\n'));
  assert.equal(block[0], 'npm ci && npm pack');
  const installLine = block[1]!;
  assert.match(installLine, new RegExp(`^npm install -g .*\\./${TARBALL.replaceAll('.', '\\.')}$`));
  assert.equal(block[2], 'logprobe --version');

  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'logprobe-install-')));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  assert.ok(!dir.startsWith(ROOT), 'the temporary directory is outside the clone');
  const prefix = join(dir, 'prefix');

  // `npm ci` has built dist/; pack that build as `npm pack` does after its prepare.
  const pack = await sh(`npm pack --ignore-scripts --json --pack-destination "${dir}"`, ROOT, cleanEnv(prefix));
  assert.equal(pack.code, 0, pack.stderr);
  const [packed] = JSON.parse(pack.stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
  assert.equal(packed!.filename, TARBALL);
  const files = packed!.files.map((f) => f.path);
  for (const f of ['bin/logprobe.js', 'dist/cli/run.js', 'dist/worker/worker.js', 'config/logprobe.example.yaml'])
    assert.ok(files.includes(f), `the tarball holds ${f}`);
  assert.deepEqual(
    files.filter((f) => /^(src|test|packages|bench|node_modules)\//.test(f)),
    [],
    'no sources, tests, workspace packages or node_modules in the tarball',
  );

  // The README's install line as written; `-g` goes to the empty prefix (npm_config_prefix), run
  // from a directory holding only the tarball.
  assert.ok(!existsSync(prefix), 'the prefix starts empty');
  const install = await sh(installLine, dir, cleanEnv(prefix, { npm_config_prefix: prefix }));
  assert.equal(install.code, 0, install.stdout + install.stderr);
  assert.match(install.stdout, /added \d+ packages?/);
  const pkgDir = join(prefix, 'lib', 'node_modules', 'logprobe');
  assert.ok(existsSync(join(pkgDir, 'dist', 'cli', 'run.js')), 'installed under the prefix');
  assert.ok(!existsSync(join(pkgDir, 'node_modules', '@logprobe', 'engine')), 'the test engines are not installed');

  const env = cleanEnv(prefix);
  const which = await sh('command -v logprobe', dir, env);
  assert.equal(which.stdout.trim(), join(prefix, 'bin', 'logprobe'), 'logprobe on PATH is the installed one');
  assert.ok(
    realpathSync(which.stdout.trim()).startsWith(pkgDir + sep),
    'the bin links into the installed package, not into the clone',
  );

  // Every production dependency loads from the installed package's own tree (a module inside the
  // package resolves them as the package's code does).
  const depsCheck = join(pkgDir, 'install-test-deps.mjs');
  writeFileSync(
    depsCheck,
    `for (const d of ${JSON.stringify(Object.keys(PKG.dependencies))}) {
  await import(d);
  console.log(d + ' ' + new URL(import.meta.resolve(d)).pathname);
}
try { import.meta.resolve('@logprobe/engine'); console.log('@logprobe/engine resolvable'); } catch { console.log('@logprobe/engine absent'); }
`,
  );
  const deps = await sh(`node "${depsCheck}"`, dir, env);
  assert.equal(deps.code, 0, deps.stderr);
  const lines = deps.stdout.trim().split('\n');
  for (const d of Object.keys(PKG.dependencies)) {
    const line = lines.find((l) => l.startsWith(`${d} `));
    assert.ok(line, `${d} resolves`);
    assert.ok(line.slice(d.length + 1).startsWith(join(pkgDir, 'node_modules') + sep), line);
  }
  assert.ok(lines.includes('@logprobe/engine absent'), deps.stdout);

  const version = await sh(block[2]!, dir, env);
  assert.equal(version.code, 0, version.stderr);
  assert.equal(version.stdout.trim(), PKG.version);

  const engine = await startEngineServer({ model: createSimModel({ seed: 11 }), api: 'vllm', concurrency: 0 });
  t.after(() => engine.close());

  writeFileSync(
    join(dir, 'logprobe.yaml'),
    `candidate:\n  url: ${engine.url}\nbaseline:\n  url: ${engine.url}\n  apiKey: \${BASELINE_API_KEY}\nmirror:\n  sampleRate: 1\n`,
  );
  const check = await sh('logprobe serve --config logprobe.yaml --check-config', dir, {
    ...env,
    BASELINE_API_KEY: 'install-test-key-0123',
  });
  assert.equal(check.code, 0, check.stdout + check.stderr);
  assert.match(check.stdout, /^# logprobe: config ok/);
  assert.match(check.stdout, new RegExp(`\\n  url: ${engine.url.replaceAll('.', '\\.')} # file\\n`));
  assert.match(check.stdout, /\n {2}sampleRate: 1 # file\n/);
  assert.match(check.stdout, /\n {2}apiKey: "\[redacted\]" # file \$\{BASELINE_API_KEY\}\n/);
  assert.doesNotMatch(check.stdout + check.stderr, /install-test-key-0123/);

  const probe = await sh(`logprobe probe ${engine.url} --config logprobe.yaml`, dir, env);
  assert.equal(probe.code, 0, probe.stdout + probe.stderr);
  assert.match(probe.stdout, new RegExp(`^${engine.url.replaceAll('.', '\\.')}: vllm 0\\.11\\.0`));
  assert.match(probe.stdout, /\nscoring \* +yes +vllm \/v1\/completions prompt_logprobs/);
  assert.match(probe.stdout, /every feature the configuration uses works/);

  // The commands that need the clone say so, and nothing else fails.
  const demo = await sh('logprobe engine --sim --port 0', dir, env, 30_000);
  assert.notEqual(demo.code, 0);
  assert.match(demo.stderr, /@logprobe\/engine/);
});

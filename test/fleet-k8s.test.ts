// The Kubernetes manifests (config/k8s/) fit together and fit logprobe: the config in the
// ConfigMap is valid and agrees with the ports, probes, volumes and alert rules; the pods run as
// non-root; the Service exposes only the public port; the capture pruner keeps the per-replica
// volume under budget without touching the file being written.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  readFileSync,
  readdirSync,
  mkdtempSync,
  mkdirSync,
  writeFileSync,
  rmSync,
  existsSync,
  utimesSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { loadConfig } from '../src/config/load.js';

type Obj = Record<string, unknown>;
interface Container {
  name: string;
  image: string;
  args?: string[];
  command?: string[];
  ports?: Array<{ name: string; containerPort: number }>;
  env?: Array<{ name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }>;
  readinessProbe?: { httpGet?: { path: string; port: string | number } };
  livenessProbe?: { httpGet?: { path: string; port: string | number } };
  lifecycle?: { preStop?: { exec?: { command: string[] } } };
  securityContext?: { allowPrivilegeEscalation?: boolean; readOnlyRootFilesystem?: boolean; runAsUser?: number };
  volumeMounts?: Array<{ name: string; mountPath: string; readOnly?: boolean }>;
  resources?: { limits?: Obj; requests?: Obj };
}

const k8sDir = fileURLToPath(new URL('../config/k8s/', import.meta.url));
const docs: Obj[] = readdirSync(k8sDir)
  .filter((f) => f.endsWith('.yaml'))
  .flatMap((f) =>
    parseAllDocuments(readFileSync(join(k8sDir, f), 'utf8')).map((d) => {
      assert.equal(d.errors.length, 0, `${f}: ${d.errors.map((e) => e.message).join('; ')}`);
      return { ...(d.toJS() as Obj), __file: f };
    }),
  );

function resource(kind: string, name?: string): Obj {
  const found = docs.filter((d) => d.kind === kind && (name === undefined || (d.metadata as Obj).name === name));
  assert.equal(found.length, 1, `one ${kind}${name ? ` ${name}` : ''} in config/k8s/`);
  return found[0] as Obj;
}

const deployment = resource('Deployment', 'logprobe');
const service = resource('Service', 'logprobe');
const configMap = resource('ConfigMap', 'logprobe-config');
const secret = resource('Secret', 'logprobe-baseline');
const podTemplate = (deployment.spec as Obj).template as Obj;
const podSpec = podTemplate.spec as {
  containers: Container[];
  securityContext: Obj;
  volumes: Array<Obj & { name: string }>;
  terminationGracePeriodSeconds: number;
};
const main = podSpec.containers.find((c) => c.name === 'logprobe') as Container;
const pruner = podSpec.containers.find((c) => c.name === 'capture-pruner') as Container;
const cmData = configMap.data as Record<string, string>;

function withConfigFile<T>(fn: (file: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), 'logprobe-k8s-'));
  try {
    const file = join(dir, 'logprobe.yaml');
    writeFileSync(file, cmData['logprobe.yaml'] ?? '');
    return fn(file);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const config = withConfigFile((file) => loadConfig({ file, env: { BASELINE_API_KEY: 'from-the-secret' } }));

function portNumber(port: string | number | undefined): number | undefined {
  return typeof port === 'number' ? port : main.ports?.find((p) => p.name === port)?.containerPort;
}

test('kustomization lists manifests that exist, and never the placeholder Secret', () => {
  const k = resource('Kustomization');
  const resources = k.resources as string[];
  for (const r of resources) assert.ok(existsSync(join(k8sDir, r)), r);
  assert.ok(
    resources.includes('deployment.yaml') && resources.includes('service.yaml') && resources.includes('configmap.yaml'),
  );
  assert.ok(!resources.includes('secret.yaml'), 'apply -k must not overwrite the real key with the placeholder');
});

test('the ConfigMap holds a valid logprobe config whose ports, paths and thresholds match', () => {
  assert.equal(config.baseline.apiKey, 'from-the-secret', 'the key comes from the environment');
  assert.equal(config.listen.host, '0.0.0.0');
  assert.equal(config.admin.host, '0.0.0.0', 'kubelet probes and Prometheus reach the pod IP');
  assert.equal(main.ports?.find((p) => p.name === 'http')?.containerPort, config.listen.port);
  assert.equal(main.ports?.find((p) => p.name === 'admin')?.containerPort, config.admin.port);
  const captures = main.volumeMounts?.find((m) => m.name === 'captures');
  assert.equal(captures?.mountPath, config.capture.dir, 'captures go to the captures volume');
  const configMount = main.volumeMounts?.find((m) => m.name === 'config');
  assert.deepEqual(main.args, ['serve', '--config', `${configMount?.mountPath}/logprobe.yaml`]);
  // The fleet rules use fireFraction 0.5, minRequests 10, h 5 (test/fleet-dashboard.unit.test.ts).
  assert.equal(config.alert.fireFraction, 0.5);
  assert.equal(config.alert.minRequests, 10);
  assert.equal(config.alert.cusum.h, 5);
});

test('the baseline key comes from the Secret', () => {
  const ref = main.env?.find((e) => e.name === 'BASELINE_API_KEY')?.valueFrom?.secretKeyRef;
  assert.equal(ref?.name, (secret.metadata as Obj).name);
  assert.ok(ref && Object.keys(secret.stringData as Obj).includes(ref.key), `Secret has key ${ref?.key}`);
  assert.match(cmData['logprobe.yaml'] ?? '', /apiKey: \$\{BASELINE_API_KEY\}/);
});

test("the live page's bearer token comes from the Secret logprobe-admin; the scrape job's example reads the same Secret", () => {
  const adminSecret = resource('Secret', 'logprobe-admin');
  const ref = main.env?.find((e) => e.name === 'ADMIN_TOKEN')?.valueFrom?.secretKeyRef;
  assert.equal(ref?.name, 'logprobe-admin');
  assert.ok(ref && Object.keys(adminSecret.stringData as Obj).includes(ref.key), `Secret has key ${ref?.key}`);
  const withToken = withConfigFile((file) =>
    loadConfig({ file, env: { BASELINE_API_KEY: 'k', ADMIN_TOKEN: 'from-the-admin-secret' } }),
  );
  assert.equal(withToken.admin.auth.bearerToken, 'from-the-admin-secret');
  // Without the Secret: no token, and the live page on 0.0.0.0 answers 403 (test/admin-auth.test.ts).
  assert.equal(config.admin.auth.bearerToken, null);
  const scrape = parseAllDocuments(
    readFileSync(fileURLToPath(new URL('../config/prometheus/scrape.yml', import.meta.url)), 'utf8'),
  )[0]!.toJS() as { scrape_configs: Array<{ authorization?: { credentials_file?: string } }> };
  assert.match(
    scrape.scrape_configs[0]?.authorization?.credentials_file ?? '',
    new RegExp(`/logprobe-admin/${ref.key}$`),
  );
});

test('readiness and liveness probe the admin port; Prometheus scrapes it', () => {
  assert.equal(main.readinessProbe?.httpGet?.path, '/readyz');
  assert.equal(portNumber(main.readinessProbe?.httpGet?.port), config.admin.port);
  assert.equal(main.livenessProbe?.httpGet?.path, '/healthz');
  assert.equal(portNumber(main.livenessProbe?.httpGet?.port), config.admin.port);
  const annotations = (podTemplate.metadata as Obj).annotations as Record<string, string>;
  assert.equal(annotations['prometheus.io/scrape'], 'true');
  assert.equal(annotations['prometheus.io/port'], String(config.admin.port));
  assert.equal(annotations['prometheus.io/path'], '/metrics');
});

test('the Service selects the pods and exposes only the public port', () => {
  const spec = service.spec as { selector: Record<string, string>; ports: Array<{ targetPort: string | number }> };
  const podLabels = (podTemplate.metadata as Obj).labels as Record<string, string>;
  for (const [k, v] of Object.entries(spec.selector)) assert.equal(podLabels[k], v, `selector ${k}`);
  assert.deepEqual(
    spec.ports.map((p) => portNumber(p.targetPort)),
    [config.listen.port],
  );
});

test('pods run as non-root with a read-only root filesystem', () => {
  assert.equal(podSpec.securityContext.runAsNonRoot, true);
  assert.ok(typeof podSpec.securityContext.runAsUser === 'number' && podSpec.securityContext.runAsUser > 0);
  for (const c of podSpec.containers) {
    assert.equal(c.securityContext?.allowPrivilegeEscalation, false, c.name);
    assert.equal(c.securityContext?.readOnlyRootFilesystem, true, c.name);
    assert.notEqual(c.securityContext?.runAsUser, 0, c.name);
    assert.ok(c.resources?.limits?.memory, `${c.name} has a memory limit`);
  }
});

test('termination grace covers the preStop pause and the drain', () => {
  const pause = Number(main.lifecycle?.preStop?.exec?.command?.[1] ?? 0);
  assert.ok(pause > 0, 'a preStop pause lets endpoints update before SIGTERM');
  assert.ok(
    podSpec.terminationGracePeriodSeconds > pause + config.shutdown.drainSeconds,
    'grace > pause + drainSeconds',
  );
  const strategy = (deployment.spec as Obj).strategy as { rollingUpdate: { maxUnavailable: number } };
  assert.equal(strategy.rollingUpdate.maxUnavailable, 0, 'rollouts never lower the serving capacity');
});

test('the pruner budget stays below the captures volume limit', () => {
  const budgetMb = Number(pruner.env?.find((e) => e.name === 'CAPTURE_BUDGET_MB')?.value);
  const volume = podSpec.volumes.find((v) => v.name === 'captures') as unknown as { emptyDir: { sizeLimit: string } };
  const m = /^(\d+)Gi$/.exec(volume.emptyDir.sizeLimit);
  assert.ok(m, volume.emptyDir.sizeLimit);
  // Headroom for one more file of capture.maxFileMB while the pruner waits for its next turn.
  assert.ok(budgetMb + 2 * config.capture.maxFileMB <= Number(m[1]) * 1024, `${budgetMb} MB budget in ${m[0]}`);
  assert.deepEqual(pruner.command, ['node', '/etc/logprobe/prune-captures.mjs']);
  assert.equal(pruner.image, main.image, 'the same image: nothing more to pull');
});

test('the capture pruner deletes the oldest files down to the budget and keeps the newest', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'logprobe-prune-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const script = join(dir, 'prune-captures.mjs');
  writeFileSync(script, cmData['prune-captures.mjs'] ?? '');
  const captures = join(dir, 'captures');
  const mb = 1024 * 1024;
  // Five 1 MiB files, oldest first; the newest is the one being written.
  const names = ['a.jsonl', 'b.jsonl', 'c.jsonl', 'd.jsonl', 'e.jsonl'];
  mkdirSync(captures);
  names.forEach((n, i) => {
    const p = join(captures, n);
    writeFileSync(p, Buffer.alloc(mb, 0x61));
    const when = new Date(Date.now() - (names.length - i) * 60_000);
    utimesSync(p, when, when);
  });
  const run = (budgetMb: string) =>
    spawnSync(process.execPath, [script, '--once'], {
      env: { ...process.env, CAPTURE_DIR: captures, CAPTURE_BUDGET_MB: budgetMb },
      encoding: 'utf8',
      timeout: 30_000,
    });

  let r = run('3');
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(readdirSync(captures).sort(), ['c.jsonl', 'd.jsonl', 'e.jsonl']);
  assert.match(r.stdout, /pruned capture file.*a\.jsonl/);

  // Even a budget of 0 keeps the file being written.
  r = run('0');
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(readdirSync(captures), ['e.jsonl']);

  // A missing directory is reported, not a crash.
  r = spawnSync(process.execPath, [script, '--once'], {
    env: { ...process.env, CAPTURE_DIR: join(dir, 'nope') },
    encoding: 'utf8',
  });
  assert.equal(r.status, 0);
  assert.match(r.stdout, /cannot list the capture directory/);
});

test('canaries run once per fleet: one canary pod with canary on and mirroring off, no Service selects it; the proxy replicas keep canaries off', () => {
  assert.equal(config.canary.enabled, false, 'the proxy replicas send no canaries');
  const canary = resource('Deployment', 'logprobe-canary');
  const spec = canary.spec as Obj & { replicas: number; strategy: { type: string }; template: Obj };
  assert.equal(spec.replicas, 1);
  assert.equal(spec.strategy.type, 'Recreate', 'never two canary pods at once');
  const labels = (spec.template.metadata as Obj).labels as Record<string, string>;
  const selector = ((service.spec as Obj).selector ?? {}) as Record<string, string>;
  const selects = (sel: Record<string, string>) => Object.entries(sel).every(([k, v]) => labels[k] === v);
  assert.ok(!selects(selector), 'the Service does not select the canary pod');
  const proxySelector = ((deployment.spec as Obj).selector as Obj).matchLabels as Record<string, string>;
  assert.ok(!selects(proxySelector), "the proxy Deployment's selector does not take the canary pod");
  const pdb = resource('PodDisruptionBudget');
  assert.ok(
    !selects(((pdb.spec as Obj).selector as Obj).matchLabels as Record<string, string>),
    'nor does the PodDisruptionBudget',
  );
  const cm = resource('ConfigMap', 'logprobe-canary-config').data as Record<string, string>;
  const dir = mkdtempSync(join(tmpdir(), 'logprobe-k8s-'));
  try {
    const file = join(dir, 'logprobe.yaml');
    writeFileSync(file, cm['logprobe.yaml'] ?? '');
    const c = loadConfig({ file, env: { BASELINE_API_KEY: 'k', ADMIN_TOKEN: 't' } });
    assert.equal(c.canary.enabled, true);
    assert.equal(c.mirror.sampleRate, 0);
    assert.equal(c.candidate.url, config.candidate.url, 'the same candidate as the proxy replicas');
    assert.equal(c.baseline.url, config.baseline.url);
    assert.equal(c.alert.fireFraction, config.alert.fireFraction);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const annotations = (spec.template.metadata as Obj).annotations as Record<string, string>;
  assert.equal(annotations['prometheus.io/scrape'], 'true', 'its LogprobCanaryShift is scraped');
});

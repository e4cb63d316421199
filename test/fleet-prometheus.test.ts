// The fleet rules on a real Prometheus (Debian's `prometheus`), scraping real `logprobe serve`
// processes. Two replicas, each in front of its own pair of simulated engines: the faulty pair's
// candidate has a corrupted prefill state (stateShift 0.6), the clean pair's candidate only
// float noise (σ = 1e-3). Each replica stands for its own fleet: Prometheus scrapes them as two
// jobs (`logprobe-faulty`, `logprobe-clean`), the rules' `by (job, namespace)` unit.
//
// The rules are config/prometheus/alerts.yml as written, with two changes for test time only:
// every alert's `for:` becomes FOR (instead of minutes) and every group's evaluation `interval:`
// 1s. Expressions, rate windows ([5m], [10m]: rate() needs only two samples in them), thresholds,
// labels and annotations are untouched.
//
// `logprobe serve` runs the compiled sources (dist/); `npm test` builds them first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify as stringifyYaml } from 'yaml';
import { startCli } from './helpers/cli.js';
import { startSim, sendChatOrCompletion } from './helpers/sim.js';
import { readRulesText } from './helpers/promql.js';
import {
  needPrometheus,
  promAlerts,
  promQuery,
  promRuleErrors,
  promRules,
  promTargets,
  rulesForTest,
  startPrometheus,
  type PromAlert,
} from './helpers/prometheus.js';

const FOR = '5s';
const FOR_MS = 5000;
/** From Prometheus ready to LogprobGlobalShift firing for the faulty fleet (typically ~15 s). */
const DEADLINE_MS = 90_000;
const FAULTY = 'logprobe-faulty';
const CLEAN = 'logprobe-clean';
const SHIFT_ALERTS = new Set(['LogprobGlobalShift', 'LogprobSustainedShift']);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Defer = (fn: () => unknown) => void;

/**
 * Clean-ups that run last-registered first (node:test runs t.after hooks in registration order),
 * so traffic stops before the proxies, the proxies before their engines, all of them even when
 * one fails; the first failure is rethrown.
 */
function cleanupStack(t: { after: (fn: () => Promise<void>) => void }): Defer {
  const stack: Array<() => unknown> = [];
  t.after(async () => {
    let first: unknown;
    for (const fn of stack.reverse()) {
      try {
        await fn();
      } catch (err) {
        first ??= err;
      }
    }
    if (first !== undefined) throw first;
  });
  return (fn) => stack.push(fn);
}

interface Replica {
  proxyUrl: string;
  /** host:port of the admin listener, the scrape target. */
  target: string;
}

/** Starts `logprobe serve` in front of a candidate and a baseline; SIGTERM (then SIGKILL) on clean-up. */
async function startReplica(
  defer: Defer,
  dir: string,
  name: string,
  candidate: string,
  baseline: string,
): Promise<Replica> {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(
    file,
    stringifyYaml({
      listen: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      candidate: { url: candidate },
      baseline: { url: baseline },
      mirror: { sampleRate: 1 },
      // A small in-process window, so logprobe_alert_firing and the verdict counters move fast.
      alert: { window: 20, minRequests: 10, forSeconds: 0 },
      capture: { enabled: false },
    }),
  );
  const proc = await startCli(['serve', '--config', file], /"adminUrl":"http:\/\/([^"]+)"/);
  defer(async () => {
    proc.child.kill('SIGTERM');
    const timer = setTimeout(() => proc.child.kill('SIGKILL'), 5000);
    await proc.exited;
    clearTimeout(timer);
  });
  const proxyUrl = /"proxyUrl":"(http:\/\/[^"]+)"/.exec(proc.output())?.[1];
  assert.ok(proxyUrl, proc.output());
  return { proxyUrl, target: proc.match[1]! };
}

function send(proxyUrl: string, i: number): Promise<number> {
  return sendChatOrCompletion(proxyUrl, i, {
    chat: `question number ${i}: why is the sky blue?`,
    completion: `Prompt ${i}: the capital of France is`,
  });
}

/** The simulated engines' model name (test/helpers/sim.ts): the `model` label of its series. */
const MODEL = 'sim';

/**
 * The single value of an instant query for a job (and, on series that carry a model label, for
 * the traffic's model), or undefined when it has none.
 */
async function valueFor(url: string, expr: string, job: string): Promise<number | undefined> {
  const v = (await promQuery(url, expr)).filter(
    (s) => s.metric.job === job && (s.metric.model === undefined || s.metric.model === MODEL),
  );
  assert.ok(v.length <= 1, `${expr}: ${JSON.stringify(v)}`);
  return v[0]?.value;
}

test(
  "LogprobGlobalShift fires on a real Prometheus for the faulty replica's fleet and not for the clean one",
  { timeout: 180_000 },
  async (t) => {
    if (!needPrometheus(t)) return;
    const started = Date.now();
    const defer = cleanupStack(t);
    const dir = mkdtempSync(join(tmpdir(), 'logprobe-fleet-'));
    defer(() => rmSync(dir, { recursive: true, force: true }));

    // Two pairs of engines, in this process (cheap and deterministic).
    const engines = [startSim(), startSim({ stateShift: 0.6 }), startSim(), startSim({ noise: 0.001 })] as const;
    defer(() => Promise.all(engines.map(async (e) => (await e).close())));
    const [faultyBaseline, faultyCandidate, cleanBaseline, cleanCandidate] = await Promise.all(engines);

    // Two real `logprobe serve` processes.
    const [faulty, clean] = await Promise.all([
      startReplica(defer, dir, 'faulty', faultyCandidate.url, faultyBaseline.url),
      startReplica(defer, dir, 'clean', cleanCandidate.url, cleanBaseline.url),
    ]);

    const prom = await startPrometheus({
      config: {
        global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
        rule_files: ['alerts.yml'],
        scrape_configs: [
          { job_name: FAULTY, static_configs: [{ targets: [faulty.target] }] },
          { job_name: CLEAN, static_configs: [{ targets: [clean.target] }] },
        ],
      },
      files: { 'alerts.yml': rulesForTest(readRulesText(), { forDuration: FOR, interval: '1s' }) },
    });
    defer(() => prom.close());
    const deadline = Date.now() + DEADLINE_MS;
    const context = async (): Promise<string> =>
      `\nelapsed ${((Date.now() - started) / 1000).toFixed(1)} s\ntargets: ${JSON.stringify(await promTargets(prom.url).catch(String))}\nrule errors: ${JSON.stringify(await promRuleErrors(prom.url).catch(String))}\nprometheus log:\n${prom.output()}`;

    // Both targets scraped at least once before any traffic: the zero-initialised verdict counters
    // are the first samples, so rate() counts every verdict that follows.
    for (;;) {
      const up = await promQuery(prom.url, 'up == 1');
      if (up.some((s) => s.metric.job === FAULTY) && up.some((s) => s.metric.job === CLEAN)) break;
      if (Date.now() > deadline) assert.fail(`targets never up${await context()}`);
      await sleep(250);
    }
    // The rule file loaded, both groups with every alert (`for:` shortened), and no rule fails.
    const groups = await promRules(prom.url);
    assert.deepEqual(groups.map((g) => `${g.name} every ${g.interval}s`).sort(), [
      'logprobe.alerts every 1s',
      'logprobe.rules every 1s',
    ]);
    const alerting = groups.flatMap((g) => g.rules).filter((r) => r.type === 'alerting');
    assert.deepEqual(
      alerting.map((r) => `${r.name} for ${r.duration}s`).sort(),
      [
        'LogprobCanaryShift',
        'LogprobGlobalShift',
        'LogprobMirrorStalled',
        'LogprobMirrorWorkerDown',
        'LogprobPathInconsistency',
        'LogprobPromptMismatch',
        'LogprobProxyErrors',
        'LogprobSelfInconsistency',
        'LogprobSustainedShift',
      ].map((n) => `${n} for ${FOR_MS / 1000}s`),
    );
    assert.deepEqual(await promRuleErrors(prom.url), []);

    // Traffic: each replica gets ~6 requests a second (2 at a time, paced), until told to stop.
    let stop = false;
    const sent = { [FAULTY]: 0, [CLEAN]: 0 };
    const failures: string[] = [];
    const drive = async (job: typeof FAULTY | typeof CLEAN, proxyUrl: string, lane: number) => {
      for (let i = lane; !stop; i += 2) {
        const status = await send(proxyUrl, i).catch((err: unknown) => String(err));
        if (status !== 200) failures.push(`${job} request ${i}: ${status}`);
        sent[job]++;
        await sleep(300);
      }
    };
    const traffic = Promise.all([
      drive(FAULTY, faulty.proxyUrl, 0),
      drive(FAULTY, faulty.proxyUrl, 1),
      drive(CLEAN, clean.proxyUrl, 0),
      drive(CLEAN, clean.proxyUrl, 1),
    ]);
    defer(async () => {
      stop = true;
      await traffic;
    });

    // Poll the alerts. The clean fleet must never show a shift alert, pending or firing, at any
    // poll; the faulty fleet's LogprobGlobalShift must reach firing. Keep going until the clean
    // fleet has had as much evidence as the rule demands (≥ 20 comparable verdicts in 5m) for
    // longer than FOR, so that a shift alert on it would have had the time to fire too.
    const cleanAlerts: PromAlert[] = [];
    let faultyFiring: PromAlert | undefined;
    let cleanEvidenceSince: number | undefined;
    let polls = 0;
    for (;;) {
      polls++;
      const alerts = await promAlerts(prom.url);
      for (const a of alerts)
        if (a.labels.job === CLEAN && SHIFT_ALERTS.has(a.labels.alertname ?? '')) cleanAlerts.push(a);
      faultyFiring ??= alerts.find(
        (a) => a.labels.job === FAULTY && a.labels.alertname === 'LogprobGlobalShift' && a.state === 'firing',
      );
      if (cleanEvidenceSince === undefined) {
        const comparable = await valueFor(prom.url, 'logprobe:comparable_verdicts:rate5m * 300', CLEAN);
        if (comparable !== undefined && comparable >= 20) cleanEvidenceSince = Date.now();
      }
      if (faultyFiring && cleanEvidenceSince !== undefined && Date.now() - cleanEvidenceSince > FOR_MS + 2000) break;
      if (Date.now() > deadline) {
        assert.fail(
          `after ${polls} polls: faulty firing: ${faultyFiring !== undefined}, clean evidence: ${cleanEvidenceSince !== undefined}, sent ${JSON.stringify(sent)}\nalerts: ${JSON.stringify(alerts)}${await context()}`,
        );
      }
      await sleep(1000);
    }
    stop = true;
    await traffic;

    assert.deepEqual(failures, [], 'client requests through the proxies');
    assert.deepEqual(cleanAlerts, [], 'no shift alert, pending or firing, for the clean fleet');

    // The alert as Prometheus sends it: its labels, and annotations whose template queries found
    // their series on real data (a query that finds nothing renders "n/a").
    assert.ok(faultyFiring);
    assert.equal(faultyFiring.labels.severity, 'critical');
    assert.equal(faultyFiring.labels.namespace, undefined, 'static targets have no namespace label');
    assert.equal(faultyFiring.labels.model, MODEL, "the alert is the traffic's model's");
    assert.doesNotMatch(faultyFiring.annotations.summary ?? '', /n\/a/, faultyFiring.annotations.summary);
    assert.match(
      faultyFiring.annotations.summary ?? '',
      /^logprobe-faulty: global logprob shift on the candidate for model sim — \d+(\.\d+)?% of its comparable/,
      'the pooled share, as a percentage',
    );
    assert.match(
      faultyFiring.annotations.summary ?? '',
      /\b1 replica/,
      'the one replica whose in-process detector fires',
    );
    assert.equal(faultyFiring.annotations.runbook_url, 'docs/runbook.md#logprobglobalshift');

    // ALERTS, as the dashboard's alert panels read it: firing for the faulty fleet only.
    const firing = await promQuery(prom.url, 'ALERTS{alertname="LogprobGlobalShift", alertstate="firing"}');
    assert.deepEqual(
      firing.map((s) => s.metric.job),
      [FAULTY],
    );

    // Both signals of the alert work on real data, each on its own: the pooled verdict share
    // (Prometheus' rate() over the replicas' counters) and the in-process detector's gauge.
    const pooled = await promQuery(
      prom.url,
      '(logprobe:global_shift:ratio_rate5m >= 0.5 and on (job, namespace, model) logprobe:comparable_verdicts:rate5m * 300 >= 20)',
    );
    assert.deepEqual(
      pooled.map((s) => `${s.metric.job} ${s.metric.model}`),
      [`${FAULTY} ${MODEL}`],
      'pooled verdict share, per model',
    );
    const inProcess = await promQuery(
      prom.url,
      'max by (job, namespace, model) (logprobe_alert_firing{alert="LogprobGlobalShift"}) == 1',
    );
    assert.deepEqual(
      inProcess.map((s) => `${s.metric.job} ${s.metric.model}`),
      [`${FAULTY} ${MODEL}`],
      'in-process detector, per model',
    );

    // Both replicas' mirror workers answer their scrapes; the noise-floor gauge that calibration
    // has not measured (NaN, spelled `Nan` by prom-client) is read by Prometheus, not refused.
    const up = await promQuery(prom.url, 'logprobe_mirror_worker_up');
    assert.deepEqual(
      up.map((s) => `${s.metric.job} ${s.value}`).sort(),
      [`${CLEAN} 1`, `${FAULTY} 1`],
      'logprobe_mirror_worker_up',
    );
    assert.ok(
      (await promAlerts(prom.url)).every((a) => a.labels.alertname !== 'LogprobMirrorWorkerDown'),
      'no worker down',
    );
    const floors = await promQuery(prom.url, `logprobe_noise_floor_observed_nats{model="${MODEL}"}`);
    assert.equal(floors.length, 4, 'two backends on each replica, for the model it served');

    // The recording rules behind them, fleet by fleet.
    assert.ok(
      ((await valueFor(prom.url, 'logprobe:global_shift:ratio_rate5m', FAULTY)) ?? 0) >= 0.9,
      'faulty: (almost) every comparable verdict a shift',
    );
    assert.equal(await valueFor(prom.url, 'logprobe:global_shift:ratio_rate5m', CLEAN), 0, 'clean: no shift verdict');
    assert.ok(
      ((await valueFor(prom.url, 'logprobe:shifted_positions:ratio_rate5m', FAULTY)) ?? 0) > 0.5,
      'faulty: most positions shifted',
    );
    assert.ok(
      ((await valueFor(prom.url, 'logprobe:shifted_positions:ratio_rate5m', CLEAN)) ?? 1) < 0.05,
      'clean: positions within the noise floor',
    );
    assert.ok(((await valueFor(prom.url, 'logprobe:cusum_statistic:max', CLEAN)) ?? 1) < 1, 'clean: CUSUM near zero');
    assert.equal(
      await valueFor(prom.url, 'logprobe:mirror_failed:ratio_rate10m', CLEAN),
      0,
      'clean: every mirror attempt compared',
    );
    assert.equal(await valueFor(prom.url, 'logprobe:proxy_errors:ratio_rate5m', CLEAN), 0, 'clean: no 5xx');
    assert.deepEqual(await promRuleErrors(prom.url), []);
    t.diagnostic(`${((Date.now() - started) / 1000).toFixed(1)} s, ${polls} polls, sent ${JSON.stringify(sent)}`);
  },
);

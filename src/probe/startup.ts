import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { BackendHealth } from '../backend/health.js';
import type { Metrics } from '../metrics/registry.js';
import { missingText } from './format.js';
import {
  CAPABILITY_LABELS,
  KeyRejectedError,
  meaningMismatch,
  probeEngine,
  requiredCapabilities,
  UnreachableError,
  type ProbeReport,
} from './probe.js';
import type { Backend } from '../core/types.js';
import type { EngineName } from '../metrics/labels.js';

/**
 * `serve`'s start-up check (`probe.atStart`), in the mirror's worker: each backend probed once, in
 * the background (listening and the client path never wait for it), its state given to `health`
 * (logged at once: reachable with the engine, or unreachable with the cause), the full probe's
 * result logged once per backend and exported as `logprobe_engine_capability{backend,capability}`
 * (1 works, 0 does not; a capability not asked has no series). The candidate is asked without
 * credentials (the mirror's copies carry the client's; at start there is no client), the baseline
 * with `baseline.apiKey`; a 401/403 is said as the key refused, named as the config calls it. The
 * flush is tried only where `mirror.repeat.flush` will flush anyway, with `*.adminApiKey` where set.
 * Each engine is told to `onEngine` as soon as it is known, before the probe's concurrent burst
 * (the mirror adopts it rather than detecting it again while the burst holds the server).
 */
export async function probeAtStart(o: StartProbe): Promise<Array<ProbeReport | null>> {
  const { config } = o;
  if (config.probe.atStart === 'off') return [];
  const backends: Backend[] = config.baseline.url === null ? ['candidate'] : ['candidate', 'baseline'];
  const reports = await Promise.all(backends.map((b) => probeBackend(o, b)));
  const [c, b] = reports;
  const mismatch = c && b ? meaningMismatch(c.meaning, b.meaning) : null;
  if (mismatch !== null) {
    o.logger.warn({ candidate: c!.meaning, baseline: b!.meaning }, mismatch);
    o.onMeaningMismatch?.(mismatch);
  }
  return reports;
}

/** What the start-up probe reports to: health, metrics, the log, and who adopts each engine. */
export interface StartProbe {
  config: Config;
  health: BackendHealth;
  metrics: Metrics;
  logger: Logger;
  signal?: AbortSignal;
  onEngine?(backend: Backend, engine: EngineName, evidence: string): void;
  /** The two sides' logprobs mean different things (`meaningMismatch`): pairs must not be compared. */
  onMeaningMismatch?(reason: string): void;
}

async function probeBackend(o: StartProbe, backend: Backend): Promise<ProbeReport | null> {
  const { config } = o;
  const side = backend === 'candidate' ? config.candidate : config.baseline;
  const url = side.url!;
  const required = requiredCapabilities(config, backend);
  let report: ProbeReport;
  try {
    report = await probeEngine({
      url,
      apiKey: backend === 'baseline' ? config.baseline.apiKey : null,
      keyName:
        backend === 'baseline'
          ? config.baseline.apiKey
            ? 'baseline.apiKey'
            : 'set baseline.apiKey'
          : 'the start-up probe has no key for the candidate',
      adminApiKey: side.adminApiKey,
      adminKeyName: `${backend}.adminApiKey`,
      copies: config.probe.concurrentCopies,
      onEngine: (engine, evidence) => o.onEngine?.(backend, engine, evidence),
      model: side.model,
      timeoutMs: config.probe.timeoutMs,
      tlsInsecure: config.tlsInsecure,
      engine: side.engine,
      topK: config.mirror.topLogprobs,
      flush: required.includes('flush'),
      required,
      reachabilityOnly: config.probe.atStart === 'reachability',
      ...(o.signal ? { signal: o.signal } : {}),
    });
  } catch (err) {
    if (o.signal?.aborted) return null;
    if (err instanceof KeyRejectedError)
      o.health.probed(backend, {
        reachable: false,
        reason: err.message,
        rejected: true,
        // The candidate's copies carry each client's key: one the probe does not have is no fault.
        unprobed: backend === 'candidate' && !err.sent,
      });
    else
      o.health.probed(backend, {
        reachable: false,
        reason: err instanceof UnreachableError ? err.message : (err as Error).message,
      });
    return null;
  }
  o.health.probed(backend, { reachable: true, engine: report.engine, version: report.version });
  if (report.capabilities.length > 0) logCapabilities(o, backend, report);
  return report;
}

/** The probe's capabilities: exported, and logged in one line (a warning when the configuration needs what is missing). */
function logCapabilities(o: StartProbe, backend: Backend, report: ProbeReport): void {
  const g = o.metrics.gauge('logprobe_engine_capability');
  for (const c of report.capabilities) if (c.ok !== null) g.set({ backend, capability: c.name }, c.ok ? 1 : 0);
  const works = report.capabilities.filter((c) => c.ok === true).map((c) => CAPABILITY_LABELS[c.name]);
  const not = report.capabilities
    .filter((c) => c.ok === false)
    .map((c) => `${CAPABILITY_LABELS[c.name]} (${c.detail}${c.enable ? `; enable: ${c.enable}` : ''})`);
  const line = `${backend} probe: ${report.engine}${report.version ? ` ${report.version}` : ''}; works: ${works.join(', ') || 'nothing'}; does not: ${not.join('; ') || 'nothing'}`;
  const fields = {
    backend,
    engine: report.engine,
    version: report.version,
    capabilities: Object.fromEntries(report.capabilities.map((c) => [c.name, c.ok])),
    missing: report.missing,
  };
  if (report.missing.length > 0)
    o.logger.warn(
      fields,
      `${line}; this configuration needs what is missing: ${report.missing.map((n) => missingText(report, n)).join('; ')}`,
    );
  else o.logger.info(fields, line);
}

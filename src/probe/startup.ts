import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { BackendHealth } from '../backend/health.js';
import type { Metrics } from '../metrics/registry.js';
import { missingText } from './format.js';
import { CAPABILITY_LABELS, probeEngine, requiredCapabilities, UnreachableError, type ProbeReport } from './probe.js';
import type { Backend } from '../core/types.js';

/**
 * `serve`'s start-up check (`probe.atStart`), in the mirror's worker: each backend probed once, in
 * the background (listening and the client path never wait for it), its state given to `health`
 * (logged at once: reachable with the engine, or unreachable with the cause), the full probe's
 * result logged once per backend and exported as `logprobe_engine_capability{backend,capability}`
 * (1 works, 0 does not; a capability not asked has no series). The candidate is asked without
 * credentials (the mirror's copies carry the client's; at start there is no client), the baseline
 * with `baseline.apiKey`. The flush is tried only where `mirror.repeat.flush` will flush anyway.
 */
export async function probeAtStart(o: {
  config: Config;
  health: BackendHealth;
  metrics: Metrics;
  logger: Logger;
  signal?: AbortSignal;
}): Promise<Array<ProbeReport | null>> {
  const { config } = o;
  if (config.probe.atStart === 'off') return [];
  const backends: Backend[] = config.baseline.url === null ? ['candidate'] : ['candidate', 'baseline'];
  return Promise.all(backends.map((b) => probeBackend(o, b)));
}

async function probeBackend(
  o: { config: Config; health: BackendHealth; metrics: Metrics; logger: Logger; signal?: AbortSignal },
  backend: Backend,
): Promise<ProbeReport | null> {
  const { config } = o;
  const side = backend === 'candidate' ? config.candidate : config.baseline;
  const url = side.url!;
  const required = requiredCapabilities(config, backend);
  let report: ProbeReport;
  try {
    report = await probeEngine({
      url,
      apiKey: backend === 'baseline' ? config.baseline.apiKey : null,
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
    o.health.probed(backend, {
      reachable: false,
      reason: err instanceof UnreachableError ? err.message : (err as Error).message,
    });
    return null;
  }
  o.health.probed(backend, { reachable: true, engine: report.engine, version: report.version });
  if (report.capabilities.length === 0) return report;
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
  return report;
}

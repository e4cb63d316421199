import { request } from 'undici';
import type { Logger } from 'pino';
import type { AlertTransition } from '../core/detector.js';
import type { Config } from '../config/schema.js';
import { formatNats } from '../core/explain.js';

/**
 * Where an alert links back to (Alertmanager's `generatorURL`): `alert.generatorUrl` when set,
 * else the live page on the admin address. A wildcard bind (0.0.0.0, ::) says nothing a reader
 * can open, so it becomes `localhost` (what `kubectl port-forward` and a local run give, and a
 * Host the admin port always allows); behind a Service or an ingress, set `alert.generatorUrl`.
 */
export function generatorUrl(config: Pick<Config, 'admin' | 'alert'>, port = config.admin.port): string {
  if (config.alert.generatorUrl) return config.alert.generatorUrl;
  const h = config.admin.host;
  const host = h === '0.0.0.0' || h === '::' || h === '' ? 'localhost' : h.includes(':') ? `[${h}]` : h;
  return `${config.admin.tls ? 'https' : 'http'}://${host}:${port}/ui`;
}

/** Below this many noise floors a sustained shift is called small. */
const SMALL_X = 3;

/**
 * What an alert means, in one clause, from its evidence: the window's alert cannot know a pair's
 * locus, so it names both and leaves the choice to each pair's (compute: the prompt moved too;
 * decode state: only the continuation); "small" only where the shift is near the floor.
 */
export function alertSummary(t: AlertTransition): string {
  switch (t.alert) {
    case 'LogprobGlobalShift':
      return "every decode step moved: not decode-time noise — each pair's locus says where (compute: the prompt moved too; decode state: only the continuation, suspect the KV cache / state)";
    case 'LogprobSelfInconsistency':
      return `the ${t.backend ?? 'backend'} disagrees with itself between a cold and a warm run: suspect the cache path`;
    case 'LogprobPathInconsistency':
      return `the ${t.backend ?? 'backend'}'s decode-time logprobs disagree with its own prefill of the same tokens: suspect the path that differs (speculative decoding, an adapter's head on prompt logprobs, stale prefill buffers)`;
    case 'LogprobPromptMismatch':
      return 'the candidate and the baseline read different prompt tokens for the same requests: the serving chat template or tokenizer differs from the trusted one';
    case 'LogprobCanaryShift':
      return "logprobe's own canary probes answer differently on the candidate than on the trusted side: the served model or its numerics changed, with or without client traffic";
    case 'LogprobSustainedShift': {
      const x = t.evidence.medianX;
      if (x === null) return 'a shift above the noise floor persists across requests';
      return x <= SMALL_X
        ? `a small shift (median ${x.toFixed(2)}× the noise floor) persists across requests`
        : `a shift of ${x.toFixed(2)}× the noise floor (median) persists across requests`;
    }
  }
}

const DESCRIPTION: Record<AlertTransition['alert'], string> = {
  LogprobGlobalShift:
    'The pooled share of shifted comparable positions over the alert window is above alert.fireFraction. ' +
    "Next, `logprobe analyze` the captures: a pair's locus is compute when its prompt positions moved too (weights, kernels, a layer: compare the computation) " +
    'and decode state when only the continuation moved (compare the state where it is written, in the cache medium and where it is read back).',
  LogprobSustainedShift:
    'The CUSUM of per-request maxShift / noiseFloor exceeded alert.cusum.h: a sustained shift too small to move the pooled share. ' +
    'Check subtle corruptions (weights, quantisation) against a calibrated noise floor.',
  LogprobSelfInconsistency:
    'Repeats of the same request on one backend (the second normally a prefix-cache hit) disagree above the noise floor over the window of repeat pairs. ' +
    'Suspect the cache path: compare the state where it is written, in the medium and where it is read back.',
  LogprobPathInconsistency:
    "A backend's logprobs of the tokens it generated, reported while decoding, disagree above the path floor with the same tokens scored in one prefill pass on that backend, over the window of path pairs. " +
    'A wrong weight moves both paths alike (the pair alerts see it, this one does not); this one sees a bug confined to one path: speculative or MTP decoding, prompt logprobs computed without an adapter, stale prefill buffers.',
  LogprobCanaryShift:
    "A round of canary probes (the probe set logprobe sends on its own each canary.intervalSeconds) judged changed: the probes' logprobs on the candidate moved together against the baseline or the recorded reference (the permutation test's p <= canary.alpha) or their pooled shifted share reached alert.fireFraction. It resolves at the first round judged the same. " +
    'It needs no client traffic: right after a deploy it is the first verdict.',
  LogprobPromptMismatch:
    'Over the window of compared pairs, at least fireFraction of them had two sides that read different prompt tokens for the same request (usage.prompt_tokens differ). ' +
    "Their logprobs are not compared (verdict prompt_mismatch): compare the candidate's chat template and tokenizer with the baseline's; each pair shows the first prompt token where they differ.",
};

/** Where an alert is, in words: ` (candidate, model a3)`, or nothing for the one detector of everything. */
export function alertWhere(t: Pick<AlertTransition, 'backend' | 'model'>): string {
  const parts = [...(t.backend ? [t.backend] : []), ...(t.model !== undefined ? [`model ${t.model}`] : [])];
  return parts.length > 0 ? ` (${parts.join(', ')})` : '';
}

/**
 * The evidence in words, for the log line: how many requests and how far they moved. The
 * sustained alert cites the CUSUM's run (requests since S left 0) and the median x =
 * maxShift / noiseFloor over it; the window alerts the pooled share over the window.
 */
export function evidenceText(t: AlertTransition): string {
  const e = t.evidence;
  if (t.detail !== undefined) return t.detail;
  if (t.alert === 'LogprobSustainedShift') {
    return `CUSUM ${e.cusum.toFixed(1)} over ${e.cusumRequests} request${e.cusumRequests === 1 ? '' : 's'} in a row, median maxShift ${e.medianX === null ? 'n/a' : e.medianX.toFixed(2)}× the noise floor`;
  }
  return `pooled share ${e.pooledShare.toFixed(2)} over the last ${e.requestsInWindow} compared request${e.requestsInWindow === 1 ? '' : 's'}, ${medianShiftText(e.medianShift)}`;
}

/**
 * The window's median shift, named for what it covers: each request's largest shift over the
 * positions the detector counts (src/core/scored.ts `detectorEvidence`: free-running and, when
 * scored, teacher-forced), the median over the window; formatted as every surface does.
 */
export function medianShiftText(m: number | null): string {
  return `median per-request max shift ${formatNats(m)} nats (free-running and teacher-forced positions)`;
}

/** One Alertmanager v2 alert (POST /api/v2/alerts takes an array of these). */
export function toAlertmanager(t: AlertTransition, instance: string, generatorURL?: string): Record<string, unknown> {
  const startsAt = new Date(t.startsAt * 1000).toISOString();
  return {
    labels: {
      alertname: t.alert,
      severity: t.alert === 'LogprobSustainedShift' ? 'warning' : 'critical',
      service: 'logprobe',
      instance,
      ...(t.backend ? { backend: t.backend } : {}),
      ...(t.model !== undefined ? { model: t.model } : {}),
    },
    annotations: {
      summary: alertSummary(t),
      description: DESCRIPTION[t.alert],
      pooled_share: t.evidence.pooledShare.toFixed(3),
      median_shift_nats: formatNats(t.evidence.medianShift),
      median_shift_covers:
        'per-request max shift over free-running and teacher-forced positions, median over the window',
      cusum: t.evidence.cusum.toFixed(2),
      cusum_requests: String(t.evidence.cusumRequests),
      median_x: t.evidence.medianX === null ? 'n/a' : t.evidence.medianX.toFixed(2),
      example_request_id: t.evidence.exampleRequestId ?? 'n/a',
    },
    startsAt,
    ...(generatorURL ? { generatorURL } : {}),
    // A firing alert gets no end; a resolved one ends now (Alertmanager's convention).
    ...(t.to === 'resolved' ? { endsAt: new Date(t.at * 1000).toISOString() } : {}),
  };
}

/** Logs every alert transition at warn with its evidence and POSTs it to the webhook, if any. */
export class AlertNotifier {
  private pending: Promise<unknown> = Promise.resolve();
  constructor(
    private readonly options: { logger: Logger; webhookUrl: string | null; instance: string; generatorUrl?: string },
  ) {}

  /** The link later alerts carry (the admin port is known once it listens: port 0 in tests). */
  setGeneratorUrl(url: string): void {
    this.options.generatorUrl = url;
  }

  notify(t: AlertTransition): void {
    this.options.logger.warn(
      {
        alert: t.alert,
        ...(t.backend ? { backend: t.backend } : {}),
        ...(t.model !== undefined ? { model: t.model } : {}),
        state: t.to,
        evidence: t.evidence,
      },
      `${t.alert}${alertWhere(t)} ${t.to}: ${alertSummary(t)} (${evidenceText(t)})`,
    );
    const url = this.options.webhookUrl;
    if (!url) return;
    const payload = JSON.stringify([toAlertmanager(t, this.options.instance, this.options.generatorUrl)]);
    // Sent in order; a slow or failing receiver is logged, never retried in a loop, never thrown.
    this.pending = this.pending.then(async () => {
      try {
        const res = await request(url, {
          method: 'POST',
          body: payload,
          headers: { 'content-type': 'application/json' },
          headersTimeout: 5000,
          bodyTimeout: 5000,
        });
        await res.body.dump();
        if (res.statusCode >= 300)
          this.options.logger.error({ status: res.statusCode, alert: t.alert }, 'alert webhook refused the alert');
      } catch (err) {
        this.options.logger.error({ err, alert: t.alert }, 'alert webhook unreachable');
      }
    });
  }

  /** Resolves once every notification sent so far has been delivered or failed. */
  flush(): Promise<void> {
    return this.pending.then(() => undefined);
  }
}

import { cusumUnit, impliedRunLengths, runLengthLine } from '../core/arl.js';
import type { Logger } from 'pino';
import type { Config } from './schema.js';

/** A share as people say it: 5%, 0.5%, 100%. */
function percent(share: number): string {
  const p = share * 100;
  return `${Number.isInteger(p) ? p : Number(p.toPrecision(2))}%`;
}

/**
 * What the mirror will do, in the one line `serve` logs at start (after "logprobe listening"): how
 * much it mirrors and of which routes, how to force a copy on a first try, against what, and
 * where the pairs go — with or without the prompts.
 */
export function mirrorStartLine(config: Config): string {
  const m = config.mirror;
  const routes = m.routes.join(', ');
  const how =
    config.mode === 'shadow'
      ? `shadow mode: comparing ${percent(m.sampleRate)} of the copies the mesh sends on ${routes}`
      : m.sampleRate === 0
        ? `mirroring nothing by default on ${routes} (mirror.sampleRate 0): a request with header x-logprobe-mirror: 1 is mirrored`
        : `mirroring ${percent(m.sampleRate)} of ${routes}${m.sampleBy === 'hash' ? ' (by body hash)' : ''}` +
          (m.sampleRate < 1
            ? ' — for a first try send header x-logprobe-mirror: 1, or set LOGPROBE_SAMPLE_RATE=1'
            : '');
  const against = config.baseline.url
    ? `against the baseline ${config.baseline.url}`
    : "baseline-free (the candidate's own repeats)";
  const capture = !config.capture.enabled
    ? 'captures off'
    : `captures to ${config.capture.dir}${config.capture.includePrompts ? ', prompts included (capture.includePrompts: false drops them)' : ', prompts hashed'}`;
  return `${how}; ${against}; ${capture}`;
}

/**
 * The run lengths the alert configuration implies, in the line `serve` logs at start: the CUSUM's
 * ARL0 (pairs between false alarms) and ARL1 at `alert.cusum.targetShift` (src/core/arl.ts).
 */
export function runLengthStart(config: Config): { fields: Record<string, number>; line: string } {
  const unit = cusumUnit(config.analysis.noiseFloor, config.calibration.minFloor);
  const r = impliedRunLengths(config.alert.cusum, unit, config.alert.minRequests);
  return {
    fields: {
      cusumK: r.k,
      cusumH: r.h,
      floorUnit: r.unit,
      arl0: Math.round(r.arl0),
      arl1: Number(r.arl1.toFixed(1)),
      arl1Shift: r.shift,
    },
    line: runLengthLine(r, config.alert.minRequests),
  };
}

/**
 * The start lines after `logprobe listening`, one process or a cluster's primary alike: what is
 * mirrored (sample rate, routes, captures) and, where a mirror runs, the run lengths its alerts imply.
 */
export function logMirrorStart(logger: Logger, config: Config, mirrorRuns: boolean): void {
  logger.info(
    {
      sampleRate: config.mirror.sampleRate,
      routes: config.mirror.routes,
      capture: config.capture.enabled ? config.capture.dir : null,
    },
    mirrorStartLine(config),
  );
  if (!mirrorRuns) return;
  const rl = runLengthStart(config);
  logger.info(rl.fields, rl.line);
}

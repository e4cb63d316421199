import type { Command } from 'commander';
import { loadConfig } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { DEFAULT_THRESHOLDS, formatNats, pickThresholds, VERDICTS, type Thresholds } from '../core/index.js';
import { UNCOMPARED } from '../report/summary.js';
import { usageError } from '../errors/index.js';
import { numberArg } from './options.js';

/** The threshold flags `analyze` and `replay` share with `compare`. */
export interface ThresholdFlags {
  config?: string;
  noiseFloor?: number;
  gapAmbiguous?: number;
  gapSystematic?: number;
  globalFraction?: number;
  minAligned?: number;
}

/** The threshold flags' parsers (commander's argParser), shared with `compare`'s own help texts. */
export const THRESHOLD_ARGS = {
  noiseFloor: numberArg('--noise-floor', { min: 0 }),
  gapAmbiguous: numberArg('--gap-ambiguous', { min: 0 }),
  gapSystematic: numberArg('--gap-systematic', { min: 0 }),
  globalFraction: numberArg('--global-fraction', { min: 0, max: 1 }),
  minAligned: numberArg('--min-aligned', { min: 1, integer: true }),
} as const;

/** Adds `--config` and the threshold flags to a command. */
export function thresholdOptions(cmd: Command): Command {
  return cmd
    .option(
      '-c, --config <file>',
      'take analysis.* (and for replay mirror.*, baseline.apiKey, timeouts) from a YAML config',
    )
    .option('--noise-floor <nats>', 'a position shift above this is not float noise', THRESHOLD_ARGS.noiseFloor)
    .option('--gap-ambiguous <nats>', 'flips below this gap are near-ties', THRESHOLD_ARGS.gapAmbiguous)
    .option('--gap-systematic <nats>', 'flips above this gap need a systematic shift', THRESHOLD_ARGS.gapSystematic)
    .option(
      '--global-fraction <share>',
      'shifted share of comparable positions for a global shift',
      THRESHOLD_ARGS.globalFraction,
    )
    .option('--min-aligned <n>', 'fewer comparable positions make an early shift', THRESHOLD_ARGS.minAligned);
}

/** The config named by `--config` (defaults and `LOGPROBE_*` otherwise). */
export function configFrom(flags: ThresholdFlags): Config {
  return loadConfig({ file: flags.config });
}

/**
 * The thresholds that override a record's own: `--config`'s analysis.* when given (`auto` →
 * calibration.minFloor), then each flag. Empty when neither is given.
 */
export function thresholdOverrides(flags: ThresholdFlags, config: Config | null): Partial<Thresholds> {
  const t: Partial<Thresholds> = {};
  if (config && flags.config) {
    const a = config.analysis;
    Object.assign(t, {
      noiseFloor: configFloor(config),
      gapAmbiguous: a.gapAmbiguous,
      gapSystematic: a.gapSystematic,
      globalFraction: a.globalFraction,
      minAligned: a.minAligned,
    });
  }
  for (const key of ['noiseFloor', 'gapAmbiguous', 'gapSystematic', 'globalFraction', 'minAligned'] as const) {
    const value = flags[key];
    if (value !== undefined) t[key] = value;
  }
  const full = { ...DEFAULT_THRESHOLDS, ...t };
  if (full.gapSystematic < full.gapAmbiguous)
    throw usageError(`--gap-systematic (${full.gapSystematic}) must be ≥ --gap-ambiguous (${full.gapAmbiguous})`);
  return t;
}

/** The floor a config sets offline: `auto` → calibration.minFloor (nothing is calibrated offline), `exact` → 0. */
export function configFloor(config: Config): number {
  const f = config.analysis.noiseFloor;
  return f === 'auto' ? config.calibration.minFloor : f === 'exact' ? 0 : f;
}

/** Thresholds from defaults ← config ← flags (replay: the pairs are new, nothing recorded to reuse). */
export function resolveThresholds(flags: ThresholdFlags, config: Config): Thresholds {
  const a = config.analysis;
  const fromConfig = pickThresholds({ ...a, noiseFloor: configFloor(config) });
  return { ...fromConfig, ...thresholdOverrides({ ...flags, config: undefined }, null) };
}

/** One line saying which thresholds judged the pairs, and where they came from. */
export function describeThresholds(t: Thresholds, note?: string): string {
  return `noise floor ${formatNats(t.noiseFloor)} nats, gap ambiguous ${t.gapAmbiguous}, systematic ${t.gapSystematic}, global fraction ${t.globalFraction}, min aligned ${t.minAligned}${note ? ` (${note})` : ''}`;
}

/** Where analyze's thresholds came from: each record's own, or flags for every record. */
export function thresholdsNote(overrides: Partial<Thresholds>, varied: boolean): string {
  const set = Object.keys(overrides);
  const own = varied
    ? "each record's own, which vary: the first record's shown"
    : "each record's own: those in force online";
  if (set.length === 0) return own;
  if (set.length === 5) return 'set for every record by --config or flags';
  return `${set.join(', ')} set for every record; the others ${own}`;
}

/** What `--fail-on` may name: any verdict, an uncompared outcome, `error` (all three), `alert` (the offline detectors). */
export const FAIL_ON_ITEMS: readonly string[] = [...VERDICTS, 'self_inconsistent', ...UNCOMPARED, 'error', 'alert'];
/** replay's default gate: a data-level shift or a tokenizer change. */
export const DEFAULT_FAIL_ON = 'global_shift,local_shift,tokenizer_mismatch';

/** Parses `--fail-on a,b,c` (`none` for an empty list), naming an unknown item. */
export function parseFailOn(raw: string): Set<string> {
  const items = raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const out = new Set<string>();
  for (const item of items) {
    if (item === 'none') continue;
    if (!FAIL_ON_ITEMS.includes(item))
      throw usageError(`--fail-on: unknown item '${item}' (expected ${FAIL_ON_ITEMS.join(', ')}, or none)`);
    if (item === 'error') for (const o of UNCOMPARED) out.add(o);
    else out.add(item);
  }
  return out;
}

import { Command } from 'commander';
import type { CommandFactory } from './commands.js';
import { noInput, usageError } from '../errors/index.js';
import { backendUrlFlag } from './options.js';
import { startProgress } from './progress.js';
import { writeOut } from './stdout.js';
import { configFrom, resolveThresholds, thresholdOptions, type ThresholdFlags } from './thresholds.js';
import { scoringOptions } from '../backend/client.js';
import { formatNats, type Thresholds } from '../core/index.js';
import type { Config } from '../config/schema.js';
import { loadGolden, type GoldenIndex } from '../replay/golden.js';
import { loadProbes, type CanaryProbe } from '../canary/probes.js';
import type { CanaryPair } from '../canary/runner.js';
import {
  listModels,
  missingFromReference,
  probesFor,
  runCheck,
  type CheckOptions,
  type CheckRound,
} from '../canary/check.js';

interface CheckFlags extends ThresholdFlags {
  candidate?: string;
  baseline?: string;
  reference?: string;
  probes?: string;
  model?: string;
  json?: boolean;
}

const HELP = `
Sends the probe set once (--probes FILE, else canary.probes of --config, else the built-in set of
border inputs) to the candidate and to the live --baseline, or to the candidate alone compared with
--reference GOLDEN (a golden file: logprobe record PROBES --backend TRUSTED --out GOLDEN), greedy,
with canary.topLogprobs alternatives (first-token probes one token, decode probes canary.maxTokens),
and judges the round as serve's canaries do: changed when the permutation test's p <= canary.alpha,
the pooled shifted share of the probes' positions (or of the decode steps alone) reaches
alert.fireFraction, the spread test's p <= canary.alpha, or a border probe moved by its gap
(thresholds: analysis.* of --config at canary.noiseFloor when it names one — auto: calibration.minFloor,
one round learns nothing — or the flags).

The model: --model, else canary.model, else candidate.model, else each model the candidate lists in
GET /v1/models (a round per model, changed if any round changed). A probe that names its own
model is sent in that model's round only.

Exit codes:
  0  same: every round judged the candidate the same as the baseline or reference
  1  changed in some round; or inconclusive: nothing could be compared (an unreachable server,
     HTTP errors, answers without logprobs), said in one line
  2  usage error: a missing, doubled or bad flag (--baseline and --reference, one of them), an
     unreadable or bad probe file (FILE:LINE and the field), a reference that lacks a probe
`;

/** `logprobe canary check --candidate URL (--baseline URL | --reference GOLDEN)`. */
export const canaryCheckCommand: CommandFactory = (setExit) =>
  thresholdOptions(
    new Command('check')
      .description('send the canary probes once to a candidate and judge the round against a baseline or a reference')
      .option('--candidate <url>', 'the build under test')
      .option('--baseline <url>', 'the trusted build, live')
      .option('--reference <golden>', 'a golden file recorded from the trusted build (instead of --baseline)')
      .option('--probes <file>', 'the probe file (JSONL; default canary.probes, else the built-in set)')
      .option('--model <name>', 'the model to probe (default canary.model, candidate.model, else each one listed)')
      .option('--json', 'print the result as one JSON object'),
  )
    .addHelpText('after', HELP)
    .action(async (flags: CheckFlags) => setExit(await check(flags)));

/** The check: settings, rounds, the report; the exit code. */
async function check(flags: CheckFlags): Promise<number> {
  const s = await checkSettings(flags);
  const models = await resolveModels(s.options, s.config, flags.model);
  if (!Array.isArray(models)) {
    // Nothing to send to: one line, no probe-by-probe repetition of the same cause.
    const line = `inconclusive: the candidate answers nothing (${models.unreachable})`;
    if (flags.json)
      void writeOut(
        `${JSON.stringify({ verdict: 'inconclusive', candidate: s.candidateUrl, summary: line, rounds: [] })}\n`,
      );
    else void writeOut(`${line}\n`);
    return 1;
  }
  const total = models.reduce((n, m) => n + probesFor(s.options.probes, m).length, 0);
  const progress = startProgress({ label: 'canary', total, unit: 'items', lines: false });
  let rounds: CheckRound[];
  try {
    rounds = await runCheck({ ...s.options, models, onPair: (done) => progress.update(done) });
  } finally {
    progress.stop();
  }
  const against = s.options.reference ? `reference ${s.options.reference.file}` : s.baselineUrl!;
  if (flags.json) void writeOut(`${JSON.stringify(checkJson(rounds, s.candidateUrl, flags))}\n`);
  else void writeOut(checkText(rounds, s.candidateUrl, against));
  return rounds.every((r) => r.judgement.verdict === 'same') ? 0 : 1;
}

interface CheckSettings {
  options: Omit<CheckOptions, 'models'>;
  config: Config;
  candidateUrl: string;
  baselineUrl: string | null;
}

/** Everything a check needs from flags and config, checked before anything is sent (usage errors: exit 2). */
async function checkSettings(flags: CheckFlags): Promise<CheckSettings> {
  const candidateUrl = backendUrlFlag('--candidate', flags.candidate);
  if (flags.baseline !== undefined && flags.reference !== undefined)
    throw usageError('--baseline and --reference: give one of them, not both');
  if (flags.baseline === undefined && flags.reference === undefined)
    throw usageError('--baseline URL or --reference GOLDEN is required (the trusted side to compare with)');
  const baselineUrl = flags.baseline === undefined ? null : backendUrlFlag('--baseline', flags.baseline);
  const config = configFrom(flags);
  const thresholds = canaryThresholds(flags, config);
  const probes = await loadProbes(flags.probes ?? config.canary.probes);
  const reference = flags.reference === undefined ? null : await referenceFor(flags.reference, probes);
  const c = config.canary;
  const upstream = (side: 'candidate' | 'baseline', url: string) => ({
    url,
    timeoutMs: config[side].timeoutMs,
    connectTimeoutMs: config[side].connectTimeoutMs,
    idleTimeoutMs: config[side].idleTimeoutMs,
    model: config[side].model,
  });
  const options: Omit<CheckOptions, 'models'> = {
    candidate: upstream('candidate', candidateUrl),
    baseline: baselineUrl === null ? null : { ...upstream('baseline', baselineUrl), apiKey: config.baseline.apiKey },
    reference,
    tlsInsecure: config.tlsInsecure,
    probes,
    copy: { ...config.mirror, maxTokens: c.maxTokens, topLogprobs: c.topLogprobs },
    thresholds,
    // A probe is its first tokens: no teacher-forced scoring past a divergence (as serve's canaries).
    scoring: { ...scoringOptions(config), when: 'never' },
    judge: {
      alpha: c.alpha,
      fireFraction: config.alert.fireFraction,
      permutations: config.alert.permutation.permutations,
      seed: config.alert.permutation.seed,
    },
  };
  return { options, config, candidateUrl, baselineUrl };
}

/** The reference golden file, which must answer every probe (a probe without one would compare nothing). */
async function referenceFor(file: string, probes: readonly CanaryProbe[]): Promise<GoldenIndex> {
  const ref = await loadGolden(file);
  if (ref.records === 0)
    throw noInput(`--reference ${file}: no golden record${ref.problems[0] ? ` (${ref.problems[0]})` : ''}`);
  const missing = missingFromReference(probes, ref);
  if (missing.length > 0)
    throw noInput(
      `--reference ${file}: no answer for ${missing.length} of ${probes.length} probes (first: ${missing[0]!.id}); record it from the probe file: logprobe record PROBES --backend TRUSTED --out ${file}`,
    );
  return ref;
}

/**
 * The models to probe, a round each: --model, else canary.model, else candidate.model; else the
 * models the probes name and those the candidate lists (null — the probes as they are — when it
 * lists none: the round then says why nothing could be compared).
 */
async function resolveModels(
  o: Omit<CheckOptions, 'models'>,
  config: Config,
  flag: string | undefined,
): Promise<(string | null)[] | { unreachable: string }> {
  const fixed = flag ?? config.canary.model ?? config.candidate.model;
  if (fixed !== null) {
    if (probesFor(o.probes, fixed).length === 0) throw noInput(`--model ${fixed}: no probe is for this model`);
    return [fixed];
  }
  const named = [...new Set(o.probes.map((p) => p.model).filter((m): m is string => m !== undefined))];
  if (named.length > 0 && o.probes.every((p) => p.model !== undefined)) return named;
  const listed = await listModels(o.candidate, { tlsInsecure: o.tlsInsecure });
  if ('error' in listed && listed.unreachable)
    return { unreachable: `--candidate ${o.candidate.url}: ${listed.error}` };
  if ('error' in listed) {
    process.stderr.write(`logprobe: --candidate ${o.candidate.url}: ${listed.error}; probing without a model\n`);
    return [null];
  }
  return [...new Set([...listed.models, ...named])];
}

/** A probe's line: id, verdict (or why it was not compared), max shift, the first token's gap. */
function probeLine(p: CanaryPair, width: number): string {
  const c = p.result.comparison;
  const verdict = c?.verdict ?? p.result.outcome;
  const gap = firstGap(p);
  const parts = [
    `  ${p.probe.id.padEnd(width)}  ${verdict.padEnd(16)}`,
    c ? `max shift ${formatNats(c.maxShift)} nats` : (p.result.reason ?? ''),
    gap !== null ? `first-token gap ${formatNats(gap)} nats` : '',
    c?.firstDivergence !== null && c?.firstDivergence !== undefined ? `diverged at ${c.firstDivergence}` : '',
  ];
  return parts.filter((x) => x !== '').join('  ');
}

/** The trusted side's top-1/top-2 gap at the first generated token: as compared, else as the probe file measured it. */
function firstGap(p: CanaryPair): number | null {
  return p.result.comparison?.positions[0]?.gap ?? p.probe.gap;
}

/** The text report: a block per round, a line per probe, the round's summary. */
function checkText(rounds: readonly CheckRound[], candidate: string, against: string): string {
  const lines: string[] = [];
  for (const r of rounds) {
    lines.push(`canary check: ${candidate} against ${against}${r.model !== null ? `, model ${r.model}` : ''}`);
    const width = Math.max(...r.pairs.map((p) => p.probe.id.length), 2);
    for (const p of r.pairs) lines.push(probeLine(p, width));
    lines.push(summaryLine(r));
  }
  return `${lines.join('\n')}\n`;
}

/** The round's summary; an inconclusive one with the first cause (an unreachable server, an HTTP error). */
function summaryLine(r: CheckRound): string {
  const j = r.judgement;
  if (j.verdict !== 'inconclusive') return j.summary;
  const cause = r.pairs.find((p) => p.result.reason !== undefined);
  return `${j.summary}${cause ? ` (${cause.probe.id}: ${cause.result.outcome}, ${cause.result.reason})` : ''}`;
}

/**
 * The thresholds of the round: `analysis.*` of the config, at `canary.noiseFloor` when it names
 * one (`auto`: `calibration.minFloor` — one round has learned nothing yet, as serve's first), and
 * the flags over both.
 */
function canaryThresholds(flags: CheckFlags, config: Config): Thresholds {
  const own = config.canary.noiseFloor;
  const t = resolveThresholds(flags, config);
  if (own === null || flags.noiseFloor !== undefined) return t;
  return { ...t, noiseFloor: own === 'auto' ? config.calibration.minFloor : own };
}

/** `--json`: one object, the rounds with their figures and each probe's result (docs/format.md). */
function checkJson(rounds: readonly CheckRound[], candidate: string, flags: CheckFlags): Record<string, unknown> {
  const verdict = rounds.some((r) => r.judgement.verdict === 'changed')
    ? 'changed'
    : rounds.every((r) => r.judgement.verdict === 'same')
      ? 'same'
      : 'inconclusive';
  return {
    verdict,
    candidate,
    baseline: flags.baseline ?? null,
    reference: flags.reference ?? null,
    rounds: rounds.map((r) => ({
      model: r.model,
      ...r.judgement,
      summary: summaryLine(r),
      probes: r.judgement.probes,
      results: r.pairs.map((p) => ({
        id: p.probe.id,
        route: p.probe.route,
        outcome: p.result.outcome,
        verdict: p.result.comparison?.verdict ?? null,
        maxShift: p.result.comparison?.maxShift ?? null,
        firstTokenGap: firstGap(p),
        firstDivergence: p.result.comparison?.firstDivergence ?? null,
        reason: p.result.reason ?? null,
        tokens: p.tokens,
      })),
    })),
  };
}

import { writeFile } from 'node:fs/promises';
import type { Command } from 'commander';
import type { Config } from '../config/schema.js';
import {
  GateAccumulator,
  HealthAccumulator,
  LOGITS_TOP,
  parseGates,
  type GatePair,
  type GateResult,
  type GateSpec,
} from '../core/index.js';
import { unwritableFile, usageError } from '../errors/index.js';
import { Summary, type SummaryData, type SummaryEntry, type SummaryOptions } from '../report/summary.js';
import type { HealthReport } from '../report/health-text.js';
import { loadGolden, maxTokensOf, type GoldenIndex } from '../replay/golden.js';
import { missingFromGolden, type AnalysedPair } from '../replay/golden-run.js';
import { JUnitReport } from '../replay/junit.js';
import { ModelGates, type ModelGate } from '../replay/models.js';
import { isNone } from '../config/values.js';
import { checkWritable } from './report-file.js';

/**
 * replay's gates (docs/format.md, "Gates"): `--gate`, `--baseline-from`, `--junit`, `--json`,
 * what they require before anything is sent (exit 2 otherwise), and the per-prompt results they
 * collect from the analysed pairs.
 */

/** The flags this module adds. */
export interface GateFlags {
  baselineFrom?: string;
  gate: string[];
  junit?: string;
  json?: boolean;
}

const collect = (v: string, acc: string[]) => [...acc, v];

/** Adds `--baseline-from`, `--gate`, `--junit` and `--json` to replay. */
export function gateOptions(cmd: Command): Command {
  return cmd
    .option('--baseline-from <golden>', 'compare with a golden file (logprobe record) instead of a live --baseline')
    .option(
      '--gate <gate>',
      'logits[:T] (top-10 within T nats, default 0.01), tokens[:N] (first N token ids identical, default 128), kl[:T] (mean KL, default 0.05), definition; repeatable or comma-separated',
      collect,
      [] as string[],
    )
    .option('--junit <file>', 'also write a JUnit XML report: one test case per prompt and gate')
    .option(
      '--json',
      'print the run summary (health, definition warnings, gates, the verdict gate) as one JSON object instead of the text report',
    );
}

/** A summary that also hands each pair to the gates (the replay runners feed a summary; this one listens). */
class ListeningSummary extends Summary {
  constructor(
    options: SummaryOptions,
    private readonly listener: (e: SummaryEntry) => void,
  ) {
    super(options);
  }

  override add(e: SummaryEntry): void {
    super.add(e);
    this.listener(e);
  }
}

/** What the gates collected over a run. */
export interface GateOutcome {
  results: GateResult[];
  report: HealthReport;
  /** The verdict gate and every `--gate` decided per model, failing models first. */
  models: ModelGate[];
}

/** Parses `--gate` and checks it against `--baseline`/`--baseline-from` (usage errors, exit 2). */
function checkedSpecs(flags: GateFlags, baselineGiven: boolean): GateSpec[] {
  let specs: GateSpec[];
  try {
    specs = parseGates(flags.gate ?? []);
  } catch (err) {
    throw usageError((err as Error).message);
  }
  if (flags.baselineFrom && baselineGiven)
    throw usageError(
      '--baseline and --baseline-from are exclusive: compare with a live baseline or with a golden file',
    );
  const baselineFree = !flags.baselineFrom && baselineGiven && isNone((flags as { baseline?: string }).baseline ?? '');
  if (baselineFree && specs.length > 0)
    throw usageError(
      `--gate ${specs.map((g) => g.name).join(',')} compares a candidate with a baseline: give --baseline URL or --baseline-from GOLDEN (--baseline none compares the candidate with itself only)`,
    );
  return specs;
}

/** Loads the golden file and refuses it when empty or missing a record for an input; its problems go to `notes`. */
async function goldenFor(file: string, inputs: readonly string[], notes: string[]): Promise<GoldenIndex> {
  const golden = await loadGolden(file);
  for (const p of golden.problems.slice(0, 5)) notes.push(p);
  if (golden.records === 0)
    throw usageError(`--baseline-from ${file}: no golden record in it (write one with logprobe record)`);
  const { missing } = await missingFromGolden(inputs, golden);
  if (missing.length > 0) {
    const list = missing.slice(0, 10).join('; ');
    throw usageError(
      `--baseline-from ${file} has no golden record for ${missing.length} input${missing.length === 1 ? '' : 's'}: ${list}${missing.length > 10 ? '; …' : ''} (record them with logprobe record, or drop them from the input)`,
    );
  }
  return golden;
}

/** A `logits` gate needs top lists of at least {@link LOGITS_TOP} (the golden records' or mirror.topLogprobs). */
function checkLogits(specs: readonly GateSpec[], golden: GoldenIndex | null, config: Config): void {
  const logits = specs.find((g) => g.kind === 'logits');
  if (!logits) return;
  const k = golden ? golden.minTopK : config.mirror.topLogprobs;
  if (k === null || k < LOGITS_TOP) {
    const where = golden
      ? `the golden records of ${golden.file} asked for ${k ?? 'no'} top logprobs (record them with mirror.topLogprobs ≥ ${LOGITS_TOP} in --config)`
      : `mirror.topLogprobs is ${k} (set mirror.topLogprobs: ${LOGITS_TOP} or more in --config)`;
    throw usageError(`--gate ${logits.name} compares each side's top-${LOGITS_TOP}: ${where}`);
  }
  const scored = golden?.minScoredTopK ?? null;
  if (golden && scored !== null && scored < LOGITS_TOP)
    throw usageError(
      `--gate ${logits.name} compares each side's top-${LOGITS_TOP}: the golden records of ${golden.file} were scored with the top-${scored} (record them again with logprobe record, which scores with the top-${LOGITS_TOP})`,
    );
}

/** The tokens to generate for a `tokens:N` gate (implied for a live replay without --max-tokens); caps go to `notes`. */
function tokensBudget(
  specs: readonly GateSpec[],
  golden: GoldenIndex | null,
  given: number | undefined,
  notes: string[],
): number | undefined {
  const tokens = specs.find((g) => g.kind === 'tokens');
  if (!tokens) return given;
  const n = tokens.threshold!;
  if (golden) {
    const m = golden.minMaxTokens;
    const cap = Math.min(m ?? Infinity, given ?? Infinity);
    if (cap < n)
      notes.push(
        `--gate ${tokens.name}: ${given !== undefined && given < (m ?? Infinity) ? `--max-tokens ${given}` : `the golden records were generated with max_tokens ${m}`}, so only the first ${cap} tokens can be checked (record with --max-tokens ${n})`,
      );
  } else if (given === undefined) {
    notes.push(`--gate ${tokens.name}: every request generates ${n} tokens (--max-tokens ${n} implied)`);
    return n;
  } else if (given < n) {
    notes.push(
      `--gate ${tokens.name}: --max-tokens ${given} caps generation, so only the first ${given} tokens are checked`,
    );
  }
  return given;
}

/** The gates of one replay, set up and checked before anything is sent. */
export class ReplayGates {
  readonly specs: GateSpec[];
  readonly golden: GoldenIndex | null;
  /** Tokens to generate when `--gate tokens:N` asks for more than the request would (live replay, no --max-tokens). */
  readonly maxTokens: number | undefined;
  /** Notes for stderr before the run (caps, implied flags). */
  readonly notes: string[] = [];
  readonly health = new HealthAccumulator();
  private readonly gates: GateAccumulator;
  private readonly junit: JUnitReport | null;
  private readonly byId = new Map<string, Record<string, unknown>>();
  /** The verdicts and gates by model (src/replay/models.ts). */
  private readonly models: ModelGates;

  private constructor(
    flags: GateFlags,
    o: {
      specs: GateSpec[];
      golden: GoldenIndex | null;
      maxTokens: number | undefined;
      failOn: ReadonlySet<string>;
      slices: Config['slices'];
    },
  ) {
    this.specs = o.specs;
    this.golden = o.golden;
    this.maxTokens = o.maxTokens;
    this.junit = flags.junit ? new JUnitReport('logprobe replay') : null;
    this.failOn = o.failOn;
    this.models = new ModelGates(o.slices);
    this.gates = new GateAccumulator(o.specs, (spec, p, r) => {
      this.models.gateCase(this.model, spec.name, r.status);
      this.junit?.gateCase(spec, { ...p, order: this.order }, r);
    });
  }

  private readonly failOn: ReadonlySet<string>;
  /** The input place of the pair being judged (JUnit lists cases in input order). */
  private order: [string, number] = ['', 0];
  /** The model slice of the pair being judged. */
  private model = '';

  /**
   * Parses and checks the gates against what the run can measure: `logits` needs top lists of at
   * least 10 (`mirror.topLogprobs`, or the golden records' own), `tokens:N` generations of N
   * tokens (implied as `--max-tokens N` for a live replay without one; said when capped).
   * Loads the golden file and refuses inputs it has no record for. Throws usage errors (exit 2).
   */
  static async setup(
    flags: GateFlags,
    o: {
      config: Config;
      inputs: readonly string[];
      maxTokens: number | undefined;
      baselineGiven: boolean;
      failOn: ReadonlySet<string>;
    },
  ): Promise<ReplayGates> {
    const specs = checkedSpecs(flags, o.baselineGiven);
    if (flags.junit) await checkWritable(flags.junit);
    const notes: string[] = [];
    const golden = flags.baselineFrom ? await goldenFor(flags.baselineFrom, o.inputs, notes) : null;
    checkLogits(specs, golden, o.config);
    const maxTokens = tokensBudget(specs, golden, o.maxTokens, notes);
    const g = new ReplayGates(flags, { specs, golden, maxTokens, failOn: o.failOn, slices: o.config.slices });
    g.notes.push(...notes);
    return g;
  }

  /** The summary the runner feeds: each pair also reaches the gates, the health and the JUnit report. */
  summary(options: SummaryOptions): Summary {
    return new ListeningSummary(options, (e) => this.onEntry(e));
  }

  /** The request of each pair, from a runner that reports it (the golden runner): the gates read its max_tokens. */
  onAnalysed = (p: AnalysedPair): void => {
    this.byId.set(p.at, p.request);
  };

  private onEntry(e: SummaryEntry): void {
    const c = e.result.comparison;
    if (c) this.health.add(c, e.id, e.id);
    const request = this.byId.get(e.id);
    this.byId.delete(e.id);
    const { candidate, baseline } = e.result;
    const pair: GatePair = {
      at: e.id,
      id: e.id,
      route: e.route,
      outcome: e.result.outcome,
      comparison: c,
      lengths: candidate && baseline ? { candidate: candidate.steps.length, baseline: baseline.steps.length } : null,
      maxTokens: request ? maxTokensOf(request) : (this.maxTokens ?? null),
    };
    this.order = [e.file, e.line];
    this.model = this.models.slice(e.model);
    this.models.add(this.model, e);
    this.gates.add(pair);
    if (this.junit) {
      const v = c?.verdict ?? e.result.outcome;
      const message = c ? `${c.verdict}: ${c.explanation}` : `not compared (${e.result.outcome})`;
      // The verdict gate fails a prompt on what --fail-on names (an uncompared outcome included), as the exit code does.
      this.junit.add(this.verdictSuite(), {
        order: [e.file, e.line],
        name: `${e.id} ${e.route}`,
        classname: 'logprobe.gate.verdict',
        status: this.failOn.has(v) ? 'failed' : 'passed',
        message,
        type: v,
      });
    }
  }

  /**
   * One test case per model: its gate (the verdict gate and every --gate on its prompts alone);
   * with one model the suites above are its gate already, as the text shows its table only then.
   */
  private modelCases(models: readonly ModelGate[]): void {
    if (models.length < 2) return;
    const suite = `gate by model (--fail-on ${this.failOn.size ? [...this.failOn].join(',') : 'none'}${this.specs.length ? `; ${this.specs.map((g) => g.name).join(', ')}` : ''})`;
    for (const m of models) {
      const counts = Object.entries({ ...m.verdicts, ...m.uncompared })
        .filter(([, n]) => (n ?? 0) > 0)
        .map(([v, n]) => `${v} ${n}`);
      this.junit!.add(suite, {
        name: `model ${m.model}`,
        classname: 'logprobe.gate.model',
        status: m.passed ? 'passed' : 'failed',
        message: `${m.pairs} pairs, ${m.compared} compared${counts.length ? `: ${counts.join(', ')}` : ''}${m.passed ? '' : `; failed on ${m.failedOn.join(', ')}`}`,
        type: 'model',
      });
    }
  }

  private verdictSuite(): string {
    return `verdict gate (--fail-on ${this.failOn.size ? [...this.failOn].join(',') : 'none'})`;
  }

  /** The gates' results, the health report, and the gate by model (after the run). */
  outcome(): GateOutcome {
    const results = this.gates.results();
    return {
      results,
      report: { health: this.health.health(), definition: this.health.definition(), gates: results },
      models: this.models.results(this.failOn),
    };
  }

  /** Writes the JUnit report: the per-prompt cases, plus the run-level checks of the verdict gate. */
  async writeJunit(
    file: string,
    results: readonly GateResult[],
    data: SummaryData,
    run: { alertsFired: number; models: readonly ModelGate[] },
  ): Promise<void> {
    if (!this.junit) return;
    this.junit.declare(results);
    this.modelCases(run.models);
    const suite = this.verdictSuite();
    this.junit.add(suite, {
      name: 'run: at least one pair compared',
      classname: 'logprobe.gate.verdict',
      status: data.compared > 0 ? 'passed' : 'failed',
      message:
        data.compared > 0
          ? `${data.compared} of ${data.pairs} pairs compared`
          : 'no pair could be compared: a gate does not pass on no evidence',
      type: 'evidence',
    });
    if (this.failOn.has('alert')) {
      this.junit.add(suite, {
        name: 'run: offline detectors (alert)',
        classname: 'logprobe.gate.verdict',
        status: run.alertsFired > 0 ? 'failed' : 'passed',
        message:
          run.alertsFired > 0
            ? `would fire: ${data.alerts.map((a) => `${a.alert} at pair ${a.atPair}`).join(', ')}`
            : 'no offline alert would fire',
        type: 'alert',
      });
    }
    try {
      await writeFile(file, this.junit.render(), { mode: 0o600 });
    } catch (err) {
      throw unwritableFile(file, err);
    }
  }
}

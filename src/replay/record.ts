import { open, type FileHandle } from 'node:fs/promises';
import { basename } from 'node:path';
import { readJsonLines } from '../capture/reader.js';
import { parseResponse, sideChecks, type DefinitionWarning, type Thresholds } from '../core/index.js';
import type { BackendResult } from '../backend/dispatch.js';
import { rewriteForMirror, scoringSource, type RewriteOptions } from '../backend/rewrite.js';
import type { MirrorOutcome } from '../pair/types.js';
import { routeLabel } from '../metrics/labels.js';
import { requestJson, UnsupportedError, type ScoringTarget } from '../backend/http.js';
import { failureReason } from '../backend/failure.js';
import { Backends, type BackendClient, type ScoringOptions } from '../backend/client.js';
import { createUpstreamPool, type UpstreamOptions } from '../backend/pool.js';
import { LogprobeError, unwritableFile } from '../errors/index.js';
import { recordSecrets, redactionFor } from '../capture/record.js';
import { buildGoldenRecord, encodeSteps, goldenKey, type GoldenScoring } from './golden.js';
import { toReplayItem, type ReplayItem } from './input.js';

/** What `logprobe record` needs: inputs, the one backend, the mirror's rewrite, scoring, the golden file. */
export interface RecordRunOptions {
  inputs: readonly string[];
  backend: UpstreamOptions & { apiKey: string | null };
  tlsInsecure: boolean;
  rewrite: RewriteOptions;
  maxTokens?: number;
  concurrency: number;
  scoring: ScoringOptions;
  /** Thresholds in force, kept in the records as captures keep them. */
  thresholds: Omit<Thresholds, 'noiseFloor'>;
  out: FileHandle;
  /** Its path, for the error when a write fails. */
  outFile: string;
  secrets: Array<string | null>;
  /** Extra names redacted (`log.redact`), as captures redact them. */
  redactFields?: readonly string[];
  /** Stop sending after this many answers in a row that failed (a transport error or an HTTP error status). */
  maxFailures: number;
  /** Record every input line, repeats of a prompt (the same golden key) included. */
  keepDuplicates: boolean;
  onSkip?: (message: string) => void;
  onRecord?: (done: number) => void;
}

/** What a record run did. */
export interface RecordRunResult {
  records: number;
  /** Records by outcome (`ok`, `baseline_error`, `unparseable`, `incomparable`). */
  outcomes: Partial<Record<MirrorOutcome, number>>;
  /** Records by scoring outcome. */
  scoring: Record<GoldenScoring['outcome'], number>;
  methods: string[];
  /** The smallest top-k the scoring got (the engine's cap may be below the k asked); null when nothing was scored. */
  topK: number | null;
  /** The first few problems (an unusable answer, a failed scoring), as `id: reason`. */
  problems: string[];
  /** Definition warnings of the backend's own numbers, with the first record that showed each. */
  definition: Array<DefinitionWarning & { at: string; records: number }>;
  /** Input lines not recorded: a prompt already recorded (its golden key seen before). */
  duplicates: number;
  /** Why the recording stopped before the end of its inputs (`maxFailures` failed answers in a row), else null. */
  stopped: string | null;
}

/** Opens the golden file before anything is sent (0600, emptied): an unwritable path is a usage error. */
export async function openGoldenFile(file: string): Promise<FileHandle> {
  try {
    return await open(file, 'w', 0o600);
  } catch (err) {
    throw unwritableFile(file, err);
  }
}

function mirroredBody(
  item: ReplayItem,
  rewrite: RewriteOptions,
  maxTokens: number | undefined,
): Record<string, unknown> {
  let body = item.body;
  let r = rewrite;
  if (maxTokens !== undefined) {
    body = {
      ...body,
      [item.kind === 'chat' && body.max_completion_tokens !== undefined ? 'max_completion_tokens' : 'max_tokens']:
        maxTokens,
    };
    r = { ...rewrite, maxTokens };
  }
  return rewriteForMirror(item.kind, body, r);
}

/**
 * `logprobe record`: each input line through the mirror's rewrite (as replay), sent to the one
 * backend, and written as a golden record — the backend's answer and, where its engine profile
 * allows, its own teacher-forced scoring of the tokens it generated (prompt and continuation
 * steps), which `replay --baseline-from` compares a candidate's scoring with. Records are written
 * in input order.
 */
export async function runRecord(o: RecordRunOptions): Promise<RecordRunResult> {
  const r = new GoldenRecorder(o);
  const inflight = new Set<Promise<void>>();
  const seen = new Set<string>();
  let queued = 0;
  try {
    await checkAnswers(r.target, o.backend.url, o.backend.connectTimeoutMs);
    // Detected once up front: every copy then asks for the ids its engine can name (return_token_ids).
    if (o.scoring.when !== 'never') await r.client.profile(r.target).catch(() => undefined);
    inputs: for (const file of o.inputs) {
      for await (const line of readJsonLines(file)) {
        const item = line.error === undefined ? toReplayItem(line.value) : { error: line.error };
        if ('error' in item) {
          o.onSkip?.(`${line.file}:${line.line}: ${item.error}`);
          continue;
        }
        // replay finds a prompt's golden record by this key: one record answers every repeat of it.
        const key = goldenKey(item.route, item.body);
        if (!o.keepDuplicates && seen.has(key)) {
          r.result.duplicates++;
          continue;
        }
        seen.add(key);
        while (inflight.size >= o.concurrency) await Promise.race(inflight);
        // A golden file that cannot be written, or a backend that keeps failing, stops the recording.
        if (r.out.error !== null || r.result.stopped !== null) break inputs;
        const p = r.recordInput(queued++, `${basename(file)}:${line.line}`, item).finally(() => inflight.delete(p));
        inflight.add(p);
      }
    }
    await Promise.all(inflight);
    await r.out.settled();
    if (r.out.error !== null) throw unwritableFile(o.outFile, r.out.error);
  } finally {
    await r.close();
  }
  return r.result;
}

/**
 * One request before the first prompt (`GET /v1/models`): a backend that answers nothing — a
 * host that does not resolve, a refused connection, a timeout — is refused in one line naming
 * the URL and the cause, before a golden file of failures is written; so is a backend that
 * refuses the API key. Any other answer, an error status included, means it is there.
 */
async function checkAnswers(target: ScoringTarget, url: string, connectTimeoutMs: number | undefined): Promise<void> {
  let status: number;
  try {
    ({ status } = await requestJson(target, 'GET', '/v1/models', undefined, Math.min(target.timeoutMs, 10_000)));
  } catch (err) {
    const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } };
    const c = e.cause?.code ? e.cause : e;
    const reason = failureReason({ status: 0, body: null, error: `${c.code ?? 'ERROR'}: ${c.message ?? String(err)}` });
    const timeout = c.code === 'UND_ERR_CONNECT_TIMEOUT' && connectTimeoutMs ? ` after ${connectTimeoutMs} ms` : '';
    throw new LogprobeError('LOGPROBE_UNREACHABLE', `--backend ${url} answers nothing: ${reason}${timeout}`, {
      cause: err,
    });
  }
  if (status === 401 || status === 403)
    throw new LogprobeError(
      'LOGPROBE_CONFIG',
      `--backend ${url} rejected the API key (baseline.apiKey): GET /v1/models answered ${status}`,
    );
}

/** Lines written in the order of their numbers, whatever order they come in; after the first failed write, none. */
class InOrderLines {
  private readonly ready = new Map<number, string>();
  private next = 0;
  private writing: Promise<void> = Promise.resolve();
  /** The first write error, if any. */
  error: unknown = null;

  constructor(private readonly write: (line: string) => Promise<unknown>) {}

  put(n: number, line: string): void {
    this.ready.set(n, line);
    while (this.ready.has(this.next)) {
      const text = this.ready.get(this.next)!;
      this.ready.delete(this.next++);
      this.writing = this.writing.then(() =>
        this.error !== null
          ? undefined
          : this.write(text).then(
              () => undefined,
              (err: unknown) => {
                this.error ??= err;
              },
            ),
      );
    }
  }

  settled(): Promise<void> {
    return this.writing;
  }
}

/** The recording's backend (pool, headers, scoring), what it found, and the golden file's writer in input order. */
class GoldenRecorder {
  /** The recorded backend, as the baseline side (its headers, its engine setting). */
  readonly client: BackendClient;
  readonly target: ScoringTarget;
  readonly result: RecordRunResult = {
    records: 0,
    outcomes: {},
    scoring: { ok: 0, unsupported: 0, skipped: 0, failed: 0 },
    methods: [],
    topK: null,
    problems: [],
    definition: [],
    duplicates: 0,
    stopped: null,
  };
  /** Answers that failed in a row, as they came back. */
  private failures = 0;
  /** In input order: a golden file diffs cleanly from one recording to the next. */
  readonly out: InOrderLines;
  private readonly recordOptions: Parameters<typeof buildGoldenRecord>[3];
  private done = 0;
  private readonly problem: (m: string) => void;

  constructor(private readonly o: RecordRunOptions) {
    const secretValues = o.secrets.filter((s): s is string => typeof s === 'string' && s.length > 0);
    const pool = createUpstreamPool(o.backend, {
      tlsInsecure: o.tlsInsecure,
      connections: o.concurrency,
      maxHeaderSize: 64 * 1024,
    });
    this.client = Backends.alone(
      'baseline',
      {
        ...o.backend,
        pool,
        ownsPool: true,
        headers: { role: 'baseline', apiKey: o.backend.apiKey, forwardAuth: false },
        secrets: secretValues,
      },
      o.scoring,
    );
    this.target = this.client.target();
    // One options object for every record: the redaction rule is built once (src/capture/record.ts).
    this.recordOptions = {
      includePrompts: true,
      thresholds: o.thresholds,
      secrets: o.secrets,
      redactFields: o.redactFields ?? [],
    };
    this.out = new InOrderLines((line) => o.out.write(line));
    // Printed by the CLI: an answer or a scoring error may quote the key the backend was sent.
    const rule = redactionFor(this.recordOptions);
    const secrets = recordSecrets({ clientHeaders: {} }, this.recordOptions);
    this.problem = (m) => {
      if (this.result.problems.length < 20) this.result.problems.push(rule.scrub(m, secrets) as string);
    };
  }

  close(): Promise<void> {
    return this.client.close();
  }

  /** One input: sent within the backend's logprobs cap, judged, scored, written as the `n`-th golden record. */
  async recordInput(n: number, id: string, item: ReplayItem): Promise<void> {
    const { o, result } = this;
    const sent = await this.client.send({ path: item.route, body: mirroredBody(item, o.rewrite, o.maxTokens) });
    const answer: BackendResult = sent.result;
    const { outcome, parsed } = this.judge(id, answer);
    const scored = parsed === null ? null : await this.scored(id, item, sent.body, parsed, answer.body);
    result.outcomes[outcome] = (result.outcomes[outcome] ?? 0) + 1;
    const record = buildGoldenRecord(
      {
        id,
        ts: new Date().toISOString(),
        route: routeLabel(item.route),
        path: item.route,
        request: sent.body,
        clientHeaders: {},
        baseline: answer,
        outcome,
        noiseFloor: 0,
      },
      goldenKey(item.route, item.body),
      scored,
      this.recordOptions,
    );
    this.out.put(n, `${JSON.stringify(record)}\n`);
    result.records++;
    o.onRecord?.(++this.done);
  }

  /** The answer's outcome (an error, an unreadable body, no logprobs, or usable: then its steps), each problem said. */
  private judge(
    id: string,
    answer: BackendResult,
  ): { outcome: MirrorOutcome; parsed: ReturnType<typeof parseResponse> | null } {
    if (answer.error !== null || answer.status >= 400) {
      this.problem(`${id}: the backend answered ${answer.error ?? `HTTP ${answer.status}`}`);
      if (++this.failures >= this.o.maxFailures && this.result.stopped === null)
        this.result.stopped = `${this.failures} answers in a row failed (the last, ${id}: ${failureReason(answer)})`;
      return { outcome: 'baseline_error', parsed: null };
    }
    this.failures = 0;
    const parsed = parseResponse(answer.body);
    if (parsed.format === 'unknown' || parsed.format === 'error') {
      this.problem(`${id}: ${parsed.error ?? 'not a completion response'}`);
      return { outcome: 'unparseable', parsed: null };
    }
    if (parsed.steps.length === 0) {
      this.problem(`${id}: the answer has no logprobs (${parsed.error ?? 'no tokens'})`);
      return { outcome: 'incomparable', parsed: null };
    }
    return { outcome: 'ok', parsed };
  }

  /** A usable answer's definition warnings counted, and the backend's scoring of it. */
  private async scored(
    id: string,
    item: ReplayItem,
    request: Record<string, unknown>,
    parsed: ReturnType<typeof parseResponse>,
    body: unknown,
  ): Promise<GoldenScoring> {
    const { result } = this;
    for (const w of sideChecks(parsed.steps, 'baseline')) {
      const known = result.definition.find((d) => d.check === w.check);
      if (known) known.records++;
      else result.definition.push({ ...w, at: id, records: 1 });
    }
    const scored = await scoreOwn(this.client, this.target, item, request, parsed, body, this.o.scoring);
    result.scoring[scored.outcome]++;
    if (scored.method && !result.methods.includes(scored.method)) result.methods.push(scored.method);
    if (scored.topK !== undefined) result.topK = Math.min(result.topK ?? scored.topK, scored.topK);
    if (scored.outcome === 'failed') this.problem(`${id}: scoring failed: ${scored.reason}`);
    return scored;
  }
}

/** The backend's scoring of its own answer (docs/engines.md), as the golden record keeps it. */
async function scoreOwn(
  client: BackendClient,
  target: ScoringTarget,
  item: ReplayItem,
  request: Record<string, unknown>,
  parsed: ReturnType<typeof parseResponse>,
  body: unknown,
  scoring: ScoringOptions,
): Promise<GoldenScoring> {
  if (scoring.when === 'never') return { outcome: 'skipped', reason: 'scoring is off (analysis.scoring.when: never)' };
  try {
    const source = scoringSource(item.kind, request);
    const { profile, spec } = await client.prepare(target, source, { parsed, body });
    const s = await client.score(target, profile, spec);
    return {
      outcome: 'ok',
      profile: profile.name,
      method: profile.method,
      mode: profile.mode,
      // The k the engine was scored with (within its cap), which the candidate is then asked for.
      topK: s.topK,
      promptIds: [...spec.prompt],
      continuationIds: [...spec.continuation],
      promptStart: s.promptStart,
      prompt: encodeSteps(s.prompt),
      continuation: encodeSteps(s.continuation),
    };
  } catch (err) {
    const msg = (err as Error)?.message ?? String(err);
    return { outcome: err instanceof UnsupportedError ? 'unsupported' : 'failed', reason: msg };
  }
}

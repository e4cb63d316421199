import type { ScoredSide, ScoringMode } from '../../core/scored.js';
import { readId } from '../../core/parse/values.js';
import { requestJson, ScoringError, UnsupportedError, type ScoringTarget } from '../http.js';
import type { CappedField, EngineName } from '../../metrics/labels.js';

/** The mirrored request a prompt comes from. */
export interface PromptSource {
  kind: 'chat' | 'completions';
  /** The mirrored body as sent (`prompt` or `messages`, `model`, …). */
  body: Readonly<Record<string, unknown>>;
}

/** What to score: the prompt's ids, the forced continuation's ids, how many alternatives per position. */
export interface ScoreSpec {
  model: string | undefined;
  prompt: readonly number[];
  continuation: readonly number[];
  topK: number;
  /** Prompt positions to compare, where they cost a call each (llama.cpp); engines that return them all at once return them all. */
  promptPositions: number;
  /**
   * The continuation computed as a prefill, never on the engine's cached decode state (the path
   * check): the prefill profiles always are; llama.cpp then evaluates each position fresh
   * (`cache_prompt: false`) instead of one token on its cached prefix.
   */
  prefill?: boolean;
}

/** One side's scoring and where its prompt block starts. */
export type ProfileScore = ScoredSide & {
  promptStart: number;
  /** The engine returned the forced tokens' own logprobs and no alternatives (vLLM's V2 model runner at some versions). */
  topless?: boolean;
};

/**
 * How to get token ids from an engine and score a fixed sequence on it (docs/engines.md). Each
 * profile follows its engine's own API, as read in the engines' source (docs/engines.md says
 * which versions and where).
 */
export interface EngineProfile {
  readonly name: EngineName;
  /** The engine API the scoring uses, for the `scored` block. */
  readonly method: string;
  /** One prefill pass over the whole sequence, or one position at a time over the engine's cache. */
  readonly mode: ScoringMode;
  /**
   * Fields added to the mirrored copies this engine gets, so its answer carries the generated
   * token ids (they change no token and no logprob).
   */
  readonly copyParams: Readonly<Record<string, unknown>>;
  /**
   * Whether scoring reads the engine's prefix cache: llama-server's continuation calls do
   * (`cache_prompt: true`, the decode path over the cached prefix); vLLM's prompt logprobs do not
   * (`skip_reading_prefix_cache`), nor SGLang's (`logprob_start_len: 0` caps the reused prefix at
   * 0). A scoring that does not read it says nothing of the warm path and never stands in for a
   * warm run's own positions (mirror/repeat.ts).
   */
  readonly readsCache: boolean;
  /** Whether a 2xx from {@link flush} proves the cache was emptied (vLLM's does not: its server does not check). */
  readonly flushConfirms: boolean;
  /** The request field of {@link score} whose count the engine may cap (vLLM's `--max-logprobs` on `prompt_logprobs`). */
  readonly capField: CappedField;
  /** The request's prompt as the engine tokenizes it (chat through its own template). */
  promptIds(target: ScoringTarget, source: PromptSource): Promise<number[]>;
  /** Token ids of a piece of generated text, no special tokens (when the answer carried no ids). */
  tokenize(target: ScoringTarget, text: string, model: string | undefined): Promise<number[]>;
  /** The text of token ids as the engine spells them, special tokens kept (its `/detokenize`); absent where it has none. */
  detokenize?(target: ScoringTarget, ids: readonly number[], model: string | undefined): Promise<string>;
  /** Scores prompt + continuation. */
  score(target: ScoringTarget, spec: ScoreSpec): Promise<ProfileScore>;
  /** Empties the engine's prefix cache (staging only: `mirror.repeat.flush`); Unsupported where it cannot. */
  flush(target: ScoringTarget): Promise<void>;
}

/** POSTs a cache-reset endpoint: 2xx is done; `unsupported` (status → why) is an UnsupportedError, anything else a ScoringError. */
export async function postFlush(
  target: ScoringTarget,
  path: string,
  unsupported: Readonly<Record<number, string>>,
): Promise<void> {
  // The admin key (`candidate.adminApiKey` / `baseline.adminApiKey`) where one is configured:
  // SGLang's admin endpoints refuse the plain API key once `--admin-api-key` is set.
  const t = target.adminApiKey
    ? { ...target, headers: { ...target.headers, authorization: `Bearer ${target.adminApiKey}` } }
    : target;
  const a = await requestJson(t, 'POST', path, {});
  if (a.status >= 200 && a.status < 300) return;
  const why = unsupported[a.status];
  if (why !== undefined) throw new UnsupportedError(why);
  throw new ScoringError(`${path} answered ${a.status}`);
}

/** `model` of a mirrored body, when it is a string. */
export function modelOf(body: Readonly<Record<string, unknown>>): string | undefined {
  return typeof body.model === 'string' ? body.model : undefined;
}

/** A completions prompt given as token ids (`prompt: [1, 2, 3]`), or null. */
export function idPrompt(body: Readonly<Record<string, unknown>>): number[] | null {
  const p = body.prompt;
  if (
    !Array.isArray(p) ||
    p.length === 0 ||
    !p.every((x) => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0)
  )
    return null;
  return p as number[];
}

/** The `tokens` of a tokenize answer (vLLM, SGLang, llama.cpp all name it so), as ids. */
export function tokenIds(body: Readonly<Record<string, unknown>>): number[] {
  const t = body.tokens;
  if (!Array.isArray(t)) throw new ScoringError('/tokenize answered no token ids');
  // llama.cpp's with_pieces form is [{id, piece}].
  const ids = t.map((x) => readId(typeof x === 'object' && x !== null ? (x as { id?: unknown }).id : x));
  if (!ids.every((x) => x !== undefined))
    throw new ScoringError('/tokenize answered something that is not a list of token ids');
  return ids as number[];
}

/** A string field of an engine's answer, or a ScoringError naming it. */
export function textField(body: Record<string, unknown>, field: string): string {
  const v = body[field];
  if (typeof v !== 'string') throw new ScoringError(`the answer has no string \`${field}\``);
  return v;
}

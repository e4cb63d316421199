import type { ParsedResponse, ResponseFormat, TokenStep } from '../types.js';
import { appendChatItems } from './chat.js';
import { appendCompletions, flagCollapsedTopK, newDictSizes, type DictSizes } from './completions.js';
import { hasSglangLogprobs, sglangSteps } from './sglang.js';
import { isObject, readId, type JsonObject } from './values.js';

/**
 * Builds one {@link ParsedResponse} from a response body or from the chunks of a stream. A
 * non-streaming body is treated as a stream of one chunk, so both paths share every rule: only
 * choice 0 is read, `choices: []` (the usage chunk) and empty trailing arrays add nothing, and an
 * error envelope anywhere ends the response.
 */
export function assemble(chunks: readonly unknown[], stream: boolean): ParsedResponse {
  const acc = new Accumulator(stream);
  for (const chunk of chunks) {
    if (!acc.add(chunk)) break;
  }
  return acc.finish();
}

class Accumulator {
  private steps: TokenStep[] = [];
  private readonly sizes: DictSizes = newDictSizes();
  private readonly text: string[] = [];
  private readonly tokenIds: unknown[] = [];
  private readonly flags = new Set<string>();
  private kind: 'chat' | 'completions' | null = null;
  private shape: 'items' | 'arrays' | 'sglang' | 'llamacpp' | 'responses' | null = null;
  /** A Responses stream's deltas carried logprobs (its closing `response.completed` repeats them). */
  private responseDeltas = false;
  private sawResponse = false;
  private sawLogprobs = false;
  private sglangLength = -1;
  private model: string | undefined;
  private fingerprint: string | undefined;
  private error: string | undefined;
  private errorFormat = false;

  constructor(private readonly stream: boolean) {}

  /** Takes one body or chunk; false once the response is over (an error envelope). */
  add(chunk: unknown): boolean {
    if (!isObject(chunk)) return true;
    const err = errorMessage(chunk);
    if (err !== undefined) {
      this.error = `the server returned an error: ${err}`;
      this.errorFormat = true;
      return false;
    }
    if (typeof chunk.model === 'string' && this.model === undefined) this.model = chunk.model;
    if (typeof chunk.system_fingerprint === 'string' && this.fingerprint === undefined)
      this.fingerprint = chunk.system_fingerprint;
    if (Array.isArray(chunk.choices)) this.addChoices(chunk, chunk.choices);
    else if (chunk.object === 'response' && Array.isArray(chunk.output)) this.addResponse(chunk.output);
    else if (typeof chunk.type === 'string' && chunk.type.startsWith('response.')) this.addResponseEvent(chunk);
    else if (isObject(chunk.meta_info)) this.addSglang(chunk, chunk.meta_info);
    else if (Array.isArray(chunk.completion_probabilities)) this.addLlamaNative(chunk, chunk.completion_probabilities);
    return true;
  }

  private addChoices(chunk: JsonObject, choices: unknown[]): void {
    this.sawResponse = true;
    if (choices.length > 1) this.flags.add('multipleChoices');
    const choice =
      choices.find((c) => isObject(c) && (c.index === 0 || c.index === undefined)) ??
      (this.stream ? undefined : choices[0]);
    if (!isObject(choice)) return;
    if (this.kind === null) {
      const object = typeof chunk.object === 'string' ? chunk.object : '';
      this.kind = 'message' in choice || 'delta' in choice || object.startsWith('chat.') ? 'chat' : 'completions';
    }
    const msg = isObject(choice.message) ? choice.message : isObject(choice.delta) ? choice.delta : null;
    if (msg && typeof msg.content === 'string') this.text.push(msg.content);
    else if (typeof choice.text === 'string') this.text.push(choice.text);
    if (Array.isArray(choice.token_ids)) for (const id of choice.token_ids) this.tokenIds.push(id);
    const lp = choice.logprobs;
    if (!isObject(lp)) return;
    if (Array.isArray(lp.content)) {
      this.sawLogprobs = true;
      this.shape ??= 'items';
      appendChatItems(this.steps, lp.content);
    } else if (Array.isArray(lp.tokens) || Array.isArray(lp.token_logprobs)) {
      this.sawLogprobs = true;
      this.shape ??= 'arrays';
      appendCompletions(this.steps, this.sizes, lp);
    }
  }

  /**
   * A Responses API body (`object: "response"`): the `output_text` parts of its `message` items,
   * their text and their `logprobs` (chat-shaped items: `token`, `bytes`, `logprob`,
   * `top_logprobs`). Reasoning items and tool calls carry no logprobs: skipped, as chat's are.
   */
  private addResponse(output: unknown[]): void {
    this.sawResponse = true;
    this.kind ??= 'chat';
    this.shape ??= 'responses';
    for (const item of output) {
      if (!isObject(item) || item.type !== 'message' || !Array.isArray(item.content)) continue;
      for (const part of item.content) {
        if (!isObject(part) || part.type !== 'output_text') continue;
        if (typeof part.text === 'string') this.text.push(part.text);
        if (!Array.isArray(part.logprobs)) continue;
        if (part.logprobs.length > 0) this.sawLogprobs = true;
        appendChatItems(this.steps, part.logprobs);
      }
    }
  }

  /**
   * One event of a streamed Responses answer (SSE `data:` of `response.*` events): the text and
   * logprobs of each `response.output_text.delta`; the closing `response.completed` holds the
   * whole response, read only when no delta carried logprobs (else it would repeat them).
   */
  private addResponseEvent(chunk: JsonObject): void {
    this.sawResponse = true;
    this.kind ??= 'chat';
    this.shape ??= 'responses';
    if (chunk.type === 'response.output_text.delta') {
      if (typeof chunk.delta === 'string') this.text.push(chunk.delta);
      if (Array.isArray(chunk.logprobs) && chunk.logprobs.length > 0) {
        this.sawLogprobs = true;
        this.responseDeltas = true;
        appendChatItems(this.steps, chunk.logprobs);
      }
    } else if (chunk.type === 'response.completed' && !this.responseDeltas && isObject(chunk.response)) {
      const output = chunk.response.output;
      if (Array.isArray(output)) {
        this.text.length = 0;
        this.addResponse(output);
      }
    }
  }

  /**
   * SGLang's native stream repeats the whole `meta_info` in every chunk (unless incremental
   * output is on): a chunk whose list is at least as long as what we hold replaces it, a shorter
   * one is appended.
   */
  private addSglang(chunk: JsonObject, meta: JsonObject): void {
    this.sawResponse = true;
    this.kind ??= 'completions';
    this.shape ??= 'sglang';
    if (typeof chunk.text === 'string') {
      if (this.stream && this.text.length > 0 && chunk.text.startsWith(this.text.join(''))) this.text.length = 0;
      this.text.push(chunk.text);
    }
    if (!hasSglangLogprobs(meta)) return;
    this.sawLogprobs = true;
    const steps = sglangSteps(meta);
    if (steps.length >= this.sglangLength) {
      this.steps = steps;
      this.sglangLength = steps.length;
    } else {
      for (const s of steps) this.steps.push(s);
      this.sglangLength = this.steps.length;
    }
  }

  private addLlamaNative(chunk: JsonObject, items: unknown[]): void {
    this.sawResponse = true;
    this.kind ??= 'completions';
    this.shape ??= 'llamacpp';
    this.sawLogprobs = true;
    if (typeof chunk.content === 'string') this.text.push(chunk.content);
    appendChatItems(this.steps, items);
  }

  finish(): ParsedResponse {
    const steps = this.steps;
    if (this.shape === 'arrays') flagCollapsedTopK(steps, this.sizes);
    // vLLM's `return_token_ids` puts the chosen ids beside the logprobs, one per token.
    if (this.tokenIds.length === steps.length) {
      for (let i = 0; i < steps.length; i++) {
        const id = readId(this.tokenIds[i]);
        if (id !== undefined && steps[i]!.id === undefined) steps[i]!.id = id;
      }
    }
    for (const s of steps) if (s.flags) for (const f of s.flags) this.flags.add(f);
    const joined = this.text.join('');
    const out: ParsedResponse = {
      format: this.format(),
      stream: this.stream,
      steps,
      text: joined !== '' || steps.length === 0 ? joined : steps.map((s) => s.token).join(''),
      flags: [...this.flags],
    };
    if (this.model !== undefined) out.model = this.model;
    if (this.fingerprint !== undefined) out.systemFingerprint = this.fingerprint;
    const error = this.error ?? this.emptyReason();
    if (error !== undefined) out.error = error;
    return out;
  }

  private format(): ResponseFormat {
    if (this.errorFormat) return 'error';
    if (!this.sawResponse) return 'unknown';
    if (this.shape === 'sglang') return 'sglang-native';
    if (this.shape === 'llamacpp') return 'llamacpp-native';
    if (this.shape === 'responses') return 'responses';
    if (this.kind === 'chat') return 'chat';
    return this.shape === 'items' ? 'llamacpp-completions' : 'completions';
  }

  private emptyReason(): string | undefined {
    if (!this.sawResponse)
      return 'not a completion response (no choices, output, meta_info or completion_probabilities)';
    if (!this.sawLogprobs) return 'no logprobs in the response';
    if (this.steps.length === 0) return 'no generated tokens with logprobs';
    return undefined;
  }
}

/** The message of an error envelope (OpenAI/vLLM nested, SGLang flat), else `undefined`. */
function errorMessage(chunk: JsonObject): string | undefined {
  if (isObject(chunk.error))
    return typeof chunk.error.message === 'string' ? chunk.error.message : JSON.stringify(chunk.error);
  if (typeof chunk.error === 'string') return chunk.error;
  if (chunk.object === 'error') return typeof chunk.message === 'string' ? chunk.message : 'unknown error';
  return undefined;
}

import type { ChatMessage } from './request.js';

/** How the template ends (vLLM's `/tokenize` flags; llama-server's `add_generation_prompt`). */
export interface TemplateOptions {
  /** End with `assistant:` for the reply. Default true. */
  readonly addGenerationPrompt?: boolean;
  /** Leave the last message open (no newline), to be continued. Default false. */
  readonly continueFinalMessage?: boolean;
}

/**
 * The chat template: one `role: content` line per message, then `assistant:` for the reply.
 * Deliberately plain — the toy and tiny models have no trained template, and a readable prompt
 * makes captured requests easy to inspect.
 */
export function applyChatTemplate(messages: readonly ChatMessage[], options: TemplateOptions = {}): string {
  let out = '';
  messages.forEach((m, i) => {
    out += `${m.role}: ${m.content}`;
    if (!(options.continueFinalMessage && i === messages.length - 1)) out += '\n';
  });
  return options.addGenerationPrompt === false || options.continueFinalMessage ? out : `${out}assistant:`;
}

/** The same template in Jinja, as llama-server's `/props` `chat_template` reports a model's template. */
export const CHAT_TEMPLATE_JINJA =
  "{%- for message in messages -%}\n  {{- message.role + ': ' + message.content + '\\n' -}}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n  {{- 'assistant:' -}}\n{%- endif -%}";

import type { ChatMessage } from './request.js';

/** How the template ends (vLLM's `/tokenize` flags; llama-server's `add_generation_prompt`). */
export interface TemplateOptions {
  /** End with `assistant:` for the reply. Default true. */
  readonly addGenerationPrompt?: boolean;
  /** Leave the last message open (no newline), to be continued. Default false. */
  readonly continueFinalMessage?: boolean;
}

/**
 * llama.cpp's built-in template names the engine renders (`--chat-template NAME`), each as
 * `llm_chat_apply_template` in llama.cpp's src/llama-chat.cpp writes it (`LLM_CHAT_TEMPLATES`).
 */
export const CHAT_TEMPLATE_NAMES = [
  'chatml',
  'llama2',
  'llama2-sys',
  'llama2-sys-bos',
  'llama2-sys-strip',
  'mistral-v7',
  'phi3',
  'zephyr',
  'gemma',
  'vicuna',
  'vicuna-orca',
] as const;
/** A built-in template name, or null for the engine's own plain template. */
export type ChatTemplateName = (typeof CHAT_TEMPLATE_NAMES)[number];

/** Whether `name` is a built-in template. */
export function isChatTemplateName(name: string): name is ChatTemplateName {
  return (CHAT_TEMPLATE_NAMES as readonly string[]).includes(name);
}

/**
 * The chat template: by default one `role: content` line per message, then `assistant:` for the
 * reply — deliberately plain: the toy and tiny models have no trained template, and a readable
 * prompt makes captured requests easy to inspect. With `template`, llama.cpp's built-in
 * template of that name.
 */
export function applyChatTemplate(
  messages: readonly ChatMessage[],
  options: TemplateOptions = {},
  template: ChatTemplateName | null = null,
): string {
  if (template !== null) return builtIn(template, messages, options.addGenerationPrompt !== false);
  let out = '';
  messages.forEach((m, i) => {
    out += `${m.role}: ${m.content}`;
    if (!(options.continueFinalMessage && i === messages.length - 1)) out += '\n';
  });
  return options.addGenerationPrompt === false || options.continueFinalMessage ? out : `${out}assistant:`;
}

const trim = (s: string): string => s.replace(/^[ \t\n\r\f\v]+|[ \t\n\r\f\v]+$/g, '');

/** `llm_chat_apply_template(tmpl, chat, dest, add_ass)` for the names above. */
function builtIn(t: ChatTemplateName, chat: readonly ChatMessage[], addAss: boolean): string {
  let ss = '';
  switch (t) {
    case 'chatml':
      for (const m of chat) ss += `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`;
      return addAss ? `${ss}<|im_start|>assistant\n` : ss;
    case 'llama2':
    case 'llama2-sys':
    case 'llama2-sys-bos':
    case 'llama2-sys-strip':
      return llama2(t, chat);
    case 'mistral-v7':
      for (const m of chat) {
        if (m.role === 'system') ss += `[SYSTEM_PROMPT] ${m.content}[/SYSTEM_PROMPT]`;
        else if (m.role === 'user') ss += `[INST] ${m.content}[/INST]`;
        else ss += ` ${m.content}</s>`;
      }
      return ss;
    case 'phi3':
      for (const m of chat) ss += `<|${m.role}|>\n${m.content}<|end|>\n`;
      return addAss ? `${ss}<|assistant|>\n` : ss;
    case 'zephyr':
      for (const m of chat) ss += `<|${m.role}|>\n${m.content}<|endoftext|>\n`;
      return addAss ? `${ss}<|assistant|>\n` : ss;
    case 'gemma':
      return gemma(chat, addAss);
    case 'vicuna':
    case 'vicuna-orca':
      for (const m of chat) {
        if (m.role === 'system') ss += t === 'vicuna-orca' ? `SYSTEM: ${m.content}\n` : `${m.content}\n\n`;
        else if (m.role === 'user') ss += `USER: ${m.content}\n`;
        else if (m.role === 'assistant') ss += `ASSISTANT: ${m.content}</s>\n`;
      }
      return addAss ? `${ss}ASSISTANT:` : ss;
  }
}

/** The llama2 family; add_ass is not read: the open "[/INST]" is the generation prompt. */
function llama2(t: ChatTemplateName, chat: readonly ChatMessage[]): string {
  const supportSystem = t !== 'llama2';
  const bosInside = t === 'llama2-sys-bos';
  const strip = t === 'llama2-sys-strip';
  let inside = true; // skip BOS at the beginning
  let ss = '[INST] ';
  for (const m of chat) {
    const content = strip ? trim(m.content) : m.content;
    if (!inside) {
      inside = true;
      ss += bosInside ? '<s>[INST] ' : '[INST] ';
    }
    if (m.role === 'system') ss += supportSystem ? `<<SYS>>\n${content}\n<</SYS>>\n\n` : `${content}\n`;
    else if (m.role === 'user') ss += `${content} [/INST]`;
    else {
      ss += `${content}</s>`;
      inside = false;
    }
  }
  return ss;
}

/** Gemma: no system role (merged into the next user turn), `assistant` is `model`, contents trimmed. */
function gemma(chat: readonly ChatMessage[], addAss: boolean): string {
  let ss = '';
  let system = '';
  for (const m of chat) {
    if (m.role === 'system') {
      system += trim(m.content);
      continue;
    }
    const role = m.role === 'assistant' ? 'model' : m.role;
    ss += `<start_of_turn>${role}\n`;
    if (system !== '' && role !== 'model') {
      ss += `${system}\n\n`;
      system = '';
    }
    ss += `${trim(m.content)}<end_of_turn>\n`;
  }
  return addAss ? `${ss}<start_of_turn>model\n` : ss;
}

/** The same template in Jinja, as llama-server's `/props` `chat_template` reports a model's template. */
export const CHAT_TEMPLATE_JINJA =
  "{%- for message in messages -%}\n  {{- message.role + ': ' + message.content + '\\n' -}}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n  {{- 'assistant:' -}}\n{%- endif -%}";

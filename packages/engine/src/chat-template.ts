import type { ChatMessage } from './request.js';

/**
 * The chat template: one `role: content` line per message, then `assistant:` for the reply.
 * Deliberately plain — the toy and tiny models have no trained template, and a readable prompt
 * makes captured requests easy to inspect.
 */
export function applyChatTemplate(messages: readonly ChatMessage[]): string {
  let out = '';
  for (const m of messages) out += `${m.role}: ${m.content}\n`;
  return `${out}assistant:`;
}

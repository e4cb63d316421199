import type { EngineName } from '../../metrics/labels.js';
import type { EngineProfile } from './profile.js';
import { vllmProfile } from './vllm.js';
import { sglangProfile } from './sglang.js';
import { llamacppProfile } from './llamacpp.js';
import { openaiProfile } from './openai.js';

/** Every engine profile by name (docs/engines.md). */
export const PROFILES: Readonly<Record<EngineName, EngineProfile>> = {
  vllm: vllmProfile,
  sglang: sglangProfile,
  llamacpp: llamacppProfile,
  openai: openaiProfile,
};

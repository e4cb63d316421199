/**
 * @logprobe/engine: logprobe's test doubles and the demo's engines — a seeded simulated language
 * model and llama.cpp on a generated tiny model, behind an OpenAI-compatible HTTP server with
 * injectable faults. Nothing here loads node-llama-cpp until a llama engine is asked for
 * (`@logprobe/engine/llama`, or `runEngineCli(['--llama', …])`).
 */
export type { CacheState, CacheUse, EngineModel, ModelSequence, NextTokenDistribution, StartOptions } from './model.js';
export {
  startEngineServer,
  type EngineLog,
  type EngineServerHandle,
  type EngineServerOptions,
} from './openai-server.js';
export { ENGINE_APIS, type EngineApi } from './api/profile.js';
export { createSimModel, type SimAdapterOptions, type SimOptions } from './sim/model.js';
export { SERVER_FAULT_FORMS } from './faults.js';
export { FAULT_FORMS, InvalidFaultError, parseFault } from './llama/faults.js';
export { runEngineCli, EngineUsageError } from './cli.js';
export {
  chooseEngines,
  startSimEngines,
  simFaultOptions,
  type DemoEngineApi,
  type DemoEngines,
} from './demo/engines.js';
export {
  spawnLlamaEngine,
  EngineStartError,
  failureReason,
  type LlamaEngineProcess,
  type LlamaEngineProcessOptions,
} from './demo/engine-process.js';
export {
  DEFAULT_LLAMA_FAULT,
  DEMO_ENGINES,
  SIM_DEMO_FAULTS,
  UnknownDemoFaultError,
  planFault,
  faultLabel,
  needsPrefixCache,
  type DemoEngineChoice,
  type DemoFaultPlan,
  type SimDemoFault,
} from './demo/faults.js';

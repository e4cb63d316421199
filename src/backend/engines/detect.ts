import { requestJson, type ScoringTarget } from '../http.js';
import type { EngineName } from '../../metrics/labels.js';

/** How long one detection probe may take: detection runs once per backend, off the client path. */
const PROBE_MS = 3000;

/**
 * Tells which engine a backend is, with the fewest requests: `GET /v1/models` (`owned_by`:
 * `vllm`, `sglang`, `llamacpp`; llama-server also answers `Server: llama.cpp`), then the engines'
 * own info endpoints (`/props` with `build_info`: llama.cpp; `/version`: vLLM; `/get_server_info`
 * or `/server_info`: SGLang). vLLM and SGLang both run on uvicorn, so the `server` header cannot
 * tell them apart. Anything else is an OpenAI-compatible server. Throws only when the backend
 * cannot be reached at all (the caller retries later).
 */
export async function detectEngine(target: ScoringTarget): Promise<{ engine: EngineName; evidence: string }> {
  const models = await requestJson(target, 'GET', '/v1/models', undefined, PROBE_MS);
  if (models.server?.toLowerCase().startsWith('llama.cpp'))
    return { engine: 'llamacpp', evidence: `server: ${models.server}` };
  const data = (models.body as { data?: Array<{ owned_by?: unknown }> } | null)?.data;
  const owner = Array.isArray(data) ? data.map((m) => m?.owned_by).find((o) => typeof o === 'string') : undefined;
  if (owner === 'vllm' || owner === 'sglang' || owner === 'llamacpp')
    return { engine: owner, evidence: `/v1/models owned_by ${owner}` };
  const probe = async (path: string, test: (b: unknown) => boolean): Promise<boolean> => {
    try {
      const a = await requestJson(target, 'GET', path, undefined, PROBE_MS);
      return a.status === 200 && test(a.body);
    } catch {
      return false;
    }
  };
  const has = (key: string) => (b: unknown) => typeof b === 'object' && b !== null && key in b;
  if (await probe('/props', has('build_info'))) return { engine: 'llamacpp', evidence: '/props build_info' };
  if (await probe('/version', has('version'))) return { engine: 'vllm', evidence: '/version' };
  if ((await probe('/get_server_info', has('version'))) || (await probe('/server_info', has('version'))))
    return { engine: 'sglang', evidence: '/get_server_info' };
  return {
    engine: 'openai',
    evidence: owner === undefined ? 'no engine-specific endpoint' : `/v1/models owned_by ${String(owner)}`,
  };
}

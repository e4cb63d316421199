import { requestJson, type JsonAnswer, type ScoringTarget } from '../http.js';
import { failureReason, refusesKey } from '../failure.js';
import type { EngineName } from '../../metrics/labels.js';

/** How long one detection probe may take: detection runs once per backend, off the client path. */
const PROBE_MS = 3000;

/**
 * The backend refused the key detection was sent (401/403 to `GET /v1/models`): no engine is
 * told from an error body. `answer` is what it said; the caller names the key.
 */
export class KeyRefusedError extends Error {
  override readonly name = 'KeyRefusedError';
  constructor(
    message: string,
    readonly answer: { status: number; body: unknown },
  ) {
    super(message);
  }
}

/**
 * Tells which engine a backend is, with the fewest requests: `GET /v1/models` (`owned_by`:
 * `vllm`, `sglang`, `llamacpp`; llama-server also answers `Server: llama.cpp`), then the engines'
 * own info endpoints (`/props` with `build_info`: llama.cpp; `/version`: vLLM; `/get_server_info`
 * or `/server_info`: SGLang). vLLM and SGLang both run on uvicorn, so the `server` header cannot
 * tell them apart. Anything else is an OpenAI-compatible server. Throws when `/v1/models` gets
 * no answer (an Error naming detection, the path and the cause; the caller retries later) or
 * answers 401/403 ({@link KeyRefusedError}: an answer that refuses the key tells no engine).
 */
export async function detectEngine(target: ScoringTarget): Promise<{ engine: EngineName; evidence: string }> {
  let models: JsonAnswer;
  try {
    models = await requestJson(target, 'GET', '/v1/models', undefined, PROBE_MS);
  } catch (err) {
    const e = err as { code?: string; message?: string };
    const cause =
      e.code === 'UND_ERR_HEADERS_TIMEOUT'
        ? `no answer within ${PROBE_MS} ms (${e.code})`
        : failureReason({ status: 0, body: null, error: `${e.code ?? 'ERROR'}: ${e.message ?? String(err)}` });
    throw new Error(`engine detection failed: GET /v1/models: ${cause}`, { cause: err });
  }
  if (refusesKey(models.status))
    throw new KeyRefusedError(`engine detection: GET /v1/models answered ${failureReason(models)}`, {
      status: models.status,
      body: models.body,
    });
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

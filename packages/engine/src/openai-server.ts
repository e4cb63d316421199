/**
 * The OpenAI-compatible engine server around any `EngineModel` (the simulated model, the
 * llama.cpp model): `/v1/completions`, `/v1/chat/completions`, `/v1/models`, `/health`, and —
 * with `api` — the native endpoints of vLLM, SGLang or llama-server in their own shapes
 * (`src/api/`). Plain `node:http` with keep-alive, so it is cheap enough to be the upstream of a
 * proxy benchmark. Records every request, applies server-level faults, and stops generating
 * when a client goes away.
 */
import { randomBytes, randomInt } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { apiProfile, RawHttpError } from './api/profile.js';
import { routeFor } from './api/routes.js';
import { SGLANG_VERSION, sglangAuth } from './api/sglang.js';
import { parseEngineVersion } from './api/version.js';
import { VLLM_VERSION } from './api/vllm.js';
import { VLLM_MAX_LOGPROBS } from './api/vllm-completions.js';
import { EngineHttpError } from './errors.js';
import type { EngineModel } from './model.js';
import { NO_FAULTS, parseServerFaults, type ServerFaults } from './faults.js';
import { TokenJson } from './format.js';
import { GenerationAborted } from './generate.js';
import { RequestQueue } from './queue.js';
import { RequestRecorder, type RecordedRequest } from './recorder.js';
import type { EngineLog, EngineServerEvents, EngineServerHandle, EngineServerOptions } from './server-options.js';
import { isChatTemplateName, CHAT_TEMPLATE_NAMES } from './chat-template.js';
import {
  LOGPROBS_MODES,
  sendJson,
  sleep,
  type LogprobsMode,
  type Route,
  type RouteContext,
  type ServerSettings,
} from './route.js';

export type { EngineLog, EngineServerEvents, EngineServerHandle, EngineServerOptions } from './server-options.js';

const NOOP_LOG: EngineLog = { info() {}, warn() {}, error() {} };

function readBody(req: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      // Past the limit the rest is read and dropped, so the client still gets its 413.
      if (size <= limit) chunks.push(c);
    });
    req.on('end', () => {
      if (size > limit) reject(new EngineHttpError(413, `the request body exceeds ${limit} bytes`));
      else resolve(Buffer.concat(chunks).toString('utf8'));
    });
    req.on('error', reject);
  });
}

function isStreamRequest(raw: string): boolean {
  try {
    return (JSON.parse(raw) as { stream?: unknown } | null)?.stream === true;
  } catch {
    return false;
  }
}

function toFaults(f: ServerFaults | string | readonly string[] | undefined): ServerFaults {
  if (f === undefined) return NO_FAULTS;
  if (typeof f === 'string' || Array.isArray(f)) return parseServerFaults(f as string | readonly string[]);
  return f as ServerFaults;
}

/** What every request of one server reads: fixed when it starts. */
interface ServerParts {
  model: EngineServerOptions['model'];
  /** The models served, by id: the base model and its adapters. */
  served: ReadonlyMap<string, EngineModel>;
  /** A request naming a model the engine does not serve is a 404 (vLLM `_check_model`). */
  strictModel: boolean;
  log: EngineLog;
  api: ReturnType<typeof apiProfile>;
  queue: RequestQueue;
  recorder: RequestRecorder;
  settings: ServerSettings;
  tokens: TokenJson;
  events: EventEmitter<EngineServerEvents>;
  /** The controllers of the requests in flight, aborted when the server closes. */
  active: Set<AbortController>;
  bodyLimit: number;
  maxContext: number;
  seedBase: number;
  idBase: string;
  fingerprint: string;
  tokenDelayMs: number;
}

/** What changes while the server runs. */
interface ServerState {
  faults: ServerFaults;
  /** Generations so far: the next request seed and id. */
  counter: number;
  aborted: number;
  completed: number;
  closing: boolean;
}

/** Starts the engine server; resolves once it listens. */
export async function startEngineServer(options: EngineServerOptions): Promise<EngineServerHandle> {
  const api = apiProfile(options.api ?? 'logprobe');
  const prefixCache = options.prefixCache ?? api.prefixCacheDefault;
  const requested = options.concurrency === undefined ? 1 : options.concurrency <= 0 ? Infinity : options.concurrency;
  // One slot: with the cache on, requests take turns, so "the previous request" is well defined.
  const concurrency = prefixCache ? 1 : requested;
  const queue = new RequestQueue(concurrency, options.maxQueue ?? 1024);
  const recorder = await RequestRecorder.create(options.recordLimit ?? 10_000, options.requestLog);
  const seedBase = options.requestSeedBase ?? randomInt(0, 2 ** 31);
  const idBase = randomBytes(6).toString('hex');
  const settings = serverSettings(options, api, prefixCache, queue);
  const served = servedModels(options.model);
  const parts: ServerParts = {
    model: options.model,
    served,
    strictModel: options.strictModel ?? served.size > 1,
    log: options.log ?? NOOP_LOG,
    api,
    queue,
    recorder,
    settings,
    tokens: new TokenJson(options.model),
    events: new EventEmitter<EngineServerEvents>(),
    active: new Set<AbortController>(),
    bodyLimit: options.bodyLimitBytes ?? 32 * 1024 * 1024,
    maxContext: options.maxContext ?? 32_768,
    seedBase,
    idBase,
    fingerprint: options.systemFingerprint ?? 'fp_logprobe',
    tokenDelayMs: options.tokenDelayMs ?? 0,
  };
  const state: ServerState = { faults: toFaults(options.faults), counter: 0, aborted: 0, completed: 0, closing: false };
  const server: Server = createServer(
    { noDelay: true, keepAlive: true },
    (req, res) => void handle(parts, state, req, res),
  );
  // Longer than common client pools keep idle sockets, so the server is not the side that closes.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  const host = options.host ?? '127.0.0.1';
  try {
    await listen(server, options.port ?? 0, host);
  } catch (err) {
    await recorder.close();
    throw err;
  }
  const addr = server.address() as AddressInfo;
  settings.port = addr.port;
  parts.log.info({ host, port: addr.port, model: parts.model.id, api: api.api, prefixCache }, 'engine listening');
  return serverHandle(server, parts, state, host, addr.port);
}

/** The base model and its adapters by id; an id served twice is a RangeError. */
function servedModels(model: EngineModel): Map<string, EngineModel> {
  const served = new Map<string, EngineModel>([[model.id, model]]);
  for (const a of model.adapters ?? []) {
    if (served.has(a.id)) throw new RangeError(`model id '${a.id}' is served twice (adapters of '${model.id}')`);
    served.set(a.id, a);
  }
  return served;
}

/**
 * The model a generation request asks for. vLLM (serving_engine.py `_check_model`,
 * `_maybe_get_adapters`): `model` absent or the base's id → the base, an adapter's name → that
 * adapter, anything else → 404 "The model `X` does not exist." (NotFoundError). SGLang: `/generate`
 * names the adapter in `lora_path`; its OpenAI routes take `model` as `adapter` or `base:adapter`.
 * llama-server ignores `model`.
 */
function requestedModel(p: ServerParts, path: string, raw: string): EngineModel {
  const base = p.model;
  if (p.api.api === 'llamacpp' || (p.served.size === 1 && !p.strictModel)) return base;
  let body: unknown;
  try {
    body = JSON.parse(raw);
  } catch {
    return base; // the route answers a body that is not JSON in its own words
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return base;
  const b = body as Record<string, unknown>;
  if (p.api.api === 'sglang') {
    if (path === '/generate') {
      const lora = b['lora_path'];
      if (typeof lora !== 'string') return base;
      const m = p.served.get(lora);
      if (m && m !== base) return m;
      throw new EngineHttpError(400, `LoRA adapter '${lora}' is not loaded`, 'lora_path');
    }
    const name = b['model'];
    if (typeof name !== 'string') return base;
    const adapter = p.served.get(name) ?? p.served.get(name.slice(name.lastIndexOf(':') + 1));
    return adapter ?? base;
  }
  const name = b['model'];
  if (name === undefined || name === null || name === '') return base;
  const m = typeof name === 'string' ? p.served.get(name) : undefined;
  if (m) return m;
  if (!p.strictModel) return base;
  const shown = typeof name === 'string' ? name : JSON.stringify(name);
  if (p.api.api === 'vllm') throw new EngineHttpError(404, `The model \`${shown}\` does not exist.`);
  // OpenAI's own words for an unknown model.
  throw new EngineHttpError(
    404,
    `The model \`${shown}\` does not exist or you do not have access to it.`,
    null,
    'invalid_request_error',
    'model_not_found',
  );
}

/** The settings routes read, checked: a bad engineVersion or maxLogprobs throws a RangeError. */
function serverSettings(
  options: EngineServerOptions,
  api: ServerParts['api'],
  prefixCache: boolean,
  queue: RequestQueue,
): ServerSettings {
  if (options.engineVersion !== undefined && parseEngineVersion(options.engineVersion) === null) {
    throw new RangeError(`engineVersion must be a release number such as 0.11.0, got '${options.engineVersion}'`);
  }
  if (options.maxLogprobs !== undefined && !(Number.isInteger(options.maxLogprobs) && options.maxLogprobs >= -1)) {
    throw new RangeError(`maxLogprobs must be an integer ≥ -1, got ${options.maxLogprobs}`);
  }
  if (options.chatTemplate !== undefined && !isChatTemplateName(options.chatTemplate)) {
    throw new RangeError(
      `chatTemplate must be one of ${CHAT_TEMPLATE_NAMES.join(', ')}, got '${options.chatTemplate}'`,
    );
  }
  if (options.logprobsMode !== undefined && !(LOGPROBS_MODES as readonly string[]).includes(options.logprobsMode)) {
    throw new RangeError(`logprobsMode must be one of ${LOGPROBS_MODES.join(', ')}, got '${options.logprobsMode}'`);
  }
  return {
    chatTemplate:
      options.chatTemplate !== undefined && isChatTemplateName(options.chatTemplate) ? options.chatTemplate : null,
    logprobsMode: (options.logprobsMode ?? 'raw_logprobs') as LogprobsMode,
    responsesStore: options.responsesStore ?? false,
    responses: new Map(),
    prefixCache,
    devMode: options.devMode ?? false,
    slotSavePath: options.slotSavePath ?? null,
    promptTokensDetails: options.promptTokensDetails ?? false,
    engineVersion:
      options.engineVersion ?? (api.api === 'vllm' ? VLLM_VERSION : api.api === 'sglang' ? SGLANG_VERSION : null),
    maxLogprobs: options.maxLogprobs ?? VLLM_MAX_LOGPROBS,
    v2ModelRunner: options.v2ModelRunner ?? false,
    batchInvariant: options.batchInvariant ?? false,
    enableCacheReport: options.enableCacheReport ?? false,
    apiKey: options.apiKey ?? null,
    adminApiKey: options.adminApiKey ?? null,
    queue,
    host: options.host ?? '127.0.0.1',
    port: 0,
  };
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/** What a route sees of one request: its seed and id come from the count of generations. */
function context(
  p: ServerParts,
  st: ServerState,
  req: IncomingMessage,
  res: ServerResponse,
  route: Route,
  at: { path: string; query: URLSearchParams; raw: string; signal: AbortSignal },
): RouteContext {
  const model = route.generation ? requestedModel(p, at.path, at.raw) : p.model;
  // Only generations count: request seeds and ids run as they always did, whatever side requests come between.
  const n = route.generation ? st.counter++ : st.counter;
  const prefix = route.idPrefix ?? 'cmpl';
  return {
    model,
    res,
    signal: at.signal,
    requestSeed: (Math.imul(p.seedBase ^ n, 0x9e3779b1) ^ n) >>> 0,
    faults: st.faults,
    tokens: p.tokens,
    meta: {
      id: `${prefix === '' ? '' : `${prefix}-`}${p.idBase}${n.toString(16).padStart(prefix === '' ? 20 : 6, '0')}`,
      created: Math.floor(Date.now() / 1000),
      model: model.id,
      fingerprint: p.fingerprint,
    },
    maxContext: p.maxContext,
    tokenDelayMs: p.tokenDelayMs,
    api: p.api,
    server: p.settings,
    method: req.method ?? 'GET',
    path: at.path,
    query: at.query,
    raw: at.raw,
  };
}

/** A generation takes a slot of the queue, then suffers the faults set, then is served. */
async function generation(
  queue: RequestQueue,
  req: IncomingMessage,
  ctx: RouteContext,
  route: Route,
  deliberate: () => void,
): Promise<void> {
  const f = ctx.faults;
  const { res, raw, signal } = ctx;
  const release = await queue.acquire(signal);
  try {
    if (f.slowMs > 0) await sleep(f.slowMs, signal);
    if (f.reset) {
      deliberate();
      req.socket.destroy();
      return;
    }
    if (f.http500) throw new EngineHttpError(500, 'simulated internal server error (fault http500)');
    if (f.garbage) {
      if (isStreamRequest(raw)) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end('data: {"id":"garbage","choices":[{"text": <<not json>>\n\ndata: [DONE]\n\n');
      } else {
        sendJson(res, 200, '<html><body>502 Bad Gateway</body></html> {"not": json');
      }
      return;
    }
    await route.serve(ctx);
  } finally {
    release();
  }
}

async function handle(p: ServerParts, st: ServerState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { api, settings } = p;
  const method = req.method ?? 'GET';
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  const route = routeFor(api.api, path);
  const controller = new AbortController();
  let deliberate = false;
  if (api.serverHeader !== null) res.setHeader('server', api.serverHeader);
  res.on('close', () => {
    p.active.delete(controller);
    if (res.writableFinished) {
      if (res.statusCode === 200 && route?.generation) st.completed++;
      return;
    }
    controller.abort(new GenerationAborted('the client went away'));
    if (deliberate || st.closing) return;
    st.aborted++;
    p.events.emit('aborted', { method, path });
  });
  p.active.add(controller);
  try {
    const raw = await readBody(req, p.bodyLimit);
    const record: RecordedRequest = { method, path, headers: req.headers, body: raw, receivedAt: Date.now() };
    p.recorder.record(record);
    p.events.emit('request', record);
    // SGLang's key middleware runs before routing: an unknown path without the key is a 401 too.
    const denied = api.api === 'sglang' ? sglangAuth(settings, route, method, path, req.headers) : null;
    if (denied) throw denied;
    if (route === undefined) throw api.notFound(method, path);
    if (!route.methods.includes(method)) throw api.wrongMethod(method, path);
    const query = new URLSearchParams(q < 0 ? '' : url.slice(q + 1));
    const ctx = context(p, st, req, res, route, { path, query, raw, signal: controller.signal });
    if (route.generation) await generation(p.queue, req, ctx, route, () => (deliberate = true));
    else await route.serve(ctx);
  } catch (err) {
    if (controller.signal.aborted || res.destroyed) {
      // The client is gone, or the server is closing: nothing more to say on this socket.
      res.destroy();
      return;
    }
    sendError(p, res, err, path);
  }
}

/** A failed request's answer in the API's own error shape; mid-stream, an error event ends the stream. */
function sendError(p: ServerParts, res: ServerResponse, err: unknown, path: string): void {
  const httpErr =
    err instanceof EngineHttpError
      ? err
      : new EngineHttpError(500, `the engine failed: ${err instanceof Error ? err.message : String(err)}`);
  if (!(err instanceof EngineHttpError)) p.log.error({ err, path }, 'engine request failed');
  const body = p.api.errorBody(httpErr, path);
  if (res.headersSent) {
    // Mid-stream: an error event, then the end of the stream, as vLLM does.
    res.end(`data: ${body}\n\ndata: [DONE]\n\n`);
  } else {
    sendJson(res, httpErr.status, body, httpErr instanceof RawHttpError ? { 'content-type': httpErr.contentType } : {});
  }
}

function serverHandle(server: Server, p: ServerParts, st: ServerState, host: string, port: number): EngineServerHandle {
  const urlHost = host.includes(':') ? `[${host}]` : host;
  let closePromise: Promise<void> | undefined;
  return {
    url: `http://${urlHost}:${port}`,
    host,
    port,
    requests: p.recorder.requests,
    get aborted() {
      return st.aborted;
    },
    get completed() {
      return st.completed;
    },
    events: p.events,
    get faults() {
      return st.faults;
    },
    api: p.api.api,
    prefixCache: p.settings.prefixCache,
    setFaults(f) {
      st.faults = toFaults(f);
    },
    close() {
      closePromise ??= (async () => {
        st.closing = true;
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        for (const c of p.active) c.abort(new GenerationAborted('the engine is shutting down'));
        // Aborted streams end within a step; anything still open after a grace period is cut.
        const timer = setTimeout(() => server.closeAllConnections(), 2000);
        await closed;
        clearTimeout(timer);
        await p.recorder.close();
      })();
      return closePromise;
    },
  };
}

import http, { type IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import { request } from 'undici';
import { listenLocal } from './upstream.js';

/**
 * A test double of an LLM server on port 0 whose behaviour is scripted per request: answer any
 * bytes, hang, close or reset the connection before or in the middle of the answer, or forward to
 * a real (simulated) engine and alter its answer. Connections may also be refused at accept.
 */

/** A request as the fault server saw it. */
export interface FaultRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** The body parsed as a JSON object, or null. */
  json: Record<string, unknown> | null;
  /** 0-based arrival index. */
  index: number;
  /** Whether this is a mirrored copy (logprobe's rewrite sets `repetition_penalty` and `seed`). */
  mirrored: boolean;
}

/** What to do with one request. */
export type FaultReply =
  /** Answer these bytes. */
  | { type: 'respond'; status?: number; headers?: Record<string, string>; body: string }
  /** Close the connection without answering. */
  | { type: 'close' }
  /** Reset (RST) the connection without answering. */
  | { type: 'reset' }
  /** Never answer (the connection stays open until the client gives up or the server closes). */
  | { type: 'hang' }
  /** Send the head with a content-length larger than the body, the body, then close. */
  | { type: 'truncate'; status?: number; headers?: Record<string, string>; body: string; missing: number }
  /** Send the head and the first `bytes` of the body, then reset the connection. */
  | { type: 'resetMidBody'; status?: number; headers?: Record<string, string>; body: string; bytes: number };

export type FaultScript = (req: FaultRequest) => FaultReply | Promise<FaultReply>;

export interface FaultServer {
  url: string;
  port: number;
  seen: FaultRequest[];
  setScript(script: FaultScript): void;
  /** Drop new connections as soon as they are accepted: `close` (FIN) or `reset` (RST); false to accept again. */
  refuse(mode: false | 'close' | 'reset'): void;
  close(): Promise<void>;
}

/** True for a body that logprobe's mirror rewrite produced. */
export function isMirrorCopy(json: Record<string, unknown> | null): boolean {
  return json !== null && json.repetition_penalty === 1 && typeof json.seed === 'number' && json.temperature === 0;
}

/** What a real server answered. */
export interface Forwarded {
  status: number;
  contentType: string;
  text: string;
}

/** Sends the request to another server (a sim engine) and returns its answer. */
export async function forward(url: string, req: FaultRequest, body: string = req.body): Promise<Forwarded> {
  const res = await request(`${url}${req.path}`, {
    method: req.method as 'POST',
    body,
    headers: { 'content-type': 'application/json' },
  });
  const text = await res.body.text();
  return { status: res.statusCode, contentType: String(res.headers['content-type'] ?? 'application/json'), text };
}

/** A reply carrying a forwarded answer, optionally altered. */
export function relay(f: Forwarded, transform: (text: string) => string = (t) => t): FaultReply {
  return { type: 'respond', status: f.status, headers: { 'content-type': f.contentType }, body: transform(f.text) };
}

/** An OpenAI-style error body. */
export function errorBody(message: string, type = 'BadRequestError', code: number | null = 400): string {
  return JSON.stringify({ error: { message, type, param: null, code } });
}

/** A URL where nothing listens (connection refused). */
export async function deadUrl(): Promise<string> {
  const server = http.createServer();
  const { url } = await listenLocal(server);
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return url;
}

export async function startFaultServer(script: FaultScript): Promise<FaultServer> {
  let current = script;
  let refusing: false | 'close' | 'reset' = false;
  const seen: FaultRequest[] = [];
  const sockets = new Set<Socket>();
  const server = http.createServer({ keepAlive: true }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let json: Record<string, unknown> | null = null;
      try {
        const v = JSON.parse(body) as unknown;
        if (v !== null && typeof v === 'object' && !Array.isArray(v)) json = v as Record<string, unknown>;
      } catch {
        // not JSON: json stays null
      }
      const entry: FaultRequest = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body,
        json,
        index: seen.length,
        mirrored: isMirrorCopy(json),
      };
      seen.push(entry);
      void Promise.resolve()
        .then(() => current(entry))
        .then((reply) => {
          const socket = req.socket;
          switch (reply.type) {
            case 'respond':
              res.writeHead(reply.status ?? 200, {
                'content-type': 'application/json',
                ...reply.headers,
                'content-length': String(Buffer.byteLength(reply.body)),
              });
              res.end(reply.body);
              return;
            case 'close':
              socket.destroy();
              return;
            case 'reset':
              socket.resetAndDestroy();
              return;
            case 'hang':
              return;
            case 'truncate': {
              const declared = Buffer.byteLength(reply.body) + reply.missing;
              res.writeHead(reply.status ?? 200, {
                'content-type': 'application/json',
                ...reply.headers,
                'content-length': String(declared),
              });
              res.write(reply.body, () => setTimeout(() => socket.destroy(), 10));
              return;
            }
            case 'resetMidBody': {
              const bytes = Buffer.from(reply.body).subarray(0, reply.bytes);
              res.writeHead(reply.status ?? 200, {
                'content-type': 'application/json',
                ...reply.headers,
                'content-length': String(Buffer.byteLength(reply.body)),
              });
              res.write(bytes, () => setTimeout(() => socket.resetAndDestroy(), 10));
              return;
            }
          }
        })
        .catch((err: unknown) => res.destroy(err as Error));
    });
  });
  server.on('connection', (socket: Socket) => {
    if (refusing === 'close') return socket.destroy();
    if (refusing === 'reset') return socket.resetAndDestroy();
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  const { url, port } = await listenLocal(server);
  return {
    url,
    port,
    seen,
    setScript: (s) => {
      current = s;
    },
    refuse: (mode) => {
      refusing = mode;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

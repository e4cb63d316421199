import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

const DIR = new URL('../fixtures/llama-server-b4748/', import.meta.url);
const file = (name: string): string => readFileSync(new URL(name, DIR), 'utf8');

/** The prompt every recorded request used (fixtures README). */
export const RECORDED_PROMPT = 'The cache holds key 3 and value';
/** The messages of the recorded chat and apply-template requests (apply_template.json's rendering). */
const RECORDED_MESSAGES = JSON.stringify([
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Tell me about layer 3' },
]);

/**
 * A tiny server that replays llama-server b4748's recorded answers (test/fixtures/llama-server-b4748,
 * copied from the recordings): each route answers its recording, with the real server's
 * `Server: llama.cpp` header; a completion whose prompt is not the recorded one, and any route
 * nothing was recorded for, get cpp-httplib's 404 ("File Not Found"), so nothing is invented.
 * Request fields other than the prompt (how many logprobs, max_tokens) are not matched: the answer
 * is what the server sent for the recorded request.
 */
export async function startLlamaReplay(): Promise<{ url: string; requests: string[]; close(): Promise<void> }> {
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      const path = req.url ?? '/';
      requests.push(`${req.method} ${path}`);
      let body: Record<string, unknown> = {};
      try {
        body = raw ? (JSON.parse(raw) as Record<string, unknown>) : {};
      } catch {
        // a body that is not JSON: answered by route alone
      }
      const answer = (status: number, text: string) => {
        res.writeHead(status, {
          server: 'llama.cpp',
          'content-type': status === 404 ? 'text/plain' : 'application/json; charset=utf-8',
          'content-length': Buffer.byteLength(text),
        });
        res.end(text);
      };
      const recorded = (name: string) => answer(name === 'v1_completions_echo_logprobs.json' ? 500 : 200, file(name));
      const key = `${req.method} ${path}`;
      if (key === 'GET /v1/models') return recorded('v1_models.json');
      if (key === 'GET /props') return recorded('props.json');
      if (key === 'POST /apply-template' && JSON.stringify(body.messages) === RECORDED_MESSAGES)
        return recorded('apply_template.json');
      if (key === 'POST /tokenize' && body.content === RECORDED_PROMPT) return recorded('tokenize.json');
      if (key === 'POST /v1/completions' && body.prompt === RECORDED_PROMPT)
        return recorded(body.echo === true ? 'v1_completions_echo_logprobs.json' : 'v1_completions_logprobs5.json');
      if (key === 'POST /v1/chat/completions' && JSON.stringify(body.messages) === RECORDED_MESSAGES)
        return recorded('v1_chat_top_logprobs5.json');
      if (key === 'POST /completion' && body.prompt === RECORDED_PROMPT) return recorded('completion_n_probs5.json');
      answer(404, 'File Not Found');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

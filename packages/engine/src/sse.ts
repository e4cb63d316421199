/**
 * Server-sent events out: `data: <json>\n\n` per event, `data: [DONE]` at the end, as OpenAI
 * streams them. Writes issued in one turn of the event loop are corked into one socket write,
 * so a fast model does not cost one syscall per token; a slow model still flushes every token.
 */
import { once } from 'node:events';
import type { ServerResponse } from 'node:http';

/** Streams events to one response. */
export class SseWriter {
  private corked = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly signal: AbortSignal,
  ) {}

  /** Sends the status line and the event-stream headers. */
  open(): void {
    this.res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
    // Headers go out at once, so a client sees the response start before the first token.
    this.res.flushHeaders();
  }

  /** Writes one `data:` event; resolves when the socket can take more. */
  send(data: string): Promise<void> | void {
    if (this.res.destroyed) return;
    if (!this.corked) {
      this.corked = true;
      this.res.cork();
      process.nextTick(() => {
        this.corked = false;
        this.res.uncork();
      });
    }
    if (!this.res.write(`data: ${data}\n\n`)) return this.drain();
  }

  private async drain(): Promise<void> {
    try {
      await once(this.res, 'drain', { signal: this.signal });
    } catch {
      // Aborted: the generation loop sees the signal and stops.
    }
  }

  /** Writes `data: [DONE]` and ends the response. */
  done(): void {
    if (this.res.destroyed) return;
    this.res.end('data: [DONE]\n\n');
  }
}

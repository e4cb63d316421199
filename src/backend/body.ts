import type { Dispatcher } from 'undici';

/**
 * A backend's answer body, read up to `limit` bytes (over it: the body is destroyed and `over()`
 * thrown), parsed as JSON, or kept as text when it is not JSON. Shared by the mirror's copies and
 * the scoring calls.
 */
export async function readJsonOrText(
  body: Dispatcher.ResponseData['body'],
  limit: number,
  over: () => Error,
): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      body.destroy();
      throw over();
    }
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

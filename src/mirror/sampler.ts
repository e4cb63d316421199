/**
 * Which requests are mirrored. With `random`, the decision is taken before the body is read, so
 * unsampled bodies stream through without a copy; with `hash`, every eligible body is kept and
 * the decision is a hash of its bytes (the same prompt is always, or never, mirrored).
 */

export interface SamplerOptions {
  sampleRate: number;
  sampleBy: 'random' | 'hash';
  routes: readonly string[];
  /** Uniform [0, 1) source; injectable for tests. */
  random?: () => number;
}

/** FNV-1a over the bytes, mapped to [0, 1). */
export function hashFraction(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) {
    h ^= bytes[i] as number;
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) / 0x1_0000_0000;
}

export class Sampler {
  private readonly routes: Set<string>;
  private readonly random: () => number;
  constructor(private readonly options: SamplerOptions) {
    this.routes = new Set(options.routes);
    this.random = options.random ?? Math.random;
  }

  /** True when the route is one the mirror handles (POST to a configured route). */
  eligible(method: string, path: string): boolean {
    return method === 'POST' && this.routes.has(path);
  }

  /** Before the body: keep a copy? (`forced` is the `x-logprobe-mirror` header.) */
  wantsBody(method: string, path: string, forced: boolean | undefined): boolean {
    if (forced === false || !this.eligible(method, path)) return false;
    if (forced === true) return true;
    if (this.options.sampleBy === 'hash') return this.options.sampleRate > 0;
    return this.random() < this.options.sampleRate;
  }

  /** True when `wantsBody`'s yes is already the decision (no hash of the bytes to come). */
  finalBeforeBody(forced: boolean | undefined): boolean {
    return forced === true || this.options.sampleBy === 'random';
  }

  /** After the body: mirror it? Only called for bodies `wantsBody` kept. */
  decide(body: Uint8Array, forced: boolean | undefined): boolean {
    if (forced === true) return true;
    if (this.options.sampleBy === 'hash') return hashFraction(body) < this.options.sampleRate;
    return true;
  }
}

import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import bcrypt from 'bcryptjs';
import type { Config } from '../config/schema.js';
import { isLoopback } from '../config/values.js';
import { ConfigError, errnoReason } from '../errors/index.js';

/**
 * Who may read the admin port. The live page (`/ui`, `/ui/data`) shows users' prompts and the
 * answers' tokens, so it asks for a credential whenever one is configured (`admin.auth`): HTTP
 * basic auth against bcrypt hashes (as Prometheus' web config `basic_auth_users`), or a bearer
 * token read from a file or LOGPROBE_ADMIN_BEARER_TOKEN. `/metrics` asks too with
 * `admin.auth.metrics: true`; `/healthz` and `/readyz` never do (the kubelet's probes carry none).
 * With no credential configured and the port bound beyond loopback, the live page answers 403:
 * whoever reaches the port would otherwise read the pairs.
 *
 * Every comparison is of SHA-256 digests with crypto.timingSafeEqual, so the time taken does not
 * say how much of a guess was right; an unknown user costs a bcrypt run like a known one, so the
 * time does not say which users exist either.
 */

/** What a route needs: `ui` (the live page), `metrics`, or nothing (`open`). */
export type AdminRoute = 'ui' | 'metrics' | 'open';

/** A request's fate: answered, 401 (no or a wrong credential), or 403 (the live page on an exposed port without auth). */
export type AdminVerdict = 'ok' | 'unauthorized' | 'forbidden';

/** The one line a 403 says. */
export const EXPOSED_WITHOUT_AUTH =
  'the live page shows users\u2019 prompts and answers, so on an admin port bound beyond loopback it needs admin.auth (basicAuthUsers, bearerTokenFile or LOGPROBE_ADMIN_BEARER_TOKEN: docs/operations.md#securing-the-admin-port), or bind admin.host to 127.0.0.1';

/** Successful basic-auth checks remembered, so that the page's poll every 1.5 s does not cost a bcrypt run each. */
const REMEMBERED = 64;
/** An unknown user is checked against this (any valid hash of the same cost would do). */
const DUMMY_SALT = '$2b$10$abcdefghijklmnopqrstuu';

const digest = (s: string | Buffer): Buffer => createHash('sha256').update(s).digest();
const same = (a: Buffer, b: Buffer): boolean => timingSafeEqual(a, b);

export class AdminAuth {
  /** User → bcrypt hash. */
  private readonly users: ReadonlyMap<string, string>;
  private readonly token: Buffer | null;
  /** Digests of `user:password:hash` that bcrypt has accepted, oldest first. */
  private readonly accepted = new Map<string, true>();

  constructor(
    users: Readonly<Record<string, string>>,
    token: string | null,
    /** Ask for the credential on /metrics too. */
    private readonly metrics: boolean,
    /** The admin port is bound beyond loopback. */
    private readonly exposed: boolean,
  ) {
    this.users = new Map(Object.entries(users));
    this.token = token === null ? null : digest(token);
  }

  /** From the config: reads the token file; throws {@link ConfigError} naming the key when it cannot. */
  static fromConfig(config: Pick<Config, 'admin'>): AdminAuth {
    const a = config.admin.auth;
    // bearerToken is LOGPROBE_ADMIN_BEARER_TOKEN's (or a `${VAR}`'s) value: src/config/load.ts.
    const token =
      a.bearerTokenFile !== null ? readSecretFile(a.bearerTokenFile, 'admin.auth.bearerTokenFile') : a.bearerToken;
    return new AdminAuth(a.basicAuthUsers, token, a.metrics, !isLoopback(config.admin.host));
  }

  /** True when any credential is configured. */
  get enabled(): boolean {
    return this.users.size > 0 || this.token !== null;
  }

  /** The `WWW-Authenticate` of a 401: basic when users are configured (a browser then asks), else bearer. */
  get challenge(): string {
    return this.users.size > 0 ? 'Basic realm="logprobe admin", charset="UTF-8"' : 'Bearer realm="logprobe admin"';
  }

  /** Whether a request for `route` with this `Authorization` header value may be answered. */
  async check(route: AdminRoute, authorization: string | undefined): Promise<AdminVerdict> {
    if (route === 'open' || (route === 'metrics' && !this.metrics)) return 'ok';
    if (!this.enabled) return route === 'ui' && this.exposed ? 'forbidden' : 'ok';
    return (await this.verify(authorization)) ? 'ok' : 'unauthorized';
  }

  private async verify(authorization: string | undefined): Promise<boolean> {
    const m = /^(Basic|Bearer)\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (!m) return false;
    const scheme = m[1]!.toLowerCase();
    if (scheme === 'bearer') return this.token !== null && same(digest(m[2]!), this.token);
    if (this.users.size === 0) return false;
    const pair = Buffer.from(m[2]!, 'base64').toString('utf8');
    const colon = pair.indexOf(':');
    if (colon < 0) return false;
    const user = pair.slice(0, colon);
    const password = pair.slice(colon + 1);
    const hash = this.users.get(user);
    const key = digest(`${user}\0${password}\0${hash ?? ''}`).toString('base64');
    if (hash !== undefined && this.accepted.has(key)) return true;
    // bcryptjs's async hash yields to the event loop between rounds: a flood of wrong passwords
    // slows the admin port, not the proxy's requests on the same thread.
    const computed = await bcrypt.hash(password, (hash ?? DUMMY_SALT).slice(0, 29));
    const ok = hash !== undefined && same(digest(computed), digest(hash));
    if (ok) {
      this.accepted.set(key, true);
      if (this.accepted.size > REMEMBERED) this.accepted.delete(this.accepted.keys().next().value!);
    }
    return ok;
  }
}

/** A secret's file, its trailing newline removed; a ConfigError naming `key` when it cannot be read or is empty. */
export function readSecretFile(file: string, key: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError([`${key}: cannot read ${file} (${errnoReason(err, 'read')})`]);
  }
  const s = text.replace(/\r?\n$/, '');
  if (s.trim() === '') throw new ConfigError([`${key}: ${file} is empty`]);
  return s;
}

/** The admin port's HTTPS options (admin.tls) as buildAdminApp takes them, `{}` for plain HTTP; a ConfigError naming the key when a file cannot be read. */
export function adminHttps(config: Pick<Config, 'admin'>): { https?: { cert: Buffer; key: Buffer } } {
  const t = config.admin.tls;
  if (t === null) return {};
  const read = (file: string, key: string): Buffer => {
    try {
      return readFileSync(file);
    } catch (err) {
      throw new ConfigError([`${key}: cannot read ${file} (${errnoReason(err, 'read')})`]);
    }
  };
  const https = { cert: read(t.certFile, 'admin.tls.certFile'), key: read(t.keyFile, 'admin.tls.keyFile') };
  try {
    createSecureContext(https);
  } catch (err) {
    throw new ConfigError([`admin.tls: the certificate and key do not load together (${(err as Error).message})`]);
  }
  return { https };
}

import { z } from 'zod';
import { ENGINE_SETTINGS } from '../metrics/labels.js';
import { backendBase, httpUrlHint, isHttpUrl } from './values.js';
import { cusumUnit, resolveCusum } from '../core/arl.js';

/**
 * The configuration schema: every key and its default (config/logprobe.example.yaml). Every object is strict, so an unknown
 * key is an error that names its path (a typo must not silently fall back to a default).
 */

const port = z
  .number({ error: 'expected a port number' })
  .int({ error: 'expected a port number' })
  .min(0, { error: 'expected a port number' })
  .max(65535, { error: 'expected a port number' });

const host = z
  .string({ error: 'expected a host name or address' })
  .min(1, { error: 'expected a host name or address' });

const httpUrl = z.string({ error: 'expected an http(s) URL' }).refine(isHttpUrl, {
  error: (issue) => `expected an http(s) URL${typeof issue.input === 'string' ? httpUrlHint(issue.input) : ''}`,
});

const positiveMs = z
  .number({ error: 'expected milliseconds' })
  .int({ error: 'expected whole milliseconds' })
  .positive({ error: 'expected a positive number of milliseconds' });
const share = z
  .number({ error: 'expected a number from 0 to 1' })
  .min(0, { error: 'expected a number from 0 to 1' })
  .max(1, { error: 'expected a number from 0 to 1' });
const positiveNumber = z
  .number({ error: 'expected a positive number' })
  .positive({ error: 'expected a positive number' });
const nonNegative = z.number({ error: 'expected a number ≥ 0' }).min(0, { error: 'expected a number ≥ 0' });
const positiveInt = z
  .number({ error: 'expected a positive whole number' })
  .int({ error: 'expected a positive whole number' })
  .positive({ error: 'expected a positive whole number' });
const nonNegativeInt = z
  .number({ error: 'expected a whole number ≥ 0' })
  .int({ error: 'expected a whole number ≥ 0' })
  .min(0, { error: 'expected a whole number ≥ 0' });
const optionalSecret = z.string({ error: 'expected a string' }).nullable().default(null);

/**
 * A check's floor of its own (`path.noiseFloor`, `canary.noiseFloor`): null follows
 * `analysis.noiseFloor` in force, a number is the floor, `auto` learns from that check's trusted
 * pairs (src/mirror/calibration.ts `ownFloor`).
 */
const ownFloor = z
  .union([positiveNumber, z.literal('auto')], { error: 'expected a positive number of nats, auto or null' })
  .nullable()
  .default(null);

// Credentials in the URL would be logged and are not sent (the pools use the origin only).
// A trailing /v1 (an OpenAI client's base_url) is dropped: logprobe appends the client's /v1/… itself.
const upstreamUrl = httpUrl
  .refine((s) => !URL.canParse(s) || (new URL(s).username === '' && new URL(s).password === ''), {
    error: 'credentials in the URL are not sent: remove user:password@ (the baseline takes baseline.apiKey)',
  })
  .transform(backendBase);

const upstream = (defaultUrl: string) =>
  z.strictObject({
    url: upstreamUrl.default(defaultUrl),
    timeoutMs: positiveMs.default(120_000),
    /** TCP/TLS connect timeout; separate from the generation timeout. */
    connectTimeoutMs: positiveMs.default(10_000),
    /** Longest silence between two body chunks of a streamed response. */
    idleTimeoutMs: positiveMs.default(120_000),
    /** How to get token ids and score a fixed sequence on this backend (src/scoring); `auto` detects it once. */
    engine: z.enum(ENGINE_SETTINGS, { error: `expected one of ${ENGINE_SETTINGS.join(', ')}` }).default('auto'),
    /** The `model` of every mirrored copy and scoring call to this backend (its served name); null: the client's. */
    model: z
      .string({ error: 'expected a model name or null' })
      .min(1, { error: 'expected a model name or null' })
      .nullable()
      .default(null),
  });

/** A limit that is off unless set: `null` means no limit (as nginx), a number is a hard cap. */
const optionalLimit = nonNegativeInt.nullable().default(null);

/** HTTP header names (RFC 9110 tokens), compared lower-cased. */
const headerName = z
  .string({ error: 'expected a header name' })
  .regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, { error: "expected a header name (letters, digits and !#$%&'*+.^_`|~-)" })
  .transform((s) => s.toLowerCase());

/** A host name as a `Host` header carries it, without a port; compared lower-cased, without a trailing dot. */
const adminHostName = z
  .string({ error: 'expected a host name' })
  .regex(/^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?$/, {
    error: 'expected a host name without port or scheme (e.g. logprobe-admin.monitoring.svc)',
  })
  .transform((s) => s.toLowerCase().replace(/\.$/, ''));

/** A bcrypt hash (`$2a$`, `$2b$`, `$2y$`), as htpasswd -B writes it; a plain password is refused. */
const bcryptHash = z
  .string({ error: 'expected a bcrypt hash' })
  .regex(/^\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}$/, {
    error: 'expected a bcrypt hash, never the password itself (make one with: htpasswd -nBC 10 USER | cut -d: -f2)',
  });

const sections = z.strictObject({
  /**
   * `inline`: logprobe is in the client path and forwards every request to the candidate.
   * `shadow`: logprobe is the target of an existing mirror (Envoy, Istio, Gateway API, nginx):
   * each copy is answered 202 at once, never forwarded, and goes to the mirror (src/proxy/shadow.ts).
   */
  mode: z.enum(['inline', 'shadow'], { error: 'expected inline or shadow' }).default('inline'),
  listen: z
    .strictObject({
      host: host.default('0.0.0.0'),
      port: port.default(8080),
      /**
       * Proxy processes (node:cluster) serving the port; `auto`: os.availableParallelism(). Absent
       * means 1, a single process (the key is not among the defaults).
       */
      workers: z
        .union([positiveInt, z.literal('auto')], { error: 'expected a positive whole number or auto' })
        .optional(),
    })
    .prefault({}),
  admin: z
    .strictObject({
      host: host.default('127.0.0.1'),
      port: port.default(9464),
      /**
       * Host names (any port) the admin port answers besides `localhost`, its bind address and IP
       * literals; any other `Host` gets 421 (DNS rebinding: src/admin/hosts.ts).
       */
      allowedHosts: z.array(adminHostName, { error: 'expected a list of host names' }).default([]),
      /**
       * Who may read the admin port (src/admin/auth.ts): the live page (`/ui`, `/ui/data`) whenever
       * any credential is set, `/metrics` too with `metrics: true`; `/healthz` and `/readyz` stay
       * open for probes. Without any, an admin port bound beyond loopback answers the live page 403.
       */
      auth: z
        .strictObject({
          /** User name → bcrypt hash of the password, as Prometheus' web config `basic_auth_users`. */
          basicAuthUsers: z
            .record(
              z.string().regex(/^[^:\s]+$/, { error: 'expected a user name without ":" or blanks' }),
              bcryptHash,
              { error: 'expected a mapping of user names to bcrypt hashes' },
            )
            .default({}),
          /** A file holding the bearer token (its content, trailing newline removed). */
          bearerTokenFile: z
            .string({ error: 'expected a file path' })
            .min(1, { error: 'expected a file path' })
            .nullable()
            .default(null),
          /** The bearer token itself: from LOGPROBE_ADMIN_BEARER_TOKEN or `${VAR}` only, never written in the file (src/config/load.ts). */
          bearerToken: optionalSecret,
          /** Ask for the credentials on `/metrics` as well (the scrape job then carries `basic_auth` or `authorization`). */
          metrics: z.boolean({ error: 'expected true or false' }).default(false),
        })
        .refine((a) => !(a.bearerToken !== null && a.bearerTokenFile !== null), {
          error: 'set one of bearerToken and bearerTokenFile, not both',
          path: ['bearerTokenFile'],
        })
        .refine(
          (a) =>
            !a.metrics ||
            Object.keys(a.basicAuthUsers).length > 0 ||
            a.bearerToken !== null ||
            a.bearerTokenFile !== null,
          {
            error:
              'applies only with a credential: set admin.auth.basicAuthUsers, bearerTokenFile or LOGPROBE_ADMIN_BEARER_TOKEN',
            path: ['metrics'],
          },
        )
        .prefault({}),
      /** Serve the admin port over HTTPS with this certificate (PEM) and key; null: plain HTTP. */
      tls: z
        .strictObject({
          certFile: z.string({ error: 'expected a file path' }).min(1, { error: 'expected a file path' }),
          keyFile: z.string({ error: 'expected a file path' }).min(1, { error: 'expected a file path' }),
        })
        .nullable()
        .default(null),
    })
    .prefault({}),
  candidate: upstream('http://127.0.0.1:30000')
    .extend({
      /** Most upstream connections the client path opens at once; null: as many as clients need. */
      maxConnections: z
        .union([positiveInt, z.null()], { error: 'expected a positive whole number or null' })
        .default(null),
      /** With maxConnections: most requests that may wait for a busy connection; null: no limit. */
      maxPending: optionalLimit,
      /** The engine's admin key (SGLang `--admin-api-key`), sent to its cache flush only (`mirror.repeat.flush`). */
      adminApiKey: optionalSecret,
    })
    .refine((c) => c.maxPending === null || c.maxConnections !== null, {
      error: 'applies only with candidate.maxConnections (without it no request waits for a connection)',
      path: ['maxPending'],
    })
    .prefault({}),
  // `baseline: null` (or `url: null`, `LOGPROBE_BASELINE_URL=none`): baseline-free, the candidate's
  // repeat probes alone.
  baseline: z.preprocess(
    (v) => (v === null ? { url: null } : v),
    upstream('http://127.0.0.1:30001')
      .extend({
        url: upstreamUrl.nullable().default('http://127.0.0.1:30001'),
        apiKey: optionalSecret,
        /** The engine's admin key (SGLang `--admin-api-key`), sent to its cache flush only (`mirror.repeat.flush`). */
        adminApiKey: optionalSecret,
        forwardAuth: z.boolean({ error: 'expected true or false' }).default(false),
        /** Client request headers the baseline's copy may carry besides content-type, accept and apiKey. */
        forwardHeaders: z.array(headerName, { error: 'expected a list of header names' }).default([]),
      })
      .prefault({}),
  ),
  tlsInsecure: z.boolean({ error: 'expected true or false' }).default(false),
  limits: z
    .strictObject({
      bodyMB: positiveNumber.default(32),
      /** The request head (request line + fields) and an upstream's response head: one limit, every path. */
      maxHeaderKB: positiveInt.max(1024, { error: 'expected a whole number of KB from 1 to 1024' }).default(64),
      /** A request head that has not fully arrived after this long is answered 408. */
      headTimeoutMs: positiveMs.default(30_000),
      /** A request body with no byte for this long is answered 408 (nginx's client_body_timeout); an idle timer, not a deadline. */
      bodyTimeoutMs: positiveMs.default(60_000),
      /** An idle client keep-alive connection is closed after this long. */
      keepAliveTimeoutMs: positiveMs.default(65_000),
      /** The listen backlog; the kernel caps it at net.core.somaxconn. */
      backlog: positiveInt.default(4096),
    })
    .prefault({}),
  shutdown: z.strictObject({ drainSeconds: nonNegative.default(30) }).prefault({}),
  mirror: z
    .strictObject({
      sampleRate: share.default(0.05),
      sampleBy: z.enum(['random', 'hash'], { error: 'expected random or hash' }).default('random'),
      routes: z
        .array(z.string().startsWith('/', { error: 'expected a path starting with /' }), {
          error: 'expected a list of paths',
        })
        .default(['/v1/completions', '/v1/chat/completions', '/v1/responses', '/generate']),
      topLogprobs: positiveInt.max(20, { error: 'expected a whole number from 1 to 20' }).default(5),
      maxTokens: positiveInt.default(64),
      concurrency: positiveInt.default(4),
      queueSize: nonNegativeInt.default(128),
      seed: z.number({ error: 'expected a whole number' }).int({ error: 'expected a whole number' }).default(1234),
      extraParams: z.record(z.string(), z.unknown(), { error: 'expected a mapping' }).default({}),
      /**
       * Repeat probes of the cache path (cold → warm): a share of mirrored requests is sent once more
       * to each of `backends` right after the first run, which then is normally a prefix-cache hit;
       * `flush` resets the engine's cache first so that the first run is cold (staging only).
       */
      repeat: z
        .strictObject({
          rate: share.default(0),
          backends: z
            .array(z.enum(['candidate', 'baseline'], { error: 'expected candidate or baseline' }), {
              error: 'expected a list of backends',
            })
            .min(1, { error: 'expected at least one backend' })
            .default(['candidate']),
          flush: z.boolean({ error: 'expected true or false' }).default(false),
        })
        .prefault({}),
    })
    .prefault({}),
  /**
   * Slices of traffic by the request's `model` (an adapter's name under multi-LoRA serving): every
   * detector and the `auto` floor run per model. Bounded: the `models` allow-list, or the first
   * `maxModels` names seen; the rest are `other` (logprobe_slice_overflow_total counts them).
   */
  slices: z
    .strictObject({
      models: z
        .array(z.string({ error: 'expected a model name' }).min(1, { error: 'expected a model name' }), {
          error: 'expected a list of model names, or null',
        })
        .min(1, { error: 'expected at least one model name, or null' })
        .nullable()
        .default(null),
      maxModels: positiveInt.max(1000, { error: 'expected a whole number from 1 to 1000' }).default(16),
    })
    .prefault({}),
  /**
   * The path check: a backend's decode-time logprobs of the tokens it generated against the same
   * tokens scored in one prefill pass on the same backend (docs/detection.md). On wherever the
   * engine can score; `noiseFloor` null follows `analysis.noiseFloor` in force, `auto` learns from
   * the trusted side's path pairs (the baseline's) only.
   */
  path: z
    .strictObject({
      rate: share.default(1),
      backends: z
        .array(z.enum(['candidate', 'baseline'], { error: 'expected candidate or baseline' }), {
          error: 'expected a list of backends',
        })
        .default(['candidate', 'baseline']),
      noiseFloor: ownFloor,
    })
    .prefault({}),
  /**
   * Canary probes (src/canary): a probe set logprobe sends on its own once per `intervalSeconds`
   * (± `jitterSeconds`), to the candidate and the baseline — or to the candidate alone against
   * `reference`, a golden file recorded from a trusted server — through the pair pipeline, judged
   * per round (docs/detection.md "Canaries"). Within `tokensPerHour` (both sides' tokens), never
   * while the client path has more than `maxCandidateInFlight` requests in flight to the candidate.
   */
  canary: z
    .strictObject({
      enabled: z.boolean({ error: 'expected true or false' }).default(false),
      probes: z
        .string({ error: 'expected a probe file path, or null for the built-in set' })
        .min(1)
        .nullable()
        .default(null),
      model: z.string({ error: 'expected a model name, or null' }).min(1).nullable().default(null),
      intervalSeconds: positiveNumber.default(60),
      jitterSeconds: nonNegative.default(5),
      // The length of a probe whose body names none — the decode probes (a state bug shows in the
      // decode steps only, bench decode-state:0) — and the cap on every probe; first-token probes
      // ask 1 in their body (docs/detection.md "Canaries").
      maxTokens: positiveInt.max(64, { error: 'expected a whole number from 1 to 64' }).default(4),
      topLogprobs: positiveInt.max(20, { error: 'expected a whole number from 1 to 20' }).default(20),
      reference: z.string({ error: 'expected a golden file path, or null' }).min(1).nullable().default(null),
      tokensPerHour: positiveInt.default(100_000),
      maxCandidateInFlight: positiveInt.default(64),
      alpha: positiveNumber.max(0.5, { error: 'expected a p-value threshold in (0, 0.5]' }).default(0.01),
      // The canaries' own floor: null follows the slice's `analysis.noiseFloor` in force, `auto`
      // learns from the live baseline's repeat of each probe (as `path.noiseFloor: auto`; rounds
      // are inconclusive until `calibration.minSamples` repeats), a number is the floor.
      noiseFloor: ownFloor,
    })
    .prefault({}),
  /**
   * `serve`'s start-up check of each backend (src/probe, in the mirror's worker, off the client
   * path): `full` asks every capability `logprobe probe` asks, `reachability` only whether it
   * answers and which engine it is, `off` nothing.
   */
  probe: z
    .strictObject({
      atStart: z.enum(['full', 'reachability', 'off'], { error: 'expected full, reachability or off' }).default('full'),
      timeoutMs: positiveMs.default(10_000),
      /**
       * Concurrent copies of the determinism check's greedy request (on llama-server at most its
       * `total_slots`: more would only hold its HTTP threads, `max(np+2, ncpu-1)`).
       */
      concurrentCopies: positiveInt.max(64, { error: 'expected a whole number from 1 to 64' }).default(16),
    })
    .prefault({}),
  analysis: z
    .strictObject({
      /** `exact`: no floor at all, any difference is a shift (for engines that are deterministic: `logprobe probe`). */
      noiseFloor: z
        .union([positiveNumber, z.literal('auto'), z.literal('exact')], {
          error: 'expected a positive number of nats, auto or exact',
        })
        .default(0.1),
      gapAmbiguous: nonNegative.default(0.3),
      gapSystematic: nonNegative.default(0.4),
      globalFraction: share.default(0.8),
      minAligned: positiveInt.default(3),
      /** Teacher-forced scoring past the first divergence (docs/engines.md). */
      scoring: z
        .strictObject({
          when: z
            .enum(['diverged', 'always', 'never'], { error: 'expected diverged, always or never' })
            .default('diverged'),
          maxPositions: positiveInt.default(64),
        })
        .prefault({}),
    })
    .refine((a) => a.gapSystematic >= a.gapAmbiguous, {
      error: 'gapSystematic must be ≥ gapAmbiguous',
      path: ['gapSystematic'],
    })
    .prefault({}),
  calibration: z
    .strictObject({
      rate: share.default(0),
      margin: positiveNumber.default(3),
      minSamples: positiveInt.default(20),
      minFloor: positiveNumber.default(0.1),
    })
    .prefault({}),
  alert: z
    .strictObject({
      window: positiveInt.default(50),
      // minRequests 10 and forSeconds 0: chosen from the measured run lengths (docs/detection.md).
      minRequests: positiveInt.default(10),
      fireFraction: share.default(0.5),
      forSeconds: nonNegative.default(0),
      /**
       * Raw `k`/`h` (floor units) override what `targetShift` (nats) and `falseAlarmPairs` (ARL0)
       * derive (src/core/arl.ts); the config's output always holds the k and h in force.
       */
      cusum: z
        .strictObject({
          k: nonNegative.nullable().optional(),
          h: positiveNumber.nullable().optional(),
          targetShift: positiveNumber.nullable().default(null),
          falseAlarmPairs: z
            .number({ error: 'expected a number of pairs > 1' })
            .gt(1, { error: 'expected a number of pairs > 1' })
            .nullable()
            .default(null),
        })
        .prefault({}),
      /** The permutation test beside the alerts, over the last `window` pairs (src/core/permutation.ts). */
      permutation: z
        .strictObject({
          permutations: positiveInt.default(999),
          seed: z.number({ error: 'expected a whole number' }).int({ error: 'expected a whole number' }).default(1),
        })
        .prefault({}),
      webhookUrl: httpUrl.nullable().default(null),
      /** The link each webhook alert carries back (Alertmanager's generatorURL); null: the live page on the admin address. */
      generatorUrl: httpUrl.nullable().default(null),
    })
    .prefault({}),
  capture: z
    .strictObject({
      enabled: z.boolean({ error: 'expected true or false' }).default(true),
      dir: z
        .string({ error: 'expected a directory path' })
        .min(1, { error: 'expected a directory path' })
        .default('./captures'),
      maxFileMB: positiveNumber.default(100),
      gzip: z.boolean({ error: 'expected true or false' }).default(false),
      includePrompts: z.boolean({ error: 'expected true or false' }).default(true),
    })
    .prefault({}),
  log: z
    .strictObject({
      level: z
        .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
          error: 'expected one of fatal, error, warn, info, debug, trace, silent',
        })
        .default('info'),
      /** Extra header or body keys to redact from logs, on top of the built-in secrets. */
      redact: z.array(z.string(), { error: 'expected a list of keys' }).default([]),
    })
    .prefault({}),
});

/**
 * The whole config: the sections, then `alert.cusum`'s k and h resolved from its targets and the
 * floor (src/core/arl.ts), so every reader sees the k and h in force.
 */
export const configSchema = sections
  .refine((c) => !c.canary.enabled || c.baseline.url !== null || c.canary.reference !== null, {
    path: ['canary', 'reference'],
    error:
      'canaries need something to compare the candidate with: set baseline.url, or canary.reference (a golden file: logprobe record PROBES --backend TRUSTED --out ref.jsonl)',
  })
  .refine((c) => c.canary.noiseFloor !== 'auto' || c.canary.reference === null, {
    path: ['canary', 'noiseFloor'],
    error:
      "auto learns from the live baseline's repeat of each probe, and canary.reference has none: give a number of nats (or null: analysis.noiseFloor)",
  })
  .transform((c) => {
    const unit = cusumUnit(c.analysis.noiseFloor, c.calibration.minFloor);
    return { ...c, alert: { ...c.alert, cusum: { ...c.alert.cusum, ...resolveCusum(c.alert.cusum, unit) } } };
  });

/** The validated, frozen configuration. */
export type Config = z.output<typeof configSchema>;
/** What a YAML file or a test may give: any subset of the keys. */
export type ConfigInput = z.input<typeof configSchema>;

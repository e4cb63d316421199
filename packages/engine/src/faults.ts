/**
 * Server-level faults of the engine server (`--fault`): failures a proxy must survive, applied to
 * the generation routes (`/health` and `/v1/models` stay healthy, so scripts can still wait for
 * the engine). They combine with each other and with any model knob.
 */

/** The faults in force. */
export interface ServerFaults {
  /** Every generation request → 500 in the OpenAI error envelope. */
  readonly http500: boolean;
  /** 200 with a body that is not JSON (for streams: `data:` lines that are not JSON). */
  readonly garbage: boolean;
  /** The socket is destroyed without any response. */
  readonly reset: boolean;
  /** Delay before answering at all (before the status line), in ms. */
  readonly slowMs: number;
  /** Streams only: after the first token chunk, pause this long once (an idle gap), in ms. */
  readonly stallMs: number;
  /** Answer normally, but with `logprobs: null` wherever logprobs would be. */
  readonly nologprobs: boolean;
}

/** No faults. */
export const NO_FAULTS: ServerFaults = Object.freeze({
  http500: false,
  garbage: false,
  reset: false,
  slowMs: 0,
  stallMs: 0,
  nologprobs: false,
});

/** The accepted forms, for help texts and messages. */
export const SERVER_FAULT_FORMS = ['http500', 'garbage', 'reset', 'slow:MS', 'stall:MS', 'nologprobs'] as const;

const NAMES = new Set(['http500', 'garbage', 'reset', 'slow', 'stall', 'nologprobs']);

/** A fault string that does not parse; the message names it and says what is expected. */
export class InvalidServerFaultError extends Error {
  override readonly name = 'InvalidServerFaultError';
}

function nameOf(spec: string): string {
  const colon = spec.indexOf(':');
  return (colon < 0 ? spec : spec.slice(0, colon)).trim();
}

/** Whether a single fault item names a server-level fault (others may belong to a model). */
export function isServerFault(spec: string): boolean {
  return NAMES.has(nameOf(spec));
}

function millis(spec: string, arg: string | undefined): number {
  const n = arg !== undefined && /^\d+$/.test(arg) ? Number(arg) : NaN;
  if (!Number.isSafeInteger(n))
    throw new InvalidServerFaultError(
      `fault "${spec}": expected a whole number of milliseconds, e.g. ${nameOf(spec)}:500`,
    );
  return n;
}

/**
 * Parses fault items (each may itself be a comma-separated list) into `ServerFaults`.
 * Throws `InvalidServerFaultError` naming the first item that is not a server fault.
 */
export function parseServerFaults(specs: string | readonly string[]): ServerFaults {
  const items = (typeof specs === 'string' ? [specs] : specs)
    .flatMap((s) => s.split(','))
    .map((s) => s.trim())
    .filter((s) => s !== '' && s !== 'none');
  let faults: ServerFaults = NO_FAULTS;
  for (const spec of items) {
    const colon = spec.indexOf(':');
    const name = nameOf(spec);
    const arg = colon < 0 ? undefined : spec.slice(colon + 1).trim();
    if ((name === 'slow' || name === 'stall') === (arg === undefined) && NAMES.has(name)) {
      throw new InvalidServerFaultError(
        name === 'slow' || name === 'stall'
          ? `fault "${spec}": expected ${name}:MS`
          : `fault "${spec}": "${name}" takes no argument`,
      );
    }
    switch (name) {
      case 'http500':
      case 'garbage':
      case 'reset':
      case 'nologprobs':
        faults = { ...faults, [name]: true };
        break;
      case 'slow':
        faults = { ...faults, slowMs: millis(spec, arg) };
        break;
      case 'stall':
        faults = { ...faults, stallMs: millis(spec, arg) };
        break;
      default:
        throw new InvalidServerFaultError(`unknown fault "${spec}": expected one of ${SERVER_FAULT_FORMS.join(', ')}`);
    }
  }
  return Object.freeze(faults);
}

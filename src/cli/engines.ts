import { LogprobeError } from '../errors/index.js';
import type { DemoEngines } from '../demo/run.js';

/**
 * What `logprobe demo` and `logprobe engine` use of the test engines' package, `@logprobe/engine`
 * (a workspace of the repository, a dev dependency). Declared here rather than imported so that
 * the product builds without the engines (the Docker image has none);
 * test/cli-engines-contract.unit.test.ts type-checks the real package against it.
 */
export interface EnginePackage {
  runEngineCli(argv: readonly string[]): Promise<number>;
  readonly FAULT_FORMS: readonly string[];
  readonly SIM_DEMO_FAULTS: readonly string[];
  readonly DEMO_ENGINES: readonly string[];
  /** The candidate's fault as the demo runs it; throws an `UnknownDemoFaultError` for an unknown one. */
  planFault(requested: string): DemoFaultPlan;
  /** Starts the two engines (`choice`: one of DEMO_ENGINES). */
  /** The fault shows only on prefix-cache hits (the demo then probes the cache path with repeats). */
  needsPrefixCache(plan: DemoFaultPlan): boolean;
  /** Starts the two engines (`choice`: one of DEMO_ENGINES), both playing `engine.api`. */
  chooseEngines(options: {
    choice: string;
    plan: DemoFaultPlan;
    seed?: number;
    notice: (line: string) => void;
    engine?: { api?: string; slotSavePath?: string; cacheSlots?: number };
    /** Told what the start is doing, line by line. */
    progress?: (line: string) => void;
  }): Promise<DemoEngines>;
  readonly UnknownDemoFaultError: new (...args: never[]) => Error;
  readonly EngineStartError: new (...args: never[]) => Error & { reason: string };
}

/** A planned fault: opaque to the product, handed back to `chooseEngines`. */
export type DemoFaultPlan = object;

const PACKAGE = '@logprobe/engine';

/**
 * Loads the engines for `logprobe demo` and `logprobe engine`. They are test doubles, not part
 * of the product: a clone of the repository has them after `npm ci`; the published package and
 * the Docker image do not, and then these two commands say so in one line.
 */
export async function loadEngines(command: string): Promise<EnginePackage> {
  try {
    return (await import(PACKAGE)) as EnginePackage;
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if ((e.code === 'ERR_MODULE_NOT_FOUND' || e.code === 'MODULE_NOT_FOUND') && e.message.includes(PACKAGE)) {
      throw new LogprobeError(
        'LOGPROBE_ENGINES_MISSING',
        `${command} needs the test engines (${PACKAGE}), which come with a clone of the repository, not with the logprobe package: git clone the repository and run npm ci there`,
      );
    }
    throw err;
  }
}

// The mirror worker's entry for code that runs from the .ts sources (tests under tsx): a worker
// thread does not inherit the `--import tsx` of its process, so this registers tsx's loader in
// the worker, then loads the real entry. test/helpers/logprobe.ts passes it as `mirrorWorkerUrl`.
import { register } from 'tsx/esm/api';

register();
await import('../../src/worker/worker.ts');

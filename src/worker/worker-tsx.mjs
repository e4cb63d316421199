// The mirror worker's entry when logprobe runs from its .ts sources (`npm run dev`, under tsx): a
// worker thread does not inherit the `--import tsx` of its process, so this registers tsx's
// loader in the worker, then loads the real entry. The compiled CLI runs dist/worker/worker.js.
import { register } from 'tsx/esm/api';

register();
await import('./worker.ts');

// The mirror worker's entry (as test/helpers/mirror-worker.mjs: tsx, then src/worker/worker.ts)
// with two faults a test can trigger through the traffic it sends, for what the proxy's thread
// does when its worker fails (test/mirror-worker-down.test.ts):
//  - a mirrored request whose body contains LOGPROBE-TEST-CRASH throws in the worker: an uncaught
//    exception, which ends the thread as any bug in it would;
//  - one whose body contains LOGPROBE-TEST-HANG:<ms> blocks the worker's event loop that long
//    (no message is answered meanwhile, as with a runaway computation).
import { parentPort } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
await import('../../src/worker/worker.ts');

// Registered after worker.ts's own listener: the job is taken first, then the fault strikes.
parentPort.on('message', (m) => {
  if (m.t !== 'job') return;
  const text = Buffer.from(m.exchange.body).toString('utf8');
  if (text.includes('LOGPROBE-TEST-CRASH')) throw new Error('injected mirror worker crash (test)');
  const hang = /LOGPROBE-TEST-HANG:(\d+)/.exec(text);
  if (hang) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Number(hang[1]));
});

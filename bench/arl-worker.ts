/**
 * A worker process of `npm run bench:detect -- --arl` (bench/arl.ts `runJobs`): runs the
 * in-control chunks its parent sends, one at a time, and answers each with its counts. Exits when
 * the parent disconnects.
 */
import { runInControlChunk, type InControlJob } from './arl.js';

process.on('message', (job: InControlJob) => {
  runInControlChunk(job).then(
    (counts) => process.send!({ counts }),
    (e: unknown) => process.send!({ error: e instanceof Error ? (e.stack ?? e.message) : String(e) }),
  );
});
process.on('disconnect', () => process.exit(0));

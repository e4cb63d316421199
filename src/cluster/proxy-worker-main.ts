/** The entry of a proxy worker process (node:cluster forks it; src/cluster/primary.ts). */
import { runProxyWorker } from './proxy-worker.js';

runProxyWorker();

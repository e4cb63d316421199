import { mergeProcesses, retiredPart, sumParts, type MetricsJSON } from '../metrics/merge.js';
import { WORKER_METRICS_TIMEOUT_MS } from '../worker/handle.js';
import { sendTo, type Proc, type ProcEvents } from './supervisor.js';

/**
 * A cluster's /metrics (src/cluster/primary.ts): every proxy worker scraped at once over IPC (its
 * last snapshot when it does not answer in time), what exited workers left (their counters and
 * histograms summed, retired once their last message is read), and the primary's and mirror
 * worker's own parts, merged by src/metrics/merge.ts.
 */
export class ClusterMetrics implements ProcEvents {
  /** What exited workers left: their counters and histograms, summed. */
  private retired: MetricsJSON = [];
  /** Exited workers whose last messages may still come (not yet disconnected): their snapshots still count as theirs. */
  private readonly leaving = new Set<Proc>();
  private nextId = 1;

  /**
   * @param procs the slots' processes not yet retired
   * @param own the primary's registry and the mirror worker's (MirrorHandle.metricsParts)
   */
  constructor(
    private readonly procs: () => readonly Proc[],
    private readonly own: () => Promise<MetricsJSON[]>,
  ) {}

  snapshot(p: Proc, id: number | null, metrics: MetricsJSON): void {
    // Every snapshot is the newest known state, also one that comes after its scrape gave up
    // (or after the exit: the last one, sent while draining).
    if (!p.retired) p.snapshot = metrics;
    if (id !== null) {
      p.waiters.get(id)?.(metrics);
      p.waiters.delete(id);
    }
  }

  exited(p: Proc): void {
    for (const resolve of p.waiters.values()) resolve(null);
    p.waiters.clear();
    this.leaving.add(p);
    this.retire(p);
  }

  disconnected(p: Proc): void {
    this.retire(p);
  }

  /** An exited, disconnected worker's counters and histograms join the retired sum (the sums never go back); its gauges go with it. */
  private retire(p: Proc): void {
    if (p.retired || !p.exited || !p.disconnected) return;
    p.retired = true;
    this.leaving.delete(p);
    this.retired = sumParts([this.retired, retiredPart(p.snapshot)]);
    p.snapshot = [];
  }

  /** A running worker's registry now, or its last known one when it does not answer in time. */
  private scrape(p: Proc): Promise<MetricsJSON> {
    // Not listening yet (it answers once it has its config) or exited: what it last sent.
    if (!p.listening || p.exited || !p.w.isConnected()) return Promise.resolve(p.snapshot);
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        p.waiters.delete(id);
        resolve(p.snapshot);
      }, WORKER_METRICS_TIMEOUT_MS);
      p.waiters.set(id, (m) => {
        clearTimeout(timer);
        resolve(m ?? p.snapshot);
      });
      sendTo(p.w, { t: 'metrics', id });
    });
  }

  /**
   * /metrics: the primary's registry with the mirror worker's (as a single process merges them),
   * every proxy worker's (asked at once, each waited for at most WORKER_METRICS_TIMEOUT_MS) and
   * what exited ones left, merged (src/metrics/merge.ts: the logprobe_* families summed).
   */
  async text(): Promise<string> {
    const procs = new Set([...this.procs(), ...this.leaving]);
    const [parts, own] = await Promise.all([Promise.all([...procs].map((p) => this.scrape(p))), this.own()]);
    return mergeProcesses([...own, ...parts, this.retired]).metrics();
  }
}

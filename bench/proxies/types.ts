/** A proxy (or the upstream itself) under test, started for one bench run. */
export interface Running {
  key: string;
  label: string;
  /** Base URL clients send `/v1/...` to. */
  url: string;
  /** Extra request headers this target needs (portkey's provider headers). */
  headers: Record<string, string>;
  /** Processes whose memory is the target's (nginx: master and workers). */
  pids(): Promise<number[]>;
  /** Admin URL with /metrics (logprobe only). */
  adminUrl?: string;
  stop(): Promise<void>;
}

/** A target that could not be started here, and why (shown in the results instead of failing). */
export interface Unavailable {
  key: string;
  label: string;
  reason: string;
}

export function isRunning(t: Running | Unavailable): t is Running {
  return (t as Running).url !== undefined;
}

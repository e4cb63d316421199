/** What the page puts before the scripts (src/report/scripts.ts): core/explain.ts's formatNats, and the live page's poll period. */
declare const nats: (x: number | null | undefined) => string;
declare const POLL_MS: number;

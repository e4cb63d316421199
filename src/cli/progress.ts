import cliProgress from 'cli-progress';

/** A progress display on stderr; `update` is cheap enough to call per record. */
export interface Progress {
  update(done: number, extra?: { detail?: string }): void;
  stop(): void;
}

const NONE: Progress = { update() {}, stop() {} };

const mb = (n: number): string => `${(n / 1024 / 1024).toFixed(n < 10 * 1024 * 1024 ? 1 : 0)} MB`;

/**
 * A bar (cli-progress) when stderr is a terminal; otherwise, for long jobs, a plain line every
 * `everyMs` so that CI logs show the job is alive without filling up with bars.
 */
export function startProgress(options: {
  label: string;
  total: number;
  unit: 'bytes' | 'items';
  stream?: NodeJS.WriteStream;
  everyMs?: number;
  lines?: boolean;
}): Progress {
  const stream = options.stream ?? process.stderr;
  const fmt = (n: number) => (options.unit === 'bytes' ? mb(n) : n.toLocaleString('en-US'));
  if (stream.isTTY) {
    const bar = new cliProgress.SingleBar(
      {
        stream,
        format: `${options.label} [{bar}] {percentage}% | {done} of {all} | {detail} | eta {eta_formatted}`,
        hideCursor: true,
        clearOnComplete: true,
        etaBuffer: 50,
        fps: 5,
      },
      cliProgress.Presets.shades_classic,
    );
    bar.start(Math.max(1, options.total), 0, { done: fmt(0), all: fmt(options.total), detail: '' });
    return {
      update(done, extra) {
        bar.update(Math.min(done, options.total), {
          done: fmt(done),
          all: fmt(options.total),
          detail: extra?.detail ?? '',
        });
      },
      stop() {
        bar.stop();
      },
    };
  }
  if (options.lines === false) return NONE;
  const every = options.everyMs ?? 5000;
  let last = Date.now();
  const started = last;
  return {
    update(done, extra) {
      const now = Date.now();
      if (now - last < every) return;
      last = now;
      const share = options.total > 0 ? ` (${Math.min(100, Math.round((100 * done) / options.total))}%)` : '';
      stream.write(
        `${options.label}: ${fmt(done)} of ${fmt(options.total)}${share}${extra?.detail ? `, ${extra.detail}` : ''}, ${Math.round((now - started) / 1000)} s\n`,
      );
    },
    stop() {},
  };
}

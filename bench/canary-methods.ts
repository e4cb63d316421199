/**
 * The two published change detectors logprobe's canaries race against (bench/canary-race.ts), as
 * pure functions on numbers, so test/bench-canary.unit.test.ts can check them on synthetic input.
 *
 * Log Probability Tracking (LT; T. Chauvin, E. Le Merrer, F. Taïani, G. Tredan, "Log Probability
 * Tracking of LLM APIs", ICLR 2026, arXiv 2512.03816; code: timothee-chauvin/trackllm,
 * `logprob_two_sample_test`): a fixed one-token prompt, ONE output token with its top-k
 * logprobs per query. Two samples of such rows (a reference and a new one) become two matrices
 * over the union of the tokens either sample saw, a token missing from a row's top-k taking that
 * row's smallest logprob (left censoring, as the code does). The statistic is the mean over
 * tokens of |mean₁ − mean₂| (the L1 distance of the per-token mean logprobs over the token count);
 * the p-value is that of a two-sample permutation test: the rows are pooled and re-split at
 * random B times. We report (1 + #{T_perm ≥ T_obs}) / (1 + B) (Phipson & Smyth 2010: never 0,
 * P(p ≤ α) ≤ α); the code reports #/B, which can only be smaller.
 *
 * Black-Box Border Input Tracking (B3IT; T. Chauvin, C. Lalanne, E. Le Merrer, J.-M. Loubes,
 * F. Taïani, G. Tredan, "Token-Efficient Change Detection in LLM APIs", ICML 2026, arXiv
 * 2602.11083; timothee-chauvin/trackllm_website `bi/detection.py`): border inputs are prompts
 * whose top-2 next tokens (nearly) tie; only output tokens are observed. At temperature 0 a
 * border input's output is its argmax, and a change of the model shows as a flip of that argmax.
 * Selection as the website's `select_top_bis`: the most balanced top-2 first (here the reference
 * side's logprob gap, smallest first — what its p2/p1 estimates), `top_k_bis` = 20.
 */

/** One LT query's answer: the first output token's top-k logprobs, token → logprob. */
export type TopK = Readonly<Record<string, number>>;

/** Rows of both samples over the union of their tokens, a missing token at its row's smallest logprob. */
export function ltMatrices(a: readonly TopK[], b: readonly TopK[]): { a: number[][]; b: number[][] } {
  const tokens = [...new Set([...a, ...b].flatMap((r) => Object.keys(r)))];
  const row = (r: TopK): number[] => {
    const floor = Math.min(...Object.values(r));
    return tokens.map((t) => r[t] ?? floor);
  };
  return { a: a.map(row), b: b.map(row) };
}

/** LT's statistic: mean over tokens of |mean over rows of a − mean over rows of b|. */
export function ltStatistic(a: readonly (readonly number[])[], b: readonly (readonly number[])[]): number {
  const width = a[0]?.length ?? b[0]?.length ?? 0;
  if (width === 0 || a.length === 0 || b.length === 0) return 0;
  let sum = 0;
  for (let j = 0; j < width; j++) {
    let ma = 0;
    let mb = 0;
    for (const r of a) ma += r[j] ?? 0;
    for (const r of b) mb += r[j] ?? 0;
    sum += Math.abs(ma / a.length - mb / b.length);
  }
  return sum / width;
}

/** LT's two-sample permutation p-value over `permutations` random re-splits drawn from `random`. */
export function ltPValue(a: readonly TopK[], b: readonly TopK[], permutations: number, random: () => number): number {
  const m = ltMatrices(a, b);
  const observed = ltStatistic(m.a, m.b);
  if (observed === 0) return 1;
  const pooled = [...m.a, ...m.b];
  const eps = observed * 1e-9;
  let extreme = 0;
  for (let k = 0; k < permutations; k++) {
    // Fisher–Yates on a copy: the first |a| rows are the re-split's first sample.
    const p = [...pooled];
    for (let i = p.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [p[i], p[j]] = [p[j]!, p[i]!];
    }
    if (ltStatistic(p.slice(0, a.length), p.slice(a.length)) >= observed - eps) extreme++;
  }
  return (1 + extreme) / (1 + permutations);
}

/** A border input: its prompt, the reference side's argmax and top-1/top-2 gap (nats). */
export interface BorderInput<P> {
  probe: P;
  token: string;
  gap: number;
}

/** B3IT's selection: the `k` smallest reference gaps (the most balanced top-2). */
export function selectBorderInputs<P>(candidates: readonly BorderInput<P>[], k: number): BorderInput<P>[] {
  return [...candidates].sort((x, y) => x.gap - y.gap).slice(0, k);
}

/** B3IT's flip rule at temperature 0: a border input flipped when its greedy token is not the reference's. */
export function b3itFlipped(reference: string, observed: string): boolean {
  return observed !== reference;
}

/** B3IT's verdict over the answers so far: changed once `needed` border inputs flipped. */
export function b3itChanged(flips: readonly boolean[], needed = 1): boolean {
  return flips.filter(Boolean).length >= needed;
}

/** A horizontal bar chart in text, one bar per (row, series), log-scaled to `width` characters. */
export function asciiChart(
  rows: readonly { label: string; values: ReadonlyArray<{ series: string; value: number | null }> }[],
  o: { width: number; max: number; unit: string },
): string {
  const labelWidth = Math.max(...rows.flatMap((r) => r.values.map((v) => `${r.label} · ${v.series}`.length)));
  const scale = (v: number): number => Math.max(1, Math.round((Math.log10(v) / Math.log10(o.max)) * o.width));
  const lines: string[] = [];
  for (const r of rows) {
    for (const v of r.values) {
      const name = `${r.label} · ${v.series}`.padEnd(labelWidth);
      lines.push(
        v.value === null
          ? `${name} │${'·'.repeat(o.width)}  not within ${o.max} ${o.unit}`
          : `${name} │${'█'.repeat(scale(v.value))} ${v.value}`,
      );
    }
    lines.push('');
  }
  lines.push(`${' '.repeat(labelWidth)} └ log scale, 1 … ${o.max} ${o.unit}`);
  return lines.join('\n');
}

/**
 * `npm run bench:compare`: aligned tokens per second of `compare` on pre-parsed pairs (64 and 1024
 * tokens, top-5 and top-20), with the parse cost of the JSON bodies measured separately.
 * Target (issue #3): ≥ 2 million aligned tokens/s on one core for top-5, excluding parse; with
 * every health and definition check on (issue #27): `compare` of a pair ≤ 0.2× `JSON.parse` of one
 * of its bodies. That floor is measured beside it in this process, round after round (compare,
 * then JSON.parse, then parseResponse), so that a machine shared with other work moves both alike:
 * the ratio is the median over the rounds of each round's ratio.
 *
 * The pairs are a shifted candidate against its baseline with no divergence, so every token is
 * aligned and every position runs the full matching, shift and KL path.
 */
import { compare, parseResponse, DEFAULT_THRESHOLDS, type ParsedResponse } from '../src/core/index.js';
import { mulberry32 } from '../src/core/random.js';

/** A chat body with `n` tokens and `k` alternatives per step; `shift` moves every value. */
function body(n: number, k: number, seed: number, shift: number): string {
  const r = mulberry32(seed);
  const noise = mulberry32(seed + 1000);
  const content = [];
  for (let i = 0; i < n; i++) {
    const vals: number[] = [];
    let v = -r() * 0.5;
    for (let j = 0; j < k; j++) {
      vals.push(v);
      v -= 0.2 + r() * 2;
    }
    const toks = vals.map((_, j) => ` w${Math.floor(r() * 5000)}_${j}`);
    const top = toks.map((token, j) => ({ token, logprob: vals[j]! + (noise() - 0.5) * 2 * shift, bytes: null }));
    content.push({ token: toks[0], logprob: top[0]!.logprob, bytes: null, top_logprobs: top });
  }
  return JSON.stringify({
    object: 'chat.completion',
    model: 'bench',
    choices: [
      { index: 0, message: { role: 'assistant', content: '' }, logprobs: { content }, finish_reason: 'length' },
    ],
  });
}

function timeIt(minMs: number, fn: () => void): { perCall: number; calls: number } {
  // Warm up so the JIT has compiled the hot loop before we measure.
  const warmEnd = performance.now() + minMs / 4;
  while (performance.now() < warmEnd) fn();
  let calls = 0;
  const start = performance.now();
  let now = start;
  while (now - start < minMs) {
    for (let i = 0; i < 20; i++) fn();
    calls += 20;
    now = performance.now();
  }
  return { perCall: (now - start) / calls, calls };
}

const MS = Number(process.env.BENCH_MS ?? 1500);
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3));
const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const rows: string[] = [];
let sink = 0;
for (const k of [5, 20]) {
  for (const n of [64, 1024]) {
    const cText = body(n, k, 1, 0.3);
    const bText = body(n, k, 1, 0);
    const c: ParsedResponse = parseResponse(cText);
    const b: ParsedResponse = parseResponse(bText);
    const check = compare(c, b, DEFAULT_THRESHOLDS);
    if (check.aligned !== n) throw new Error(`bench pair not aligned: ${check.aligned}/${n}`);
    const cmps: number[] = [];
    const floors: number[] = [];
    const parses: number[] = [];
    const ratios: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const cmp = timeIt(MS / ROUNDS, () => {
        sink += compare(c, b, DEFAULT_THRESHOLDS).shifted;
      }).perCall;
      const floor = timeIt(MS / ROUNDS / 2, () => {
        sink += (JSON.parse(cText) as { choices: unknown[] }).choices.length;
      }).perCall;
      const parse = timeIt(MS / ROUNDS / 2, () => {
        sink += parseResponse(cText).steps.length;
      }).perCall;
      cmps.push(cmp);
      floors.push(floor);
      parses.push(parse);
      ratios.push(cmp / floor);
    }
    const cmp = median(cmps);
    const floor = median(floors);
    const parse = median(parses);
    const ratio = median(ratios);
    const tokPerSec = n / (cmp / 1000);
    rows.push(
      [
        `top-${k}`.padEnd(7),
        `${n} tok`.padStart(9),
        `${(tokPerSec / 1e6).toFixed(2)} M aligned tok/s`.padStart(22),
        `${(cmp * 1000).toFixed(1)} µs/compare`.padStart(18),
        `JSON.parse ${(floor * 1000).toFixed(1)} µs/body`.padStart(26),
        `compare ${ratio.toFixed(3)}× JSON.parse (${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)}; target ≤ 0.2)`.padStart(
          56,
        ),
        `parse ${(parse * 1000).toFixed(1)} µs/body (${(n / (parse / 1000) / 1e6).toFixed(2)} M tok/s, ${(parse / floor).toFixed(2)}× JSON.parse)`,
      ].join('  '),
    );
  }
}
process.stdout.write(
  `compare bench (node ${process.version}, one core, ${MS} ms per case in ${ROUNDS} rounds; medians, the ratio's range over rounds in brackets)\n${rows.join('\n')}\n`,
);
if (sink === 0.5) process.stdout.write('\n');

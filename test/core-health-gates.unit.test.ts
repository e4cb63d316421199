/**
 * The health figures, the definition checks, the gates and token-logprob files on
 * synthetic distributions whose answers are known in closed form (src/core/health.ts,
 * definition.ts, gates.ts, training.ts, parse/tokenfile.ts). The same checks on real llama.cpp
 * numerics are in test/e2e-llama-golden.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  compare,
  compareTraining,
  definitionChecks,
  GateAccumulator,
  HealthAccumulator,
  judge,
  parseGates,
  parseResponse,
  readSequences,
  DEFAULT_THRESHOLDS,
  type Comparison,
  type GatePair,
  type TokenStep,
} from '../src/core/index.js';
import { chatBody, type Spec } from './core-bodies.js';

/** A seeded distribution over a 50-token vocabulary at each of n positions (logits ~ N(0, 2²)). */
function logits(n: number, seed = 1): number[][] {
  let x = seed >>> 0;
  const rnd = () => {
    x = (x * 1664525 + 1013904223) >>> 0;
    return x / 2 ** 32;
  };
  return Array.from({ length: n }, () =>
    Array.from({ length: 50 }, () => 2 * Math.sqrt(-2 * Math.log(rnd() + 1e-12)) * Math.cos(2 * Math.PI * rnd())),
  );
}

function logSoftmax(z: readonly number[], T = 1): number[] {
  const s = z.map((v) => v / T);
  const m = Math.max(...s);
  const lse = m + Math.log(s.reduce((a, v) => a + Math.exp(v - m), 0));
  return s.map((v) => v - lse);
}

/** Steps of a greedy generation over the given logits: top-k full-vocabulary logprobs (`tok<i>` texts). */
function specs(z: number[][], k = 10, T = 1, chosen?: number[]): Spec[] {
  return z.map((row, i) => {
    const lp = logSoftmax(row, T);
    const order = lp.map((_, j) => j).sort((a, b) => lp[b]! - lp[a]!);
    const c = chosen?.[i] ?? order[0]!;
    return {
      token: `tok${c}`,
      logprob: lp[c]!,
      top: order.slice(0, k).map((j) => [`tok${j}`, lp[j]!] as [string, number]),
    };
  });
}

const parsed = (s: Spec[]) => parseResponse(chatBody(s));

test('health: identical sides are 0 everywhere; a known shift of the chosen token gives its relative error exactly', () => {
  const z = logits(12);
  const same = compare(parsed(specs(z)), parsed(specs(z)));
  assert.equal(same.health?.kl.mean, 0);
  assert.equal(same.health?.relErr.max, 0);
  assert.equal(same.health?.logits.max, 0);
  assert.equal(same.health?.logits.topK, 10);
  // Every logit of the candidate's token +0.05: its logprob moves by about that much; rel err = |exp(Δ) − 1|.
  const moved = z.map((row) => row.map((v, j) => (j === row.indexOf(Math.max(...row)) ? v + 0.05 : v)));
  const c = compare(parsed(specs(moved)), parsed(specs(z)));
  assert.equal(c.firstDivergence, null);
  const expected = Math.max(...c.positions.map((p) => Math.abs(Math.expm1(p.candidate! - p.baseline!))));
  assert.ok(Math.abs(c.health!.relErr.max! - expected) < 1e-12);
  assert.ok(c.health!.relErr.mean! > 0.01 && c.health!.relErr.mean! < 0.06, String(c.health!.relErr.mean));
  assert.ok(c.health!.kl.mean! > 0 && c.health!.kl.mean! < 0.01);
  assert.ok(c.health!.logits.max! > 0.04 && c.health!.logits.max! < 0.06);
});

test("health: a token in one top-10 the other side does not list is a lower bound from that side's smallest value", () => {
  const b: Spec = {
    token: 'a',
    logprob: -0.1,
    top: [
      ['a', -0.1],
      ['b', -3],
      ['c', -4],
    ],
  };
  const c: Spec = {
    token: 'a',
    logprob: -0.1,
    top: [
      ['a', -0.1],
      ['b', -3],
      ['z', -2],
    ],
  };
  const r = compare(parsed([c]), parsed([b]));
  // z: −2 on the candidate, at most −4 on the baseline: at least 2 apart.
  assert.equal(r.health!.logits.max, 2);
  assert.equal(r.health!.logits.lowerBound, true);
});

test('definition: renormalised top-p, a single survivor, temperature 0.8 and probabilities are named; noise is not', () => {
  const z = logits(24, 7);
  const raw = specs(z);
  const noisy = specs(z.map((row) => row.map((v) => v + 1e-3 * Math.sin(v * 1000))));
  assert.deepEqual(definitionChecks(parsed(noisy).steps, parsed(raw).steps, 24, false), [], 'float noise: no warning');

  // Top-p 0.9 renormalised, the rest of the list kept raw (sums above 1) or dropped (the whole mass within the list).
  const topP = (keepRest: boolean) =>
    raw.map((s) => {
      let cum = 0;
      const kept: Array<[string, number]> = [];
      for (const [t, v] of s.top) {
        if (cum >= 0.9) break;
        kept.push([t, v!]);
        cum += Math.exp(v!);
      }
      const zz = Math.log(kept.reduce((a, [, v]) => a + Math.exp(v), 0));
      const top: Array<[string, number]> = keepRest
        ? s.top.map(([t, v]) => [t, kept.some((k) => k[0] === t) ? v! - zz : v!])
        : kept.map(([t, v]) => [t, v - zz]);
      return { ...s, logprob: top.find((e) => e[0] === s.token)?.[1] ?? s.logprob, top };
    });
  for (const keep of [true, false]) {
    const w = definitionChecks(parsed(topP(keep)).steps, parsed(raw).steps, 24, false);
    const hit = w.find((x) => x.check === 'renormalised_subset');
    assert.ok(hit, `top-p (${keep ? 'rest kept' : 'rest dropped'}): ${JSON.stringify(w)}`);
    assert.equal(hit.side, 'candidate');
    assert.match(hit.detail, /normalisation domain differs: full vocabulary vs a truncated subset/);
  }

  // Top-k 1: one survivor, probability exactly 1.
  const survivor = raw.map((s) => ({ ...s, logprob: 0, top: [[s.token, 0]] as Array<[string, number]> }));
  const w1 = definitionChecks(parsed(survivor).steps, parsed(raw).steps, 24, false);
  assert.ok(
    w1.some((x) => x.check === 'single_survivor' && x.side === 'candidate'),
    JSON.stringify(w1),
  );

  // Temperature 0.8 on the candidate: its gaps are the baseline's × 1.25.
  const hot = specs(z, 10, 0.8);
  const w2 = definitionChecks(parsed(hot).steps, parsed(raw).steps, 24, false);
  const t = w2.find((x) => x.check === 'temperature_scaled');
  assert.ok(t, JSON.stringify(w2));
  assert.match(t.detail, /× 1\.250 .*T ≈ 0\.80/);

  // Probabilities instead of logprobs.
  const probs = raw.map((s) => ({
    ...s,
    logprob: Math.exp(s.logprob!),
    top: s.top.map(([k, v]) => [k, Math.exp(v!)] as [string, number]),
  }));
  const w3 = definitionChecks(parsed(probs).steps, parsed(raw).steps, 24, false);
  assert.deepEqual(
    w3.map((x) => [x.check, x.side]),
    [['probabilities', 'candidate']],
  );
});

test('definition: temperature is found from the chosen logprobs of sampled tokens alone when there are no top lists', () => {
  const z = logits(40, 3);
  const strip = (s: Spec[]) => s.map((x) => ({ ...x, top: [] }));
  const sampled = z.map((r, i) => [...r.keys()].sort((a, b) => r[b]! - r[a]!)[(i * 7) % 10]!);
  const w = definitionChecks(
    parsed(strip(specs(z, 10, 0.7, sampled))).steps,
    parsed(strip(specs(z, 10, 1, sampled))).steps,
    40,
    false,
  );
  assert.deepEqual(
    definitionChecks(
      parsed(strip(specs(z, 10, 1, sampled))).steps,
      parsed(strip(specs(z, 10, 1, sampled))).steps,
      40,
      false,
    ),
    [],
  );
  assert.ok(
    w.some((x) => x.check === 'temperature_scaled' && /chosen logprobs/.test(x.detail)),
    JSON.stringify(w),
  );
});

test('gates: parsing, defaults, the last of a kind wins; bad items are named', () => {
  assert.deepEqual(
    parseGates(['logits', 'tokens,kl:0.1', 'definition', 'kl:0.05']).map((g) => g.name),
    ['logits:0.01', 'tokens:128', 'kl:0.05', 'definition'],
  );
  assert.throws(() => parseGates(['logit:0.1']), /unknown gate 'logit:0.1'/);
  assert.throws(() => parseGates(['tokens:1.5']), /whole number/);
  assert.throws(() => parseGates(['definition:1']), /takes no value/);
});

function gatePair(
  c: Comparison | null,
  lengths = { candidate: 8, baseline: 8 },
  maxTokens: number | null = 8,
): GatePair {
  return {
    at: 'p:1',
    id: 'p:1',
    route: '/v1/completions',
    outcome: c ? 'ok' : 'candidate_error',
    comparison: c,
    lengths,
    maxTokens,
  };
}

test('gates: each fails for its own reason and passes otherwise; an uncompared pair fails every gate', () => {
  const z = logits(8);
  const same = compare(parsed(specs(z)), parsed(specs(z)));
  const [logitsGate, tokens, kl, def] = parseGates(['logits:0.01,tokens:8,kl:0.05,definition']);
  for (const g of [logitsGate!, tokens!, kl!, def!]) assert.equal(judge(g, gatePair(same)).status, 'passed', g.name);
  // A flip at position 3.
  const flipped = specs(z);
  flipped[3] = { ...flipped[3]!, token: flipped[3]!.top[1]![0] };
  const diverged = compare(parsed(flipped), parsed(specs(z)));
  const t = judge(tokens!, gatePair(diverged));
  assert.equal(t.status, 'failed');
  assert.equal(t.figure, 3);
  assert.match(t.message, /token ids differ at position 3/);
  // One side stopped early (not by max_tokens): a mismatch at the shorter length.
  const early = judge(
    tokens!,
    gatePair(compare(parsed(specs(z).slice(0, 5)), parsed(specs(z))), { candidate: 5, baseline: 8 }, 8),
  );
  assert.equal(early.status, 'failed');
  assert.match(early.message, /candidate stopped after 5 tokens/);
  // Both capped by max_tokens below N: passed, and said.
  const capped = judge(parseGates(['tokens:128'])[0]!, gatePair(same, { candidate: 8, baseline: 8 }, 8));
  assert.equal(capped.status, 'passed');
  assert.match(capped.note ?? '', /max_tokens 8 < 128/);
  // A shifted distribution fails logits and kl.
  const argmax = z.map((r) => r.indexOf(Math.max(...r)));
  const shifted = compare(
    parsed(
      specs(
        z.map((r) => r.map((v, j) => v + (j % 3) * 0.5)),
        10,
        1,
        argmax,
      ),
    ),
    parsed(specs(z)),
  );
  assert.equal(shifted.firstDivergence, null);
  assert.equal(judge(logitsGate!, gatePair(shifted)).status, 'failed');
  // Temperature scaling fails definition.
  const hot = compare(parsed(specs(z, 10, 0.8)), parsed(specs(z)));
  assert.equal(judge(def!, gatePair(hot)).status, 'failed');
  for (const g of [logitsGate!, tokens!, kl!, def!]) assert.equal(judge(g, gatePair(null)).status, 'error', g.name);

  const cases: string[] = [];
  const acc = new GateAccumulator(parseGates(['tokens:8', 'kl:0.0001']), (spec, p, r) =>
    cases.push(`${spec.kind} ${p.at} ${r.status}`),
  );
  acc.add(gatePair(same));
  acc.add({ ...gatePair(diverged), at: 'p:2', id: 'p:2' });
  acc.add({ ...gatePair(shifted), at: 'p:3', id: 'p:3' });
  const [tr, kr] = acc.results();
  assert.equal(tr!.passed, false);
  assert.equal(tr!.failed, 1);
  assert.equal(tr!.figure, 3);
  assert.equal(tr!.worst[0]!.at, 'p:2');
  assert.equal(kr!.passed, false);
  assert.ok(kr!.worst.some((w) => w.at === 'p:3'));
  assert.ok(kr!.worst[0]!.figure! >= kr!.worst[1]!.figure!, 'the worst KL first');
  assert.equal(kr!.figure, kr!.worst[0]!.figure);
  assert.ok(kr!.pooled! > 0);
  assert.equal(cases.length, 6);

  const h = new HealthAccumulator();
  h.add(same, 'p:1', 'p:1');
  h.add(hot, 'p:2', 'p:2');
  assert.equal(h.health().pairs, 2);
  assert.deepEqual(
    h.definition().map((d) => d.check),
    ['temperature_scaled'],
  );
});

test('gates: the tokens gate says how many tokens it compared, the logits gate the top-k it read', () => {
  const z = logits(24);
  const same = compare(parsed(specs(z)), parsed(specs(z)));
  // Answers of 24 tokens under tokens:128: 24 compared, not 128.
  const short = new GateAccumulator(parseGates(['tokens:128']));
  short.add(gatePair(same, { candidate: 24, baseline: 24 }, 128));
  const [s] = short.results();
  assert.equal(s!.passed, true);
  assert.match(s!.summary, /^PASS tokens:128: greedy token ids identical for the first 24 tokens \(of the 128 asked/);
  assert.doesNotMatch(s!.summary, /identical for the first 128/);
  // Prompts of different lengths: the span; every prompt at N or more: N.
  short.add({
    ...gatePair(
      compare(parsed(specs(z.slice(0, 9))), parsed(specs(z.slice(0, 9)))),
      { candidate: 9, baseline: 9 },
      128,
    ),
    at: 'p:2',
  });
  assert.match(short.results()[0]!.summary, /identical for the first 9–24 tokens \(of the 128 asked/);
  const full = new GateAccumulator(parseGates(['tokens:16']));
  full.add(gatePair(same, { candidate: 24, baseline: 24 }, 24));
  assert.match(full.results()[0]!.summary, /^PASS tokens:16: greedy token ids identical for the first 16; /);
  // Nothing compared: no count is claimed.
  const none = new GateAccumulator(parseGates(['tokens:16']));
  none.add(gatePair(null));
  assert.match(none.results()[0]!.summary, /^FAIL tokens:16: no prompt had its token ids compared; /);

  // The logits gate labels the top lists it read: 10, or fewer (and then says so), as the health report does.
  const ten = new GateAccumulator(parseGates(['logits']));
  ten.add(gatePair(same, { candidate: 24, baseline: 24 }, 24));
  assert.match(ten.results()[0]!.summary, /over each side's top-10 0\.000/);
  const five = compare(parsed(specs(z, 5)), parsed(specs(z, 5)));
  const g5 = new GateAccumulator(parseGates(['logits']));
  g5.add(gatePair(five, { candidate: 24, baseline: 24 }, 24));
  const [r5] = g5.results();
  assert.match(
    r5!.summary,
    /over each side's top-5 \(top lists of 5 only, fewer than the 10 the figure is defined on\) 0\.000/,
  );
  assert.doesNotMatch(r5!.summary, /top-10/);
  assert.match(judge(parseGates(['logits'])[0]!, gatePair(five)).message, /over each side's top-5 /);
  const h = new HealthAccumulator();
  h.add(five, 'p:1', 'p:1');
  assert.equal(h.health().logits.topK, 5);
});

/** A trainer's dump of sampled tokens over the given logits, in the documented shape. */
function trainerLine(id: string, z: number[][], chosen: number[], T = 1, k = 5): Record<string, unknown> {
  const rows = z.map((r) => logSoftmax(r, T));
  return {
    id,
    token_ids: chosen,
    logprobs: chosen.map((c, i) => rows[i]![c]),
    top_logprobs: rows.map((lp) =>
      Object.fromEntries(
        lp
          .map((v, j) => [String(j), v] as const)
          .sort((a, b) => b[1] - a[1])
          .slice(0, k),
      ),
    ),
  };
}

/** The engine's side of the same tokens: a vLLM-shaped prompt_logprobs answer (entry 0 null). */
function promptLogprobs(z: number[][], prefix: number[], chosen: number[], withIds: boolean): Record<string, unknown> {
  const rows = z.map((r) => logSoftmax(r));
  const ids = [...prefix, ...chosen];
  const list: unknown[] = [null];
  for (let i = 1; i < ids.length; i++) {
    const lp = i >= prefix.length ? rows[i - prefix.length]! : logSoftmax(logits(1, 100 + i)[0]!);
    const top = lp
      .map((v, j) => [j, v] as const)
      .sort((a, b) => b[1] - a[1])
      .slice(0, 5);
    const dict: Record<string, unknown> = Object.fromEntries(
      top.map(([j, v], r) => [String(j), { logprob: v, rank: r + 1, decoded_token: `t${j}` }]),
    );
    dict[String(ids[i])] ??= { logprob: lp[ids[i]!], rank: 9, decoded_token: `t${ids[i]}` };
    list.push(dict);
  }
  return { choices: [{ index: 0, text: '', prompt_logprobs: list, ...(withIds ? { prompt_token_ids: ids } : {}) }] };
}

test('token-logprob files: a trainer dump against vLLM prompt_logprobs lines up by id inside the longer sequence; the ratio is exp(lp_train − lp_infer)', () => {
  const z = logits(16, 11);
  const chosen = z.map((r, i) => [...r.keys()].sort((a, b) => r[b]! - r[a]!)[i % 3]!); // sampled: not always the argmax
  const prefix = [7, 8, 9, 10];
  const train = readSequences(
    JSON.stringify(
      trainerLine(
        's1',
        z.map((r) => r.map((v) => v * 1.0001)),
        chosen,
      ),
    ),
  );
  assert.equal(train.kind, 'tokens');
  for (const withIds of [true, false]) {
    const infer = readSequences(JSON.stringify(promptLogprobs(z, prefix, chosen, withIds)));
    assert.equal(infer.kind, 'engine');
    const r = compareTraining(train.sequences[0]!, infer.sequences[0]!, DEFAULT_THRESHOLDS);
    assert.ok(!('error' in r), JSON.stringify(r));
    assert.equal(r.training.positions, 16);
    assert.match(
      r.training.alignment,
      /offset 3/,
      'prompt_logprobs start at position 1: the response is at offset prefix − 1',
    );
    const p = r.positions[5]!;
    assert.ok(
      Math.abs(r.training.worst.find((w) => w.i === 5)?.ratio ?? Math.exp(p.candidate! - p.baseline!)) -
        Math.exp(p.candidate! - p.baseline!) <
        1e-12,
    );
    assert.ok(r.training.ratio.max! < 1.01 && r.training.ratio.min! > 0.99);
    assert.equal(r.training.ratio.outside, 0);
    assert.ok(r.health!.kl.mean! < 1e-4);
    assert.deepEqual(r.definition, []);
  }
  // A trainer that forgot the rollout's temperature (T 0.8 on the engine, 1 in the trainer): named, and the ratio leaves the bounds.
  const hotInfer = readSequences(JSON.stringify(trainerLine('s1', z, chosen, 0.8)));
  const r2 = compareTraining(train.sequences[0]!, hotInfer.sequences[0]!, DEFAULT_THRESHOLDS);
  assert.ok(!('error' in r2));
  assert.ok(
    r2.definition!.some((d) => d.check === 'temperature_scaled'),
    JSON.stringify(r2.definition),
  );
  assert.ok(r2.training.ratio.outside > 0);
  // Not the same tokens: refused with the position.
  const other = readSequences(
    JSON.stringify(
      trainerLine(
        's1',
        z,
        chosen.map((c, i) => (i === 4 ? c + 1 : c)),
      ),
    ),
  );
  const bad = compareTraining(train.sequences[0]!, other.sequences[0]!, DEFAULT_THRESHOLDS);
  assert.ok('error' in bad && /position 4/.test(bad.error), JSON.stringify(bad));
});

test('token-logprob files: the shapes a script writes — JSONL, a list, {sequences}, a batch, [[token, lp]] and parallel topk arrays, NaN, probabilities', () => {
  const one = {
    id: 'a',
    tokens: ['x', 'y'],
    logprobs: [-0.5, -1.5],
    top_logprobs: [
      [
        ['x', -0.5],
        ['z', -1],
      ],
      [{ token: 'y', logprob: -1.5 }],
    ],
  };
  assert.equal(readSequences(`${JSON.stringify(one)}\n${JSON.stringify({ ...one, id: 'b' })}\n`).sequences.length, 2);
  assert.equal(readSequences(JSON.stringify([one, one])).sequences.length, 2);
  assert.equal(readSequences(JSON.stringify({ sequences: [one] })).sequences.length, 1);
  const batch = readSequences(
    JSON.stringify({
      id: ['a', 'b'],
      token_ids: [
        [1, 2],
        [3, 4],
      ],
      logprobs: [
        [-1, -2],
        [-3, -4],
      ],
    }),
  );
  assert.deepEqual(
    batch.sequences.map((s) => [s.id, s.steps.map((x) => x.id)]),
    [
      ['a', [1, 2]],
      ['b', [3, 4]],
    ],
  );
  const topk = readSequences(
    JSON.stringify({ token_ids: [5], logprobs: [-0.2], top_logprobs: [[-0.2, -2]], top_token_ids: [[5, 6]] }),
  );
  assert.deepEqual(topk.sequences[0]!.steps[0]!.topIds, [5, 6]);
  const nan = readSequences('{"token_ids": [1, 2], "logprobs": [NaN, -1.0]}');
  assert.equal(nan.sequences[0]!.steps[0]!.logprob, null);
  const s: TokenStep = readSequences(JSON.stringify(one)).sequences[0]!.steps[0]!;
  assert.deepEqual(s.top, [
    ['x', -0.5],
    ['z', -1],
  ]);
  const masked = readSequences(JSON.stringify({ token_ids: [1, 2, 3], logprobs: [-1, -2, -3], mask: [0, 1, 1] }));
  assert.deepEqual(
    masked.sequences[0]!.steps.map((x) => x.id),
    [2, 3],
  );
  assert.match(
    readSequences(JSON.stringify({ token_ids: [1], logprobs: [-1, -2] })).problems[0]!,
    /token_ids has 1 entries and logprobs 2/,
  );
});

test("token-logprob files: byte-level BPE texts (Ġ, Ċ) line up with an engine's decoded pieces; texts that still differ fall back to position when one side names ids", () => {
  const train = readSequences(
    JSON.stringify({ token_ids: [1, 2, 3], tokens: ['Hello', '\u0120world', '\u010a'], logprobs: [-1, -2, -3] }),
  ).sequences[0]!;
  const infer = readSequences(JSON.stringify({ tokens: ['Hello', ' world', '\n'], logprobs: [-1.01, -2, -3] }))
    .sequences[0]!;
  const r = compareTraining(train, infer, DEFAULT_THRESHOLDS);
  assert.ok(!('error' in r), JSON.stringify(r));
  assert.match(r.training.alignment, /^by token texts, 3 positions$/);
  const other = readSequences(JSON.stringify({ tokens: ['Hel', 'lo world', '!'], logprobs: [-1, -2, -3] }))
    .sequences[0]!;
  const p = compareTraining(train, other, DEFAULT_THRESHOLDS);
  assert.ok(!('error' in p));
  assert.match(p.training.alignment, /by position \(3\): the token texts differ .* not verified/);
});

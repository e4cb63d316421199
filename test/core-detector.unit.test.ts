import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  cusumIncrement,
  initialDetectorState,
  observe,
  pooledShare,
  stepAlert,
  tick,
  type AlertConfig,
  type DetectorState,
} from '../src/core/detector.js';
import { evidenceText } from '../src/mirror/notify.js';

const CFG: AlertConfig = { window: 10, minRequests: 5, fireFraction: 0.5, forSeconds: 60, cusum: { k: 0.5, h: 5 } };

function feed(
  state: DetectorState,
  n: number,
  obs: { shifted: number; comparable: number; maxShift: number },
  t0: number,
  dt: number,
  cfg = CFG,
) {
  const transitions = [];
  let s = state;
  for (let i = 0; i < n; i++) {
    const r = observe(s, { ...obs, noiseFloor: 0.1, requestId: `r${i}` }, cfg, t0 + i * dt);
    s = r.state;
    transitions.push(...r.transitions);
  }
  return { state: s, transitions };
}

test('the pooled share sums positions over the window, not request shares', () => {
  let s = initialDetectorState();
  s = observe(s, { shifted: 1, comparable: 1, maxShift: 1, noiseFloor: 0.1, requestId: 'a' }, CFG, 0).state;
  s = observe(s, { shifted: 0, comparable: 9, maxShift: 0.01, noiseFloor: 0.1, requestId: 'b' }, CFG, 0).state;
  assert.equal(pooledShare(s), 0.1);
});

test('the window forgets requests older than alert.window', () => {
  const { state } = feed(initialDetectorState(), 10, { shifted: 5, comparable: 5, maxShift: 1 }, 0, 0);
  assert.equal(pooledShare(state), 1);
  const after = feed(state, 10, { shifted: 0, comparable: 5, maxShift: 0.01 }, 0, 0).state;
  assert.equal(pooledShare(after), 0);
  assert.equal(after.recent.length, 10);
});

test('LogprobGlobalShift needs minRequests, then must hold forSeconds to fire, and stay below forSeconds to resolve', () => {
  const shifted = { shifted: 1, comparable: 1, maxShift: 2 };
  let r = feed(initialDetectorState(), 4, shifted, 0, 1);
  assert.equal(r.state.global.phase, 'inactive', 'fewer than minRequests');
  r = feed(r.state, 1, shifted, 4, 1);
  assert.equal(r.state.global.phase, 'pending');
  r = feed(r.state, 1, shifted, 30, 1);
  assert.equal(r.state.global.phase, 'pending', 'not yet forSeconds');
  const fired = tick(r.state, CFG, 64);
  assert.equal(fired.state.global.phase, 'firing', 'time alone fires it once forSeconds held');
  assert.deepEqual(
    fired.transitions.map((t) => [t.alert, t.to]),
    [['LogprobGlobalShift', 'firing']],
  );
  assert.equal(fired.transitions[0]!.evidence.pooledShare, 1);
  assert.equal(fired.transitions[0]!.evidence.medianShift, 2);
  assert.ok(fired.transitions[0]!.evidence.exampleRequestId);

  const clean = feed(fired.state, 10, { shifted: 0, comparable: 5, maxShift: 0.01 }, 70, 1);
  assert.equal(clean.state.global.phase, 'resolving');
  assert.equal(clean.transitions.filter((t) => t.alert === 'LogprobGlobalShift').length, 0, 'no flapping');
  const resolved = tick(clean.state, CFG, 70 + 9 + 61);
  assert.equal(resolved.state.global.phase, 'inactive');
  // (The sustained alert, fired by the same six requests, resolves with it: its S has decayed.)
  assert.deepEqual(
    resolved.transitions.filter((t) => t.alert === 'LogprobGlobalShift').map((t) => [t.alert, t.to]),
    [['LogprobGlobalShift', 'resolved']],
  );
});

test('a brief excursion shorter than forSeconds never fires', () => {
  let r = feed(initialDetectorState(), 10, { shifted: 1, comparable: 1, maxShift: 1 }, 0, 1);
  assert.equal(r.state.global.phase, 'pending');
  r = feed(r.state, 10, { shifted: 0, comparable: 1, maxShift: 0 }, 10, 1);
  assert.equal(r.state.global.phase, 'inactive');
  assert.equal(tick(r.state, CFG, 1000).transitions.filter((t) => t.alert === 'LogprobGlobalShift').length, 0);
});

test('CUSUM: noise near the floor stays at 0; a sustained 1× floor shift alarms; it resets on resolve', () => {
  const noise = feed(initialDetectorState(), 200, { shifted: 0, comparable: 10, maxShift: 0.02 }, 0, 1);
  assert.equal(noise.state.cusum, 0);
  assert.equal(noise.transitions.length, 0);

  // maxShift ≈ the floor on every request: x = 1.2, S grows by 0.7 per request.
  const small = feed(initialDetectorState(), 9, { shifted: 1, comparable: 40, maxShift: 0.12 }, 0, 1);
  assert.ok(small.state.cusum > 5, `S = ${small.state.cusum}`);
  assert.deepEqual(
    small.transitions.map((t) => [t.alert, t.to]),
    [['LogprobSustainedShift', 'firing']],
  );
  assert.equal(small.state.global.phase, 'inactive', 'the pooled share (1/40) never moves');

  const recovered = feed(small.state, 40, { shifted: 0, comparable: 40, maxShift: 0.01 }, 100, 1);
  assert.equal(recovered.state.sustained.phase, 'resolving');
  const resolved = tick(recovered.state, CFG, 100 + 40 + 61);
  assert.deepEqual(
    resolved.transitions.map((t) => [t.alert, t.to]),
    [['LogprobSustainedShift', 'resolved']],
  );
  assert.equal(resolved.state.cusum, 0, 'S restarts from 0');
});

test('CUSUM is capped at 2h so a fix is recognised in bounded time', () => {
  const big = feed(initialDetectorState(), 100, { shifted: 10, comparable: 10, maxShift: 5 }, 0, 1);
  assert.equal(big.state.cusum, 10);
});

test('stepAlert with forSeconds 0 fires and resolves at once', () => {
  let s = stepAlert({ phase: 'inactive', since: 0, firedAt: null }, true, 5, 0);
  assert.equal(s.change, 'firing');
  s = stepAlert(s.state, false, 6, 0);
  assert.equal(s.change, 'resolved');
});

// The defaults: a request adds at most h / minRequests = 0.25 to S (x clipped at k + 0.25 = 0.75).
const DEFAULTS: AlertConfig = {
  window: 50,
  minRequests: 20,
  fireFraction: 0.5,
  forSeconds: 0,
  cusum: { k: 0.5, h: 5 },
};

test('CUSUM: one huge request adds at most h / minRequests; it never fires LogprobSustainedShift on its own', () => {
  // maxShift 5 nats at a 0.1 floor: x = 50, which took S to its cap of 2h at once before the clip.
  const one = observe(
    initialDetectorState(),
    { shifted: 30, comparable: 30, maxShift: 5, noiseFloor: 0.1, requestId: 'huge' },
    DEFAULTS,
    0,
  );
  assert.equal(one.state.cusum, 0.25);
  assert.equal(cusumIncrement(50, DEFAULTS), 0.25);
  assert.deepEqual(one.transitions, []);
  // Also late in a stream, after a full window of clean requests: a gate on "requests seen so far" would fire here.
  const clean = feed(initialDetectorState(), 60, { shifted: 0, comparable: 16, maxShift: 0.01 }, 0, 1, DEFAULTS);
  const late = observe(
    clean.state,
    { shifted: 30, comparable: 30, maxShift: 5, noiseFloor: 0.1, requestId: 'huge' },
    DEFAULTS,
    100,
  );
  assert.equal(late.state.cusum, 0.25);
  assert.equal(late.state.sustained.phase, 'inactive');
});

test('one huge request with many shifted positions fires the window (LogprobGlobalShift), not the sustained alert', () => {
  const clean = feed(initialDetectorState(), 49, { shifted: 0, comparable: 16, maxShift: 0.01 }, 0, 1, DEFAULTS);
  // 784 clean positions pooled with 1,000 shifted ones: a share of 0.56 ≥ fireFraction.
  const r = observe(
    clean.state,
    { shifted: 1000, comparable: 1000, maxShift: 5, noiseFloor: 0.1, requestId: 'huge' },
    DEFAULTS,
    49,
  );
  assert.deepEqual(
    r.transitions.map((t) => [t.alert, t.to]),
    [['LogprobGlobalShift', 'firing']],
  );
  assert.equal(r.state.sustained.phase, 'inactive');
  assert.ok(pooledShare(r.state) >= 0.5);
});

test('CUSUM: a sustained small shift fires after more than minRequests requests, and the evidence says how many and how far', () => {
  // x = 1.5 on every request: unclipped S would pass h at the 6th request; clipped, at the 21st.
  const run = feed(initialDetectorState(), 21, { shifted: 1, comparable: 40, maxShift: 0.15 }, 0, 1, DEFAULTS);
  const fired = run.transitions.filter((t) => t.alert === 'LogprobSustainedShift');
  assert.equal(fired.length, 1);
  assert.equal(
    feed(initialDetectorState(), 20, { shifted: 1, comparable: 40, maxShift: 0.15 }, 0, 1, DEFAULTS).state.sustained
      .phase,
    'inactive',
    'not at the 20th',
  );
  const e = fired[0]!.evidence;
  assert.equal(e.cusumRequests, 21);
  assert.ok(Math.abs(e.medianX! - 1.5) < 1e-9, `median x ${e.medianX}`);
  assert.ok(e.cusum > 5);
  assert.match(
    evidenceText(fired[0]!),
    /^CUSUM 5\.\d over 21 requests in a row, median maxShift 1\.50× the noise floor$/,
  );
  // A shift below the clip counts in full: x = 0.7 adds 0.2, S passes 5 at the 26th request.
  const small = feed(initialDetectorState(), 26, { shifted: 0, comparable: 40, maxShift: 0.07 }, 0, 1, DEFAULTS);
  assert.equal(small.transitions.filter((t) => t.alert === 'LogprobSustainedShift').length, 1);
  assert.equal(small.state.cusumRun, 26);
  // Noise lets S decay and the run ends: the count starts again.
  const calm = feed(small.state, 40, { shifted: 0, comparable: 40, maxShift: 0.01 }, 30, 1, DEFAULTS);
  assert.equal(calm.state.cusum, 0);
  assert.equal(calm.state.cusumRun, 0);
});

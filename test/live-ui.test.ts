import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { chromium, type Browser } from 'playwright-core';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, startSim } from './helpers/sim.js';
import { LiveFeed, PENDING_PAIRS, promptExcerpt, type LiveData } from '../src/live/feed.js';
import { buildConfig } from '../src/config/load.js';
import { initialDetectorState } from '../src/core/detector.js';
import { makePair } from './helpers/capture.js';

const CHROMIUM = '/usr/bin/chromium';
// Debian's chromium, installed by .ci/run; locally the browser test skips when it is absent.
const skip =
  !existsSync(CHROMIUM) && !process.env.CI ? `${CHROMIUM} is absent (apt-get install chromium; CI installs it)` : false;
/** Where the page's screenshot goes (kept after the test, for a look). */
export const SCREENSHOT = process.env.LOGPROBE_UI_SCREENSHOT ?? join(tmpdir(), 'logprobe-live-ui.png');

const FAST_ALERTS = { window: 10, minRequests: 3, fireFraction: 0.5, forSeconds: 0, cusum: { k: 0.5, h: 5 } };

async function send(proxyUrl: string, i: number): Promise<number> {
  const chat = i % 2 === 0;
  const body = chat
    ? {
        model: 'sim',
        messages: [{ role: 'user', content: `live question ${i}: why is the sky blue?` }],
        max_tokens: 24,
      }
    : { model: 'sim', prompt: `Live prompt ${i}: the capital of France is`, max_tokens: 24 };
  const res = await request(`${proxyUrl}${chat ? '/v1/chat/completions' : '/v1/completions'}`, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' },
  });
  await res.body.dump();
  return res.statusCode;
}

/**
 * Polls `ok` until it holds. Not page.waitForFunction: its string predicate is evaluated in the
 * page, where the page's Content-Security-Policy (no 'unsafe-eval') refuses it once it has to poll.
 */
async function until(ok: () => Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function data(adminUrl: string, query = ''): Promise<{ worker: string; data: LiveData | null }> {
  const res = await request(`${adminUrl}/ui/data${query}`);
  assert.equal(res.statusCode, 200);
  assert.match(String(res.headers['content-type']), /application\/json/);
  return (await res.body.json()) as { worker: string; data: LiveData | null };
}

test("the feed builds no strip while no page polls, keeps the last pairs' bodies for one that opens, and bounds what it holds", () => {
  let now = 1_000_000;
  const state = initialDetectorState();
  const feed = new LiveFeed(
    buildConfig({}),
    () => state,
    () => now,
  );
  for (let i = 0; i < 15; i++) feed.onPair(makePair(i, { shift: 0.5 }));
  const first = JSON.parse(feed.snapshot(0, 0)) as LiveData;
  assert.equal(first.pairs.length, 15);
  assert.equal(
    first.pairs.filter((p) => p.strip !== null).length,
    PENDING_PAIRS,
    'the last pairs get their strip when a page asks',
  );
  assert.ok(first.pairs.slice(0, 15 - PENDING_PAIRS).every((p) => p.strip === null && p.unbuilt === true));
  // A pair without its strip keeps its true verdict and figures, the same as a built strip's head.
  const built = first.pairs.at(-1)!.strip!;
  assert.equal(built.verdict, 'global_shift');
  for (const p of first.pairs) {
    assert.equal(p.verdict, 'global_shift', `pair ${p.seq}`);
    assert.deepEqual(p.compared, {
      kind: 'pair',
      verdict: 'global_shift',
      maxShift: built.maxShift,
      shifted: built.shifted,
      comparable: built.comparable,
    });
  }
  assert.equal(first.pairs[0]!.prompt, 'question 0');
  // A page is open now: strips are built as pairs come.
  now += 1000;
  for (let i = 15; i < 80; i++) feed.onPair(makePair(i, { shift: 0.5 }));
  const d = JSON.parse(feed.snapshot(14, 0)) as LiveData;
  assert.equal(d.oldest, 31);
  assert.equal(d.pairs.length, 50);
  assert.ok(d.pairs.every((p) => p.strip !== null && p.strip.tokens.length === 5));
  assert.equal(
    Object.values(d.verdicts).reduce((a, b) => a + b, 0),
    80,
  );
  feed.close();
  // Long prompts are cut; messages give the last user turn, text parts included.
  assert.equal(promptExcerpt({ prompt: 'x'.repeat(1000) })!.length, 240);
  assert.equal(
    promptExcerpt({
      messages: [
        { role: 'system', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'hello' },
            { type: 'text', text: 'there' },
          ],
        },
      ],
    }),
    'hello there',
  );
});

test("/ui/data: the worker's bounded summary, incremental by pair and point, with strips built in the worker", async (t) => {
  const baseline = await startSim();
  const candidate = await startSim({ stateShift: 0.6 });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1 },
    alert: FAST_ALERTS,
  });
  t.after(() => lp.close());

  const empty = await data(lp.adminUrl);
  assert.equal(empty.worker, 'up');
  assert.equal(empty.data!.seq, 0);
  assert.deepEqual(empty.data!.pairs, []);
  assert.deepEqual(
    empty.data!.alerts.map((a) => [a.alert, a.backend ?? null, a.phase]),
    [
      ['LogprobGlobalShift', null, 'inactive'],
      ['LogprobSustainedShift', null, 'inactive'],
      ['LogprobSelfInconsistency', 'candidate', 'inactive'],
      ['LogprobSelfInconsistency', 'baseline', 'inactive'],
    ],
  );

  for (let i = 0; i < 60; i++) assert.equal(await send(lp.proxyUrl, i), 200);
  await lp.runtime.mirror!.idle();
  const all = (await data(lp.adminUrl)).data!;
  assert.equal(all.seq, 60);
  assert.equal(all.pairs.length, 50, 'bounded to the last 50 pairs');
  assert.equal(all.oldest, 11);
  assert.equal(all.pairs[0]!.seq, 11);
  // Every pair says its verdict, its strip's.
  const listed: Record<string, number> = {};
  for (const x of all.pairs) {
    assert.ok(x.verdict !== null && x.compared !== null && x.compared.verdict === x.verdict, `pair ${x.seq}`);
    if (x.strip) assert.equal(x.strip.verdict, x.verdict);
    listed[x.verdict] = (listed[x.verdict] ?? 0) + 1;
  }
  assert.ok((listed.global_shift ?? 0) + (listed.early_shift ?? 0) > 40, JSON.stringify(listed));
  const p = all.pairs.at(-1)!;
  assert.ok(p.strip && p.strip.tokens.length > 0 && p.strip.tokens[0]!.tc.length > 0, "a strip with both sides' top-k");
  assert.match(p.prompt!, /^(live question|Live prompt) 59/);
  assert.equal(all.alerts[0]!.phase, 'firing');
  assert.ok(all.alerts[0]!.last && all.alerts[0]!.last.to === 'firing');
  const m = await (await request(`${lp.adminUrl}/metrics`)).body.text();
  for (const v of ['global_shift', 'early_shift'] as const)
    assert.equal(all.verdicts[v], metricValue(m, 'logprobe_verdicts_total', { kind: 'pair', verdict: v }) ?? 0);
  assert.equal(all.outcomes.ok, 60);

  const later = (await data(lp.adminUrl, `?since=58&t=${all.series.at(-1)?.t ?? 0}`)).data!;
  assert.deepEqual(
    later.pairs.map((x) => x.seq),
    [59, 60],
    'only what the page does not have',
  );
  assert.ok(later.series.every((x) => x.t > (all.series.at(-1)?.t ?? 0)));

  const page = await request(`${lp.adminUrl}/ui`);
  assert.equal(page.statusCode, 200);
  const csp = String(page.headers['content-security-policy']);
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /connect-src 'self'/);
  const html = await page.body.text();
  assert.doesNotMatch(html, /\b(src|href)\s*=\s*["']?\s*(https?:)?\/\//i, 'no src/href to the network');
  // Not on the public port: there /ui is the candidate's like any other path.
  const pub = await request(`${lp.proxyUrl}/ui`);
  await pub.body.dump();
  assert.notEqual(pub.statusCode, 200);
});

test('/ui/data: pairs mirrored while no page was open are listed with their true verdicts', async (t) => {
  const baseline = await startSim();
  const candidate = await startSim({ stateShift: 0.6 });
  t.after(() => Promise.all([baseline.close(), candidate.close()]));
  const lp = await startLogprobe({
    candidate: { url: candidate.url },
    baseline: { url: baseline.url },
    mirror: { sampleRate: 1 },
    alert: FAST_ALERTS,
  });
  t.after(() => lp.close());
  const n = PENDING_PAIRS + 6;
  for (let i = 0; i < n; i++) assert.equal(await send(lp.proxyUrl, i), 200);
  await lp.runtime.mirror!.idle();
  const d = (await data(lp.adminUrl)).data!;
  assert.equal(d.pairs.length, n);
  const unbuilt = d.pairs.filter((x) => x.unbuilt);
  assert.equal(unbuilt.length, n - PENDING_PAIRS, 'the oldest came while no page was open: no strip');
  const listed: Record<string, number> = {};
  for (const x of d.pairs) {
    assert.ok(x.verdict !== null && x.compared?.kind === 'pair' && x.compared.verdict === x.verdict, `pair ${x.seq}`);
    if (x.strip) assert.equal(x.strip.verdict, x.verdict);
    else assert.ok(x.compared.comparable > 0 && x.compared.maxShift !== null);
    listed[x.verdict] = (listed[x.verdict] ?? 0) + 1;
  }
  // The listed verdicts are the ones the mix counts (every pair since the start is listed here).
  for (const [v, count] of Object.entries(d.verdicts)) assert.equal(listed[v] ?? 0, count, v);
  assert.ok(unbuilt.some((x) => x.verdict === 'global_shift' || x.verdict === 'early_shift'));
});

test(
  "the live page in Chromium: same origin only, a firing alert from a faulty candidate, a pair's strip within seconds of its request, top-k on hover",
  { skip },
  async (t) => {
    const baseline = await startSim();
    const candidate = await startSim({ stateShift: 0.6 });
    t.after(() => Promise.all([baseline.close(), candidate.close()]));
    const lp = await startLogprobe({
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1 },
      alert: FAST_ALERTS,
    });
    t.after(() => lp.close());

    const browser: Browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    t.after(() => browser.close());
    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    const origin = new URL(lp.adminUrl).origin;
    const errors: string[] = [];
    const foreign: string[] = [];
    const requests: string[] = [];
    page.on('console', (msg) => {
      if (msg.type() === 'error') errors.push(msg.text());
    });
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('request', (r) => {
      requests.push(r.url());
      if (!r.url().startsWith(`${origin}/`) && !r.url().startsWith('data:')) foreign.push(r.url());
    });
    await page.goto(`${lp.adminUrl}/ui`, { waitUntil: 'load' });
    await until(async () => (await page.textContent('#status'))?.startsWith('updated') === true, 10_000);
    assert.equal(
      await page.locator('#alert-body tr').count(),
      4,
      'every in-process alert, LogprobSelfInconsistency per backend',
    );
    assert.ok(await page.locator('#no-pairs').isVisible());

    // One request: its strip is on the page within seconds.
    const sent = Date.now();
    assert.equal(await send(lp.proxyUrl, 0), 200);
    await page.waitForSelector('#pair-list .strip .tok', { timeout: 8000 });
    const latency = Date.now() - sent;
    t.diagnostic(`a pair's strip appeared ${latency} ms after its request`);
    assert.ok(latency < 8000);
    assert.match((await page.textContent('#pair-list .live-pair .live-prompt'))!, /live question 0/);

    // A few more: LogprobGlobalShift fires, and the page says so.
    for (let i = 1; i < 8; i++) assert.equal(await send(lp.proxyUrl, i), 200);
    await page.waitForSelector('tr[data-alert="LogprobGlobalShift"][data-phase="firing"]', { timeout: 10_000 });
    assert.match((await page.textContent('tr[data-alert="LogprobGlobalShift"]'))!, /firing.*pooled share/s);
    // Each backend's state (#26): both answered their copies.
    assert.match((await page.textContent('tr[data-backend="candidate"]'))!, /candidate.*reachable.*no failure/s);
    assert.equal(await page.getAttribute('tr[data-backend="baseline"]', 'data-state'), 'reachable');
    await until(async () => (await page.locator('#pair-list .live-pair').count()) === 8, 8000);
    const shown = await page.$$eval('#mix-body tr', (rows) =>
      Object.fromEntries(
        rows.map((r) => [r.getAttribute('data-verdict'), Number(r.querySelector('.count')!.textContent)]),
      ),
    );
    const m = await (await request(`${lp.adminUrl}/metrics`)).body.text();
    for (const v of ['global_shift', 'early_shift'])
      assert.equal(shown[v], metricValue(m, 'logprobe_verdicts_total', { kind: 'pair', verdict: v }) ?? 0, v);
    assert.ok((await page.locator('#share-chart polyline').count()) === 1, 'the pooled share over time');
    assert.ok((await page.locator('#cusum-chart polyline').count()) === 1, 'the CUSUM over time');
    // The permutation test's p-value (#25): the page shows the gauge's value.
    const pvalue = metricValue(m, 'logprobe_alert_test_pvalue', { model: 'sim' });
    assert.ok(pvalue !== undefined && pvalue > 0 && pvalue <= 1, `logprobe_alert_test_pvalue ${pvalue}`);
    const shownP = pvalue < 0.01 ? pvalue.toExponential(1) : pvalue.toFixed(2);
    await until(
      async () => (await page.textContent('#window-now'))?.includes(`permutation test p = ${shownP} over `) === true,
      8000,
    );
    assert.ok((await page.locator('#pair-list .tok.flip').count()) > 0, 'the flip is boxed');

    await page.locator('#pair-list .tok').first().hover();
    await page.waitForSelector('#tip', { state: 'visible' });
    const tip = (await page.textContent('#tip'))!;
    assert.match(tip, /candidate/);
    assert.match(tip, /baseline/);
    assert.match(tip, /-\d\.\d{4}/, 'logprobs of the top-k');
    await page.mouse.move(5, 5);

    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    // Close-ups, to look at the charts and a strip at full size.
    await page.locator('#detectors').screenshot({ path: SCREENSHOT.replace(/\.png$/, '-window.png') });
    await page
      .locator('#pair-list .live-pair')
      .first()
      .screenshot({ path: SCREENSHOT.replace(/\.png$/, '-pair.png') });
    t.diagnostic(`screenshot: ${SCREENSHOT}`);
    assert.deepEqual(foreign, [], 'nothing requested from another origin');
    assert.ok(
      requests.some((u) => u.startsWith(`${origin}/ui/data`)),
      'the page polls its own origin',
    );
    assert.deepEqual(errors, [], 'no console error (a CSP violation would be one)');
  },
);

test(
  'the live page in Chromium: pairs that came while no page was open carry their true verdict, not their outcome',
  { skip },
  async (t) => {
    const baseline = await startSim();
    const candidate = await startSim({ stateShift: 0.6 });
    t.after(() => Promise.all([baseline.close(), candidate.close()]));
    const lp = await startLogprobe({
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1 },
      alert: FAST_ALERTS,
    });
    t.after(() => lp.close());
    const n = PENDING_PAIRS + 4;
    for (let i = 0; i < n; i++) assert.equal(await send(lp.proxyUrl, i), 200);
    await lp.runtime.mirror!.idle();

    const browser: Browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
    });
    t.after(() => browser.close());
    const page = await browser.newPage();
    await page.goto(`${lp.adminUrl}/ui`, { waitUntil: 'load' });
    await until(async () => (await page.locator('#pair-list .live-pair').count()) === n, 10_000);
    const cards = await page.$$eval('#pair-list .live-pair', (els) =>
      els.map((e) => ({
        seq: Number(e.getAttribute('data-seq')),
        badge: e.querySelector('.strip-head .badge')!.textContent,
        strip: e.querySelector('.tok') !== null,
        text: e.textContent ?? '',
      })),
    );
    const d = (await data(lp.adminUrl)).data!;
    const verdictOf = new Map(d.pairs.map((p) => [p.seq, p.verdict]));
    const withoutStrip = cards.filter((c) => !c.strip);
    assert.equal(withoutStrip.length, n - PENDING_PAIRS, 'the oldest pairs have no strip');
    for (const c of cards) {
      assert.equal(c.badge, verdictOf.get(c.seq), `pair ${c.seq}: the badge is its verdict`);
      assert.notEqual(c.badge, 'ok');
    }
    for (const c of withoutStrip) {
      assert.match(c.text, /free-running max shift .* shifted \d+\/\d+/);
      assert.match(c.text, /no token strip: it came while no page was open/);
    }
  },
);

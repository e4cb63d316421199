import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createWriteStream, existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { buildRecord } from '../src/capture/record.js';
import { compare, DEFAULT_THRESHOLDS } from '../src/core/index.js';
import { startSim } from './helpers/sim.js';
import { runCli } from './helpers/cli.js';
import { chatBody, makePair, tempDir } from './helpers/capture.js';

const CHROMIUM = '/usr/bin/chromium';
const GOLDEN = fileURLToPath(new URL('../config/golden-prompts.example.jsonl', import.meta.url));
const THRESHOLDS = { gapAmbiguous: 0.3, gapSystematic: 0.4, globalFraction: 0.8, minAligned: 3 };
// Debian's chromium, installed by .ci/run; locally the browser tests skip when it is absent.
const skip =
  !existsSync(CHROMIUM) && !process.env.CI ? `${CHROMIUM} is absent (apt-get install chromium; CI installs it)` : false;

async function launch(t: { after(fn: () => unknown): void }): Promise<Browser> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
  t.after(() => browser.close());
  return browser;
}

/** Opens a report; collects console errors, page errors and every request that is not the file itself. */
async function open(browser: Browser, file: string): Promise<{ page: Page; errors: string[]; requests: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors: string[] = [];
  const requests: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('request', (r) => {
    if (r.url() !== pathToFileURL(file).href) requests.push(r.url());
  });
  await page.goto(pathToFileURL(file).href, { waitUntil: 'load' });
  return { page, errors, requests };
}

/** The page's verdict counts as shown (the text of each row), and the total. */
async function shownCounts(page: Page): Promise<{ verdicts: Record<string, number>; total: number }> {
  const rows = await page.$$eval('tr[data-verdict]', (trs) =>
    trs.map(
      (tr) =>
        [tr.getAttribute('data-verdict')!, (tr.querySelector('.count')!.textContent ?? '').replace(/,/g, '')] as const,
    ),
  );
  const verdicts: Record<string, number> = {};
  for (const [v, n] of rows) if (Number(n) > 0) verdicts[v] = Number(n);
  const total = Number((await page.textContent('#pairs-total'))!.replace(/,/g, ''));
  return { verdicts, total };
}

function jsonCounts(stdout: string): { verdicts: Record<string, number>; total: number } {
  const verdicts: Record<string, number> = {};
  const lines = stdout.trim().split('\n');
  for (const l of lines) {
    const v = (JSON.parse(l) as { verdict: string }).verdict;
    verdicts[v] = (verdicts[v] ?? 0) + 1;
  }
  return { verdicts, total: lines.length };
}

/** No resource of the page may come from the network. */
function assertSelfContained(html: string): void {
  assert.doesNotMatch(html, /\b(src|href)\s*=\s*["']?\s*(https?:)?\/\//i, 'no src/href to the network');
  assert.doesNotMatch(html, /@import|url\(\s*["']?(https?:)?\/\//i, 'no CSS import or url() from the network');
}

test(
  'the report renders without errors, self-contained, with the counts of analyze --json, charts, token strips and top-k on hover',
  { skip },
  async (t) => {
    const dir = tempDir(t);
    const baseline = await startSim();
    const corrupted = await startSim({ stateShift: 0.6 });
    const local = await startSim({ localShift: 0.8, localShiftRate: 0.15 });
    t.after(() => Promise.all([baseline.close(), corrupted.close(), local.close()]));
    // The corrupted candidate twice: every one of its prompts repeats with the same verdict, as traffic does.
    const captures = [join(dir, 'a.jsonl'), join(dir, 'b.jsonl'), join(dir, 'c.jsonl')];
    await runCli(['replay', GOLDEN, '--candidate', corrupted.url, '--baseline', baseline.url, '--out', captures[0]!]);
    await runCli(['replay', GOLDEN, '--candidate', local.url, '--baseline', baseline.url, '--out', captures[1]!]);
    await runCli(['replay', GOLDEN, '--candidate', corrupted.url, '--baseline', baseline.url, '--out', captures[2]!]);
    const html = join(dir, 'report.html');
    const res = await runCli(['analyze', ...captures, '--html', html]);
    assert.equal(res.code, 0, res.stderr);
    const json = await runCli(['analyze', '--json', ...captures]);
    const expected = jsonCounts(json.stdout);
    assert.ok(Object.keys(expected.verdicts).length >= 3, JSON.stringify(expected.verdicts));

    const text = readFileSync(html, 'utf8');
    assertSelfContained(text);
    assert.equal(statSync(html).mode & 0o777, 0o600);

    const browser = await launch(t);
    const { page, errors, requests } = await open(browser, html);
    assert.deepEqual(await shownCounts(page), expected, 'the counts shown are those of --json');
    assert.ok((await page.$$('#shift-hist rect')).length > 10, 'the shift histogram has bars');
    assert.ok((await page.$$('#flip-hist rect')).length > 10, 'the flip-gap histogram has bars');
    assert.equal(await page.locator('#strip-list .strip').count(), 25, 'the first page of strips');
    const shownStrips = Number(
      /Token strips for (\d+) of 72 pairs/.exec((await page.textContent('#strip-selection'))!)?.[1],
    );
    assert.ok(shownStrips >= 25 && shownStrips <= 48, `${shownStrips} strips: one per prompt and verdict`);

    // Repeated prompts are folded: one strip per prompt and verdict, the others counted.
    const prompts = await page.$$eval('#strip-list .strip', (cards) =>
      cards.map((c) => `${c.querySelector('.badge')!.textContent}|${c.querySelector('.prompt')?.textContent ?? ''}`),
    );
    assert.equal(new Set(prompts).size, prompts.length, 'no prompt twice with one verdict');
    assert.ok(
      prompts.every((p) => p.split('|')[1]!.length > 0),
      'every strip shows its prompt',
    );
    assert.ok((await page.locator('#strip-list .similar').count()) > 0, '×N similar');
    assert.match((await page.locator('#strip-list .similar').first().textContent())!, /^×\d+ similar$/);
    assert.ok((await page.locator('#worst .similar').count()) > 0, 'the worst table folds them too');
    // One explanation per verdict kind, once; the cards fold their own.
    const keyed = await page.$$eval('#key dt .badge', (b) => b.map((x) => x.textContent));
    assert.equal(new Set(keyed).size, keyed.length);
    assert.ok(keyed.length >= 2, keyed.join());
    assert.equal(await page.locator('#strip-list details.explanation[open]').count(), 0, 'explanations folded');
    assert.equal(await page.locator('#strip-list details.explanation').count(), 25);
    assert.equal(await page.locator('#worst th', { hasText: 'explanation' }).count(), 0, 'no explanation column');
    // The colour legend, relative to the floor.
    assert.ok((await page.locator('#legend .tok').count()) >= 6);
    assert.match((await page.textContent('#legend'))!, /noise floor/);
    // Token boundaries: each token its own outlined box, apart from the next.
    type Styles = { getComputedStyle(e: unknown): { boxShadow: string; marginRight: string; display: string } };
    const box = await page.$eval('#strip-list .tok:not(.flip)', (e) => {
      const cs = (globalThis as unknown as Styles).getComputedStyle(e);
      return { shadow: cs.boxShadow, margin: parseFloat(cs.marginRight), display: cs.display };
    });
    assert.notEqual(box.shadow, 'none');
    assert.ok(box.margin >= 1 && box.display === 'inline-block', JSON.stringify(box));
    // Threshold labels never overprint each other or a bar.
    for (const chart of ['#shift-hist', '#flip-hist']) {
      // (No named helpers inside the page function: the test's transpiler would wrap them in __name.)
      const geometry = await page.$eval(chart, (svg) => ({
        labels: [...svg.querySelectorAll('.marker-label')]
          .map((e) => e.getBoundingClientRect())
          .map((b) => ({ l: b.left, r: b.right, t: b.top, b: b.bottom })),
        bars: [...svg.querySelectorAll('rect:not(.hit)')]
          .map((e) => e.getBoundingClientRect())
          .map((b) => ({ l: b.left, r: b.right, t: b.top, b: b.bottom })),
      }));
      const meet = (a: { l: number; r: number; t: number; b: number }, b: typeof a) =>
        a.l < b.r && b.l < a.r && a.t < b.b && b.t < a.b;
      assert.ok(geometry.labels.length > 0, chart);
      geometry.labels.forEach((a, i) =>
        geometry.labels.slice(i + 1).forEach((b) => assert.ok(!meet(a, b), `${chart}: two labels overlap`)),
      );
      for (const l of geometry.labels)
        for (const b of geometry.bars) assert.ok(!meet(l, b), `${chart}: a label covers a bar`);
    }
    const height = await page.evaluate(
      () =>
        (globalThis as unknown as { document: { documentElement: { scrollHeight: number } } }).document.documentElement
          .scrollHeight,
    );
    t.diagnostic(`72 pairs: the page is ${height} px high at 1280 px wide`);
    assert.ok(height < 9000, `${height} px`);
    assert.ok((await page.locator('#strip-list .tok.flip').count()) > 0, 'flips are marked');
    assert.match((await page.locator('#strip-list .tok.flip .gap').first().textContent())!, /^gap \d/);

    await page.locator('#strip-list .tok.flip').first().hover();
    await page.waitForSelector('#tip', { state: 'visible' });
    const tip = (await page.textContent('#tip'))!;
    assert.match(tip, /candidate/);
    assert.match(tip, /baseline/);
    assert.match(tip, /-\d\.\d{4}/, 'logprobs of the top-k');

    await page.click('#next');
    assert.match((await page.textContent('#page-info'))!, new RegExp(`^page 2 of ${Math.ceil(shownStrips / 25)}`));
    await page.selectOption('#verdict-filter', 'local_shift');
    const shown = await page.$$eval('#strip-list .strip .badge', (b) => b.map((x) => x.textContent));
    assert.ok(shown.length > 0 && shown.every((v) => v === 'local_shift'), 'the verdict filter');

    const shot = await page.screenshot({ fullPage: false });
    const blank = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await blank.setContent('<html><body></body></html>');
    const empty = await blank.screenshot();
    assert.ok(shot.length > 4 * empty.length, `the screenshot is not blank (${shot.length} vs ${empty.length} bytes)`);
    assert.deepEqual(errors, [], 'no console error');
    assert.deepEqual(requests, [], 'nothing loaded but the file');
  },
);

test(
  '10,000 pairs: the report stays small and fast, paginates a stated selection of strips, and escapes every token',
  { skip },
  async (t) => {
    const dir = tempDir(t);
    const file = join(dir, 'big.jsonl');
    const ws = createWriteStream(file);
    const hostile = makePair(0);
    hostile.candidate.body = chatBody([
      ['</script><img src=x onerror="window.pwned=1">', -0.1],
      [' b', -0.9],
    ]);
    hostile.baseline!.body = chatBody([
      ['</script><img src=x onerror="window.pwned=1">', -0.1],
      [' c', -0.3],
    ]);
    hostile.analysis = compare(hostile.candidate.body, hostile.baseline!.body, DEFAULT_THRESHOLDS);
    const kinds = [0, 0.001, 0.001, 0.001, 0.5].map((shift, i) =>
      JSON.stringify(buildRecord(makePair(i, { shift }), { includePrompts: true, thresholds: THRESHOLDS })),
    );
    ws.write(`${JSON.stringify(buildRecord(hostile, { includePrompts: true, thresholds: THRESHOLDS }))}\n`);
    // Each line its own question: repeated prompts would be folded into one strip each.
    for (let i = 1; i < 10_000; i++) {
      const line = kinds[i % kinds.length]!.replace(`"question ${i % kinds.length}"`, `"question ${i}"`);
      if (!ws.write(`${line}\n`)) await new Promise<void>((r) => ws.once('drain', () => r()));
    }
    await new Promise<void>((r) => ws.end(() => r()));
    const html = join(dir, 'big.html');
    const res = await runCli(['analyze', file, '--html', html], { timeoutMs: 60_000 });
    assert.equal(res.code, 0, res.stderr);
    const size = statSync(html).size;
    assert.ok(size < 5 * 1024 * 1024, `${(size / 1024).toFixed(0)} KB`);
    const text = readFileSync(html, 'utf8');
    assertSelfContained(text);
    assert.ok(!text.includes('</script><img'), 'a token cannot close the data script');

    const browser = await launch(t);
    const started = Date.now();
    const { page, errors } = await open(browser, html);
    await page.waitForSelector('#strip-list .strip');
    const loadMs = Date.now() - started;
    assert.ok(loadMs < 10_000, `loaded in ${loadMs} ms`);
    t.diagnostic(`10,000 pairs: ${(size / 1024).toFixed(0)} KB, loaded and rendered in ${loadMs} ms`);
    assert.equal((await shownCounts(page)).total, 10_000);
    const selection =
      /Token strips for (\d+) of 10,000 pairs: the 100 worst \(by verdict, then max shift\), plus the (\d+) others of a uniform random sample of 400 pairs/.exec(
        (await page.textContent('#strip-selection'))!,
      );
    assert.ok(selection, 'the page says which strips it shows');
    const strips = Number(selection[1]);
    assert.equal(strips, 100 + Number(selection[2]));
    assert.ok(strips > 450 && strips <= 500, `${strips} strips`);
    assert.equal(await page.locator('#strip-list .strip').count(), 25);
    assert.equal(await page.textContent('#page-info'), `page 1 of ${Math.ceil(strips / 25)} · ${strips} strips`);
    await page.click('#next');
    await page.click('#next');
    assert.match((await page.textContent('#page-info'))!, /^page 3 of /);
    assert.equal(
      await page.evaluate(() => (globalThis as unknown as { pwned?: number }).pwned),
      undefined,
      'no injected script ran',
    );
    assert.equal(await page.locator('img').count(), 0, 'no injected element');
    assert.deepEqual(errors, []);
  },
);

test(
  'prompts: a long one is cut at 400 characters and says how many more, a hashed one says so',
  { skip },
  async (t) => {
    const dir = tempDir(t);
    const file = join(dir, 'prompts.jsonl');
    const long = 'why '.repeat(150);
    const pair = makePair(1, {
      shift: 0.5,
      request: {
        model: 'm',
        messages: [{ role: 'user', content: long }],
        temperature: 0,
        logprobs: true,
        top_logprobs: 2,
        max_tokens: 5,
      },
    });
    writeFileSync(
      file,
      `${JSON.stringify(buildRecord(pair, { includePrompts: true, thresholds: THRESHOLDS }))}\n${JSON.stringify(buildRecord(makePair(2, { shift: 0.4 }), { includePrompts: false, thresholds: THRESHOLDS }))}\n`,
    );
    const html = join(dir, 'prompts.html');
    const res = await runCli(['analyze', file, '--html', html]);
    assert.equal(res.code, 0, res.stderr);
    const browser = await launch(t);
    const { page, errors } = await open(browser, html);
    const texts = await page.$$eval('#strip-list .prompt', (p) => p.map((x) => x.textContent ?? ''));
    assert.equal(texts.length, 2);
    const cut = texts.find((x) => x.startsWith('user: why'))!;
    assert.ok(cut.includes(`… ${'user: '.length + long.length - 400} more characters`), cut);
    assert.ok(
      texts.some((x) => /prompt hashed \(capture\.includePrompts: false\)/.test(x)),
      texts.join(' | '),
    );
    assert.deepEqual(errors, []);
  },
);

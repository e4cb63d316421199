/**
 * Two cosmetic fixes (#26 point 11), in Chromium: the flip's gap label in a token strip reads
 * against what is behind it (WCAG contrast of the computed colours), and the threshold chart's
 * "flips stop" label stays inside its SVG's viewBox when the stop is at the last bucket.
 */
import assert from 'node:assert/strict';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { chromium } from 'playwright-core';
import { recordLine } from '../src/capture/record.js';
import { compare, DEFAULT_THRESHOLDS } from '../src/core/index.js';
import type { MirroredPair } from '../src/pair/types.js';
import { chatBody, step, type Spec } from './core-bodies.js';
import { tempDir } from './helpers/capture.js';
import { runCli } from './helpers/cli.js';

const CHROMIUM = '/usr/bin/chromium';
const skip =
  !existsSync(CHROMIUM) && !process.env.CI ? `${CHROMIUM} is absent (apt-get install chromium; CI installs it)` : false;
const T = DEFAULT_THRESHOLDS;

/** A pair whose candidate, after two shifted positions, picks a token the baseline puts 4.7 nats lower: a systematic flip, its gap in the last bucket. */
function flipPair(i: number): MirroredPair {
  const b: Spec[] = [0, 1].map((k) =>
    step(` w${k}`, -0.3, [
      [' x', -2],
      [' z', -5],
    ]),
  );
  // At the flip the baseline's top-2 is the candidate's token, 4.7 nats down: the flip curve's last bucket.
  b.push(step(' w2', -0.3, [[' z', -5]]));
  const c: Spec[] = [0, 1].map((k) =>
    step(` w${k}`, -0.9, [
      [' x', -2],
      [' z', -5],
    ]),
  );
  c.push(
    step(' z', -0.2, [
      [' w2', -1.5],
      [' x', -2],
    ]),
  );
  const candidate = chatBody(c);
  const baseline = chatBody(b);
  const result = (body: unknown) => ({ status: 200, latencyMs: 5, body, serverHeaders: {}, error: null });
  return {
    id: `req-${i}`,
    ts: new Date(Date.UTC(2026, 10, 29, 7, 0, i)).toISOString(),
    route: '/v1/chat/completions',
    path: '/v1/chat/completions',
    request: {
      model: 'm',
      messages: [{ role: 'user', content: `question ${i}` }],
      temperature: 0,
      logprobs: true,
      top_logprobs: 3,
      max_tokens: 3,
    },
    clientHeaders: {},
    candidate: result(candidate),
    baseline: result(baseline),
    outcome: 'ok',
    analysis: compare(candidate, baseline, T),
    noiseFloor: T.noiseFloor,
  };
}

test(
  'the flip gap label reads on its token, and the "flips stop" label stays inside the chart',
  { skip },
  async (t) => {
    const dir = tempDir(t, 'logprobe-cosmetic-');
    const capture = join(dir, 'capture.jsonl');
    const pairs = Array.from({ length: 8 }, (_, i) => flipPair(i));
    assert.equal(pairs[0]!.analysis!.flip?.class, 'systematic');
    writeFileSync(capture, pairs.map((p) => `${recordLine(p, { includePrompts: true, thresholds: T })}\n`).join(''));
    const html = join(dir, 'report.html');
    const r = await runCli(['analyze', capture, '--html', html]);
    assert.equal(r.code, 0, r.stderr);

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
    for (const scheme of ['light', 'dark'] as const) {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, colorScheme: scheme });
      await page.goto(pathToFileURL(html).href, { waitUntil: 'load' });

      // The gap label: its text colour against the first opaque background behind it.
      // (No named helpers inside the page function: the test's transpiler would wrap them in __name.)
      // (A script as text: the test's transpiler would wrap named helpers in __name.)
      const colours = (await page.evaluate(`(() => {
      const gap = document.querySelector('#strip-list .tok.flip .gap');
      let e = gap, bg = 'rgba(0, 0, 0, 0)';
      while (e) {
        const b = getComputedStyle(e).backgroundColor;
        if (b !== 'transparent' && !/rgba\\(.*, 0\\)$/.test(b)) { bg = b; break; }
        e = e.parentElement;
      }
      return { fg: getComputedStyle(gap).color, bg, tokenBg: getComputedStyle(gap.parentElement).backgroundColor, text: gap.textContent };
    })()`)) as { fg: string; bg: string; tokenBg: string; text: string };
      assert.match(colours.text, /^gap ≥? ?\d\.\d{3}$/);
      const ratio = contrast(colours.fg, colours.bg);
      t.diagnostic(
        `${scheme}: gap label ${colours.fg} on ${colours.bg} (token ${colours.tokenBg}): contrast ${ratio.toFixed(2)}`,
      );
      assert.ok(
        ratio >= 4.5,
        `${scheme}: the gap label's contrast ${ratio.toFixed(2)} is below WCAG AA (${colours.fg} on ${colours.bg})`,
      );
      assert.ok(
        contrast(colours.fg, colours.tokenBg) < 4.5 ? colours.bg !== colours.tokenBg : true,
        'the label brings its own background where the token colour would not do',
      );

      // The threshold chart: the stop is at the last bucket, and its label within the SVG.
      assert.match((await page.textContent('#flip-stop'))!, /flips stop at a gap of about 4\.700 nats/);
      const box = (await page.evaluate(`(() => {
      const svg = document.querySelector('#flip-curve-section svg');
      const label = svg.querySelector('.marker-label');
      const r = (e) => { const b = e.getBoundingClientRect(); return { left: b.left, right: b.right, top: b.top, bottom: b.bottom }; };
      return { svg: r(svg), label: label ? r(label) : null, text: label ? label.textContent : null };
    })()`)) as { svg: Rect; label: Rect | null; text: string | null };
      assert.ok(box.label, 'the chart marks where flips stop');
      assert.match(box.text!, /^flips stop ≈ 4\.700$/);
      assert.ok(
        box.label.left >= box.svg.left && box.label.right <= box.svg.right && box.label.top >= box.svg.top,
        `${JSON.stringify(box)}: the label is cut at the chart's edge`,
      );
      await page.close();
    }
  },
);

type Rect = { left: number; right: number; top: number; bottom: number };

/** WCAG 2 contrast ratio of two CSS `rgb()`/`rgba()` colours. */
function contrast(a: string, b: string): number {
  const lum = (c: string): number => {
    const [r, g, bl] = (c.match(/[\d.]+/g) ?? ['0', '0', '0']).slice(0, 3).map((v) => {
      const s = Number(v) / 255;
      return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r! + 0.7152 * g! + 0.0722 * bl!;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (hi! + 0.05) / (lo! + 0.05);
}

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildRecord } from '../src/capture/record.js';
import { DEFAULT_THRESHOLDS } from '../src/core/index.js';
import { toReplayItem } from '../src/replay/input.js';
import { failedModelsNote, ModelGates, renderModelTable } from '../src/replay/models.js';
import type { SummaryEntry } from '../src/report/summary.js';
import { makePair } from './helpers/capture.js';

const entry = (verdict: 'identical' | 'global_shift' | null, model?: string): SummaryEntry => ({
  file: 'in.jsonl',
  line: 1,
  id: 'in.jsonl:1',
  route: '/v1/completions',
  noiseFloor: 0.02,
  ...(model !== undefined ? { model } : {}),
  result:
    verdict === null
      ? { outcome: 'candidate_error', comparison: null, candidate: null, baseline: null }
      : ({
          outcome: 'ok',
          comparison: { verdict } as never,
          candidate: null,
          baseline: null,
        } as SummaryEntry['result']),
});

test("a replayed record's model: the capture's slice, else the request's model; a prompt-set line's body model", () => {
  const pair = makePair(1, { request: { model: 'adapter-7', prompt: 'hi', max_tokens: 2 } });
  const options = { includePrompts: true, thresholds: DEFAULT_THRESHOLDS };
  const sliced = JSON.parse(
    JSON.stringify(buildRecord({ ...pair, slice: { model: 'other', cache: 'miss' } }, options)),
  );
  const unsliced = JSON.parse(JSON.stringify(buildRecord(pair, options)));
  assert.equal((toReplayItem(sliced) as { model?: string }).model, 'other', 'as the mirror counted it');
  assert.equal((toReplayItem(unsliced) as { model?: string }).model, 'adapter-7');
  assert.equal(
    (toReplayItem({ route: '/v1/completions', prompt: 'x', model: 'sql' }) as { model?: string }).model,
    'sql',
  );
  assert.equal((toReplayItem({ route: '/v1/completions', prompt: 'x' }) as { model?: string }).model, undefined);
});

test('the gate by model: each model decided on its own pairs, bounded by slices.maxModels, failing models named', () => {
  const g = new ModelGates({ models: null, maxModels: 2 });
  const add = (verdict: 'identical' | 'global_shift' | null, model?: string) => {
    const m = g.slice(model);
    g.add(m, entry(verdict, model));
    g.gateCase(m, 'kl:0.05', verdict === 'global_shift' ? 'failed' : 'passed');
  };
  for (let i = 0; i < 4; i++) add('identical', 'base');
  for (let i = 0; i < 3; i++) add(i === 0 ? 'global_shift' : 'identical', 'sql');
  add(null, 'sql');
  // Past maxModels: `other`; no model: `none`.
  add('identical', 'tenant-x');
  add('global_shift', 'tenant-y');
  add('identical');
  const r = g.results(new Set(['global_shift', 'local_shift']));
  assert.deepEqual(
    r.map((m) => [m.model, m.pairs, m.passed]),
    [
      ['other', 2, false],
      ['sql', 4, false],
      ['base', 4, true],
      ['none', 1, true],
    ],
  );
  const sql = r.find((m) => m.model === 'sql')!;
  assert.equal(sql.compared, 3);
  assert.deepEqual(sql.uncompared, { candidate_error: 1 });
  assert.deepEqual(sql.failedOn, ['global_shift 1', 'kl:0.05 on 1 of 4 prompts']);
  assert.deepEqual(r.find((m) => m.model === 'base')!.gates, [{ gate: 'kl:0.05', prompts: 4, failed: 0 }]);
  // candidate_error fails a model only when --fail-on names it.
  assert.deepEqual(
    g
      .results(new Set(['candidate_error']))
      .filter((m) => !m.passed)
      .map((m) => m.model),
    ['other', 'sql'],
  );
  assert.equal(failedModelsNote(r), '; failed in models other, sql');
  assert.equal(failedModelsNote(r.filter((m) => m.model === 'sql')), '', 'one model: the line is its own');
  const table = renderModelTable(r);
  assert.match(table, /^ {2}model +pairs +identical +global_shift +candidate_error +gate$/m);
  assert.match(table, /^ {2}sql +4 +2 +1 +1 +FAIL: global_shift 1, kl:0\.05 on 1 of 4 prompts$/m);
  assert.match(table, /^ {2}base +4 +4 +0 +0 +PASS$/m);
});

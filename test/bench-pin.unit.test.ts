import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { allowedCpus, pinning, splitCpus, withNofile } from '../bench/lib/procstat.js';

test('--pin splits the CPUs: the upper half for the targets, the rest for the harness', () => {
  const ids = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);
  assert.deepEqual(splitCpus(ids(2)), { target: '1', harness: '0' });
  assert.deepEqual(splitCpus(ids(3)), { target: '1-2', harness: '0' });
  assert.deepEqual(splitCpus(ids(8)), { target: '4-7', harness: '0-3' });
  assert.deepEqual(splitCpus([2, 3, 6, 7]), { target: '6-7', harness: '2-3' }, 'a cpuset: the CPUs it allows');
  assert.deepEqual(splitCpus([0, 2, 4, 5]), { target: '4-5', harness: '0,2' });
  assert.throws(() => splitCpus(ids(1)), /--pin needs at least 2 CPUs/);
});

test('a process started under --pin runs on its role’s CPUs only, with the raised descriptor limit', (t) => {
  const cpus = allowedCpus();
  assert.ok(cpus.length >= 1 && cpus.every(Number.isInteger), `Cpus_allowed_list read as ${cpus.join(',')}`);
  if (cpus.length < 2) return t.skip('one CPU');
  const { target, harness } = splitCpus(cpus);
  const ask = (role: 'target' | 'harness') => {
    const { cmd, args } = withNofile('bash', ['-c', 'ulimit -n; grep Cpus_allowed_list /proc/self/status'], 4096, role);
    const r = spawnSync(cmd, args, { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trim().split('\n');
  };
  try {
    pinning.target = target;
    pinning.harness = harness;
    assert.deepEqual(ask('target'), ['4096', `Cpus_allowed_list:\t${target}`]);
    assert.deepEqual(ask('harness'), ['4096', `Cpus_allowed_list:\t${harness}`]);
  } finally {
    pinning.target = null;
    pinning.harness = null;
  }
  const [limit, unpinned] = ask('target');
  assert.equal(limit, '4096');
  assert.notEqual(unpinned, `Cpus_allowed_list:\t${target}`, 'without --pin nothing is pinned');
});

// Config test helpers: a YAML file in a temporary directory, and the issues a rejected config names.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../../src/errors/index.js';

/** `text` as logprobe.yaml in a new temporary directory; its path. */
export function yamlFile(text: string): string {
  const file = join(mkdtempSync(join(tmpdir(), 'logprobe-config-')), 'logprobe.yaml');
  writeFileSync(file, text);
  return file;
}

/** The issues of the ConfigError `fn` throws (it must throw one). */
export function issuesOf(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
    return err.issues;
  }
  assert.fail('expected the config to be rejected');
}

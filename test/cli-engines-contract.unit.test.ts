import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { EnginePackage } from '../src/cli/engines.js';

// The product declares what it uses of the test engines (src/cli/engines.ts) so that it builds
// without them; `npm run typecheck` checks here that the real package satisfies that contract.
test('@logprobe/engine provides what logprobe demo and logprobe engine use', async () => {
  const engines: EnginePackage = await import('@logprobe/engine');
  assert.equal(typeof engines.runEngineCli, 'function');
  assert.equal(typeof engines.chooseEngines, 'function');
  assert.ok(engines.DEMO_ENGINES.includes('sim') && engines.FAULT_FORMS.length > 0);
  assert.throws(
    () => engines.planFault('teapot'),
    (err: unknown) => err instanceof engines.UnknownDemoFaultError,
  );
});

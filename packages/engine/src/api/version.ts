/**
 * Engine release numbers (`--engine-version`): behaviours that changed between releases of vLLM
 * or SGLang follow the version the double plays.
 */

/** `x.y.z` with an optional suffix (`0.11.0`, `0.5.3rc2`, `0.10.2.dev1`): the three numbers. */
export function parseEngineVersion(v: string): [number, number, number] | null {
  const m = /^v?(\d+)\.(\d+)\.(\d+)(?:[.+-]?[0-9A-Za-z.+-]*)?$/.exec(v.trim());
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : null;
}

/** Whether release `v` is `min` or later (suffixes ignored: `0.21.0rc1` counts as 0.21.0). */
export function versionAtLeast(v: string, min: string): boolean {
  const a = parseEngineVersion(v);
  const b = parseEngineVersion(min);
  if (!a || !b) throw new RangeError(`not an engine version: ${a ? min : v}`);
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return (a[i] as number) > (b[i] as number);
  return true;
}

/**
 * The value after `--name` on this process's command line (the bench's helper processes:
 * upstreams, the floor proxy), else `fallback`; without either, an error naming the flag.
 */
export function arg(name: string, fallback?: string): string {
  const i = process.argv.indexOf(name);
  const v = (i >= 0 ? process.argv[i + 1] : undefined) ?? fallback;
  if (v === undefined) throw new Error(`missing ${name}`);
  return v;
}

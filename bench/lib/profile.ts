import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Short name of a frame: function, then file relative to node_modules or dist. */
function frame(n: ProfileNode): string {
  const url = n.callFrame.url.replace(/.*node_modules\//, '').replace(/.*\/dist\//, 'dist/');
  return `${n.callFrame.functionName || '(anonymous)'} ${url}${url ? `:${n.callFrame.lineNumber + 1}` : ''}`;
}

/** The top self-time functions of the .cpuprofile files in `dir`, idle excluded, as text. */
export function profileTop(dir: string, n: number): string | null {
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'));
  } catch {
    return null;
  }
  const self = new Map<string, number>();
  let busy = 0;
  for (const f of files) {
    const p = JSON.parse(readFileSync(join(dir, f), 'utf8')) as CpuProfile;
    const byId = new Map(p.nodes.map((x) => [x.id, x]));
    p.samples.forEach((id, i) => {
      const node = byId.get(id);
      const dt = p.timeDeltas[i] ?? 0;
      if (!node || node.callFrame.functionName === '(idle)') return;
      busy += dt;
      const k = frame(node);
      self.set(k, (self.get(k) ?? 0) + dt);
    });
  }
  if (busy === 0) return null;
  return [...self]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([k, v]) => `${((v / busy) * 100).toFixed(1).padStart(5)}%  ${k}`)
    .join('\n');
}

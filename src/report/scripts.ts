import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { formatNats } from '../core/explain.js';

/**
 * The pages' scripts, from src/browser (TypeScript with the DOM lib, its own tsconfig): `npm run
 * build` compiles them to dist/browser, and each page inlines its script in one function scope —
 * `nats` (core/explain.ts's formatNats, the one number format), the page's constants, the strip's
 * functions (strip.ts), then the page's own (report.ts, live.ts). Nothing is loaded at view time.
 */

type BrowserScript = 'strip' | 'report' | 'live';

/**
 * One compiled script, each line's indentation dropped (the scripts hold no multi-line string).
 * From the sources (tests, `npm run dev`, under tsx) it is compiled here, with the build's options.
 */
function compiled(name: BrowserScript): string {
  const known = cache.get(name);
  if (known !== undefined) return known;
  let js: string;
  if (import.meta.url.endsWith('.ts')) {
    const ts = createRequire(import.meta.url)('typescript') as typeof import('typescript');
    const source = readFileSync(new URL(`../browser/${name}.ts`, import.meta.url), 'utf8');
    js = ts.transpileModule(source, {
      compilerOptions: { target: ts.ScriptTarget.ES2020, removeComments: true, alwaysStrict: true },
    }).outputText;
  } else {
    js = readFileSync(new URL(`../browser/${name}.js`, import.meta.url), 'utf8');
  }
  const lines = js
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && l !== '"use strict";' && !l.startsWith('//# sourceMappingURL='))
    .join('\n');
  cache.set(name, lines);
  return lines;
}

const cache = new Map<BrowserScript, string>();

/** A page's whole script: `consts` (numbers) declared before the strip's functions and the page's. */
export function pageScript(page: 'report' | 'live', consts: Readonly<Record<string, number>> = {}): string {
  const declared = Object.entries(consts).map(([k, v]) => `const ${k} = ${v};\n`);
  return `(function () {\n"use strict";\nconst nats = ${formatNats.toString()};\n${declared.join('')}${compiled('strip')}\n${compiled(page)}\n})();`;
}

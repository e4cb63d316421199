/**
 * `JSON.parse`, tolerant of the non-standard literals Python's `json.dumps` writes by default for
 * floats JSON cannot hold: `NaN`, `Infinity`, `-Infinity` (a server serialising a logprob of −inf
 * with the standard library sends exactly that). Only when the strict parse fails and the text
 * holds such a literal is it rewritten outside strings — `NaN` → `null`, `Infinity` → `1e999`,
 * which `JSON.parse` reads as ±Infinity — and parsed again; the values then meet `readLogprob`'s
 * rules (flagged as null or sentinel) like any other. Throws the strict parse's error otherwise.
 */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    if (!text.includes('NaN') && !text.includes('Infinity')) throw err;
    const fixed = rewriteLiterals(text);
    if (fixed === text) throw err;
    try {
      return JSON.parse(fixed);
    } catch {
      throw err;
    }
  }
}

/** Replaces bare `NaN` / `Infinity` tokens outside string literals. */
function rewriteLiterals(text: string): string {
  const out: string[] = [];
  let start = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92 /* \ */) i++;
      else if (c === 34 /* " */) inString = false;
      continue;
    }
    if (c === 34) {
      inString = true;
    } else if (c === 78 /* N */ && text.startsWith('NaN', i)) {
      out.push(text.slice(start, i), 'null');
      i += 2;
      start = i + 1;
    } else if (c === 73 /* I */ && text.startsWith('Infinity', i)) {
      out.push(text.slice(start, i), '1e999');
      i += 7;
      start = i + 1;
    }
  }
  if (start === 0) return text;
  out.push(text.slice(start));
  return out.join('');
}

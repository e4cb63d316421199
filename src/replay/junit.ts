import { hostname } from 'node:os';
import type { GateCase, GateResult, GateSpec } from '../core/gates.js';

/**
 * `--junit FILE`: the gates as a JUnit XML report for CI systems (Jenkins, GitLab, GitHub
 * reporters): one `<testsuite>` per gate (and one for the verdict gate of `--fail-on`), one
 * `<testcase>` per prompt, a `<failure>` when the prompt fails the gate and an `<error>` when it
 * could not be judged (not compared). The run-level checks of the verdict gate (no pair compared,
 * the offline detectors) are test cases of their own.
 */

interface Case {
  /** Input order (file, then line): cases are listed as the inputs were, whatever order the pairs finished in. */
  order?: [string, number];
  name: string;
  classname: string;
  status: GateCase['status'];
  message: string;
  type: string;
  time: number;
}

interface Suite {
  name: string;
  properties: Array<[string, string]>;
  cases: Case[];
}

/** Characters XML 1.0 cannot hold at all (most C0 controls, lone surrogates, U+FFFE/FFFF). */
const INVALID =
  // eslint-disable-next-line no-control-regex -- the control characters are what it finds
  /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** Text for an XML attribute or element: escaped, with characters XML cannot hold replaced by U+FFFD. */
export function xmlEscape(s: string): string {
  return s
    .replace(INVALID, '\uFFFD')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;')
    .replace(/\r/g, '&#13;')
    .replace(/\n/g, '&#10;')
    .replace(/\t/g, '&#9;');
}

/** Element text: escaped like an attribute but keeping its line breaks readable. */
function xmlText(s: string): string {
  return xmlEscape(s).replace(/&#10;/g, '\n').replace(/&#9;/g, '\t');
}

/** Collects test cases per suite and renders the report. */
export class JUnitReport {
  private readonly suites = new Map<string, Suite>();
  private readonly started = Date.now();

  constructor(private readonly name: string) {}

  /** The suite of one gate (created on first use, in the order gates are given). */
  suite(name: string, properties: Array<[string, string]> = []): Suite {
    let s = this.suites.get(name);
    if (!s) {
      s = { name, properties, cases: [] };
      this.suites.set(name, s);
    }
    return s;
  }

  /** One prompt's result under a gate (`GateAccumulator`'s `onCase`). */
  gateCase(
    spec: GateSpec,
    prompt: { at: string; route: string; order?: [string, number] },
    r: GateCase,
    time = 0,
  ): void {
    const props: Array<[string, string]> = spec.threshold === null ? [] : [['threshold', String(spec.threshold)]];
    this.suite(`gate ${spec.name}`, props).cases.push({
      ...(prompt.order ? { order: prompt.order } : {}),
      name: `${prompt.at} ${prompt.route}`,
      classname: `logprobe.gate.${spec.kind}`,
      status: r.status,
      message: r.note ? `${r.message} (${r.note})` : r.message,
      type: spec.kind,
      time,
    });
  }

  /** One test case of any suite (the verdict gate's). */
  add(
    suite: string,
    c: {
      order?: [string, number];
      name: string;
      classname: string;
      status: GateCase['status'];
      message: string;
      type: string;
      time?: number;
    },
    properties: Array<[string, string]> = [],
  ): void {
    this.suite(suite, properties).cases.push({ ...c, time: c.time ?? 0 });
  }

  /** Ensures every gate has its suite, even with no prompt (an empty run). */
  declare(results: readonly GateResult[]): void {
    for (const g of results)
      this.suite(`gate ${g.gate}`, g.threshold === null ? [] : [['threshold', String(g.threshold)]]);
  }

  render(): string {
    const suites = [...this.suites.values()];
    const count = (cases: readonly Case[], status: GateCase['status']) =>
      cases.filter((c) => c.status === status).length;
    const all = suites.flatMap((s) => s.cases);
    const total = ((Date.now() - this.started) / 1000).toFixed(3);
    const ts = new Date(this.started).toISOString().replace(/\.\d{3}Z$/, '');
    const host = xmlEscape(hostname());
    const out: string[] = ['<?xml version="1.0" encoding="UTF-8"?>'];
    out.push(
      `<testsuites name="${xmlEscape(this.name)}" tests="${all.length}" failures="${count(all, 'failed')}" errors="${count(all, 'error')}" time="${total}">`,
    );
    const byInput = (a: Case, b: Case) =>
      a.order && b.order
        ? a.order[0].localeCompare(b.order[0]) || a.order[1] - b.order[1]
        : a.order
          ? -1
          : b.order
            ? 1
            : 0;
    for (const s of suites) s.cases.sort(byInput);
    suites.forEach((s, i) => {
      const time = s.cases.reduce((a, c) => a + c.time, 0).toFixed(3);
      out.push(
        `  <testsuite name="${xmlEscape(s.name)}" id="${i}" tests="${s.cases.length}" failures="${count(s.cases, 'failed')}" errors="${count(s.cases, 'error')}" skipped="0" time="${time}" timestamp="${ts}" hostname="${host}">`,
      );
      if (s.properties.length > 0) {
        out.push('    <properties>');
        for (const [k, v] of s.properties) out.push(`      <property name="${xmlEscape(k)}" value="${xmlEscape(v)}"/>`);
        out.push('    </properties>');
      }
      for (const c of s.cases) {
        const open = `    <testcase name="${xmlEscape(c.name)}" classname="${xmlEscape(c.classname)}" time="${c.time.toFixed(3)}"`;
        if (c.status === 'passed') {
          out.push(`${open}>`, `      <system-out>${xmlText(c.message)}</system-out>`, '    </testcase>');
        } else {
          const tag = c.status === 'failed' ? 'failure' : 'error';
          const first = c.message.length > 300 ? `${c.message.slice(0, 297)}…` : c.message;
          out.push(
            `${open}>`,
            `      <${tag} message="${xmlEscape(first)}" type="${xmlEscape(c.type)}">${xmlText(c.message)}</${tag}>`,
            '    </testcase>',
          );
        }
      }
      out.push('  </testsuite>');
    });
    out.push('</testsuites>');
    return `${out.join('\n')}\n`;
  }
}

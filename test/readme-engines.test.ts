// The README's "by hand" block (marked `<!-- readme-test: engines -->`), run as written: two
// llama.cpp test engines playing llama-server, `logprobe serve` on its defaults with
// LOGPROBE_SAMPLE_RATE=1, a client request with curl, and the metrics grep — which must show a
// global_shift pair scored past the divergence, as the demo shows (#26 point 2). `npx logprobe`
// becomes this checkout's bin/logprobe.js; `cmd &` lines start in the background and are waited
// for until they listen; the processes run in a temporary directory (serve's ./captures).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { llamaSkip } from './helpers/llama-e2e.js';
import { asHere, readmeBlock, runLine } from './helpers/readme.js';

interface Bg {
  child: ChildProcess;
  out: string;
}

function background(cmd: string, cwd: string): Bg {
  const child = spawn('bash', ['-c', cmd], { cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const bg: Bg = { child, out: '' };
  child.stdout!.on('data', (c: Buffer) => (bg.out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (bg.out += c.toString()));
  return bg;
}

async function until(
  what: string,
  ok: () => boolean | Promise<boolean>,
  ms: number,
  detail: () => string,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}\n${detail()}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

test(
  "the README's engine and serve commands, run as written, give the demo's verdict: global_shift, scored",
  { skip: llamaSkip },
  async (t) => {
    const lines = readmeBlock('engines');
    assert.equal(lines.length, 5, lines.join('\n'));
    const cwd = mkdtempSync(join(tmpdir(), 'logprobe-readme-'));
    const started: Bg[] = [];
    t.after(() => {
      for (const b of started) if (b.child.exitCode === null) process.kill(-b.child.pid!, 'SIGTERM');
      rmSync(cwd, { recursive: true, force: true });
    });
    const logs = () => started.map((b) => b.out).join('\n---\n');
    const outputs: string[] = [];
    for (const line of lines) {
      if (line.endsWith('&')) {
        const bg = background(asHere(line.slice(0, -1).trim()), cwd);
        started.push(bg);
        const ready = / serve\b/.test(line) ? /"msg":"logprobe listening"/ : /listening on http/;
        await until(`"${line}" to listen`, () => ready.test(bg.out) || bg.child.exitCode !== null, 180_000, logs);
        assert.equal(bg.child.exitCode, null, `${line} exited:\n${bg.out}`);
      } else if (/\/metrics/.test(line)) {
        // The mirror answers after the client: poll the README's own grep until the pair is counted.
        let last = '';
        await until(
          'a scored global_shift pair in the metrics',
          async () => {
            last = (await runLine(asHere(line), cwd)).out;
            return (
              /verdict="global_shift",kind="pair"\} [1-9]/.test(last) &&
              /^logprobe_scoring_total\{route="\/v1\/completions",outcome="ok"\} [1-9]/m.test(last)
            );
          },
          120_000,
          () => `${last}\n${logs()}`,
        );
        outputs.push(last);
      } else {
        const r = await runLine(asHere(line), cwd);
        assert.equal(r.code, 0, `${line}:\n${r.out}`);
        outputs.push(r.out);
      }
    }
    // The client got the candidate's own answer, a llama-server completion.
    const answer = JSON.parse(outputs[0]!) as {
      object: string;
      choices: Array<{ text: string }>;
      usage: { completion_tokens: number };
    };
    assert.equal(answer.object, 'text_completion');
    assert.equal(answer.usage.completion_tokens, 16);
    // Every comparison of the run: global_shift, none early_shift (the pre-scoring verdict).
    assert.doesNotMatch(outputs[1]!, /early_shift/);
    const serveLog = started[2]!.out;
    assert.match(serveLog, /mirroring 100% of \/v1\/completions/, 'the start line says every request is mirrored');
  },
);

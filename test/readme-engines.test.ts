// The README's "by hand" block (marked `<!-- readme-test: engines -->`), run as written: two
// llama.cpp test engines playing llama-server, `logprobe serve` on its defaults with
// LOGPROBE_SAMPLE_RATE=1, a client request with curl, and the metrics grep — which must show a
// global_shift pair scored past the divergence, as the demo shows (#26 point 2). `node
// bin/logprobe.js` becomes this checkout's bin/logprobe.js; `cmd &` lines start in the background
// and are waited for until they listen; the processes run in a temporary directory (serve's
// ./captures). The last line, `kill %1 %2 %3`, is done as a shell does it to each job's process —
// here the job's PID alone, not its process group: each job must be node itself, so that it
// stops and leaves nothing listening (an `npx … &` job is npm, and killing it leaves the node
// under it running).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
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

/** Whether something accepts a connection on 127.0.0.1:port. */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
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
    assert.equal(lines.length, 6, lines.join('\n'));
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
        // asHere would run an npx line as node too; as a user runs it, the job would be npm.
        assert.doesNotMatch(line, /\bnpx\b/, `${line}: a background npx job leaves its node running when killed`);
        const bg = background(asHere(line.slice(0, -1).trim()), cwd);
        started.push(bg);
        const ready = / serve\b/.test(line) ? /"msg":"logprobe listening"/ : /listening on http/;
        await until(`"${line}" to listen`, () => ready.test(bg.out) || bg.child.exitCode !== null, 180_000, logs);
        assert.equal(bg.child.exitCode, null, `${line} exited:\n${bg.out}`);
      } else if (/^kill %1 %2 %3$/.test(line)) {
        assert.equal(started.length, 3, 'three background jobs');
        for (const b of started) {
          // The job's process is node running logprobe, not a launcher in front of it.
          if (existsSync('/proc/self/cmdline')) {
            const argv = readFileSync(`/proc/${b.child.pid}/cmdline`, 'utf8').split('\0');
            assert.equal(argv[0], process.execPath, argv.join(' '));
            assert.match(argv[1] ?? '', /bin\/logprobe\.js$/, argv.join(' '));
          }
          process.kill(b.child.pid!, 'SIGTERM');
        }
        for (const b of started)
          await until('the job to exit', () => b.child.exitCode !== null || b.child.signalCode !== null, 30_000, logs);
        assert.equal(started[2]!.child.exitCode, 0, `serve drains and exits 0:\n${started[2]!.out}`);
        for (const port of [30000, 30001, 8080, 9464])
          assert.equal(await listening(port), false, `nothing on :${port}`);
      } else if (/\/metrics/.test(line)) {
        // The mirror answers after the client: poll the README's own grep until the pair is counted.
        let last = '';
        await until(
          'a scored global_shift pair in the metrics',
          async () => {
            last = (await runLine(asHere(line), cwd)).out;
            return (
              /verdict="global_shift",kind="pair"[^}]*\} [1-9]/.test(last) &&
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

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { request } from 'undici';
import { startLogprobe } from './helpers/logprobe.js';
import { metricValue, startSim } from './helpers/sim.js';
import { startUpstream } from './helpers/upstream.js';
import { captureLines, tempDir } from './helpers/capture.js';

/**
 * Shadow mode behind a real mirror: Debian's nginx with the `mirror` directive, as
 * docs/operations.md's "Shadow mode" configures it. Installed by .ci/run; locally the test skips
 * when nginx is absent.
 */
const hasNginx = !spawnSync('nginx', ['-v']).error;
const skip =
  !hasNginx && !process.env.CI ? 'nginx is not installed (apt-get install nginx; .ci/run installs it)' : false;

const FAST_ALERTS = { window: 10, minRequests: 5, fireFraction: 0.5, forSeconds: 0, cusum: { k: 0.5, h: 5 } };
const N = 12;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** nginx in the foreground with `conf`, until it answers on `port`. */
async function startNginx(dir: string, conf: string, port: number): Promise<ChildProcess> {
  const file = join(dir, 'nginx.conf');
  writeFileSync(file, conf);
  const proc = spawn('nginx', ['-c', file, '-p', dir, '-e', join(dir, 'error.log')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (proc.exitCode !== null)
      throw new Error(`nginx exited ${proc.exitCode}: ${stderr}${readFileSync(join(dir, 'error.log'), 'utf8')}`);
    try {
      const res = await request(`http://127.0.0.1:${port}/nginx-up`);
      await res.body.dump();
      return proc;
    } catch {
      if (Date.now() > deadline) throw new Error(`nginx did not listen on ${port}: ${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

test(
  "shadow mode behind nginx `mirror`: the client gets production's answer, logprobe answers the copy 202 and compares it on candidate and baseline",
  { skip },
  async (t) => {
    const dir = tempDir(t, 'logprobe-shadow-nginx-');
    // nginx's workers run as nobody when it starts as root: they need to reach its temp paths.
    chmodSync(dir, 0o755);
    const captures = join(dir, 'captures');

    // Production: a simulated engine behind a recorder of exactly what it answered.
    const engine = await startSim({ seed: 5 });
    const answered: Buffer[] = [];
    const production = await startUpstream(async (req, res, body) => {
      const up = await request(`${engine.url}${req.url}`, {
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json' },
      });
      const bytes = Buffer.from(await up.body.arrayBuffer());
      answered.push(bytes);
      res.writeHead(up.statusCode, {
        'content-type': String(up.headers['content-type']),
        'content-length': bytes.length,
      });
      res.end(bytes);
    });
    const baseline = await startSim();
    const candidate = await startSim({ stateShift: 0.6 });
    t.after(() => Promise.all([engine.close(), production.close(), baseline.close(), candidate.close()]));

    const lp = await startLogprobe({
      mode: 'shadow',
      candidate: { url: candidate.url },
      baseline: { url: baseline.url },
      mirror: { sampleRate: 1 },
      alert: FAST_ALERTS,
      capture: { enabled: true, dir: captures },
    });
    let lpClosed = false;
    t.after(() => (lpClosed ? undefined : lp.close()));
    const lpPort = new URL(lp.proxyUrl).port;

    const port = await freePort();
    mkdirSync(join(dir, 'nginx'));
    const conf = `${process.getuid?.() === 0 ? 'user root;\n' : ''}worker_processes 1;
daemon off;
pid ${dir}/nginx/nginx.pid;
error_log ${dir}/nginx/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path ${dir}/nginx/body;
  proxy_temp_path ${dir}/nginx/proxy;
  fastcgi_temp_path ${dir}/nginx/fastcgi;
  uwsgi_temp_path ${dir}/nginx/uwsgi;
  scgi_temp_path ${dir}/nginx/scgi;
  upstream production { server 127.0.0.1:${production.port}; keepalive 16; }
  upstream logprobe { server 127.0.0.1:${lpPort}; keepalive 16; }
  server {
    listen 127.0.0.1:${port};
    location = /nginx-up { return 204; }
    location / {
      mirror /_logprobe_mirror;
      mirror_request_body on;
      proxy_pass http://production;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Request-Id $request_id;
    }
    location = /_logprobe_mirror {
      internal;
      proxy_pass http://logprobe$request_uri;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Request-Id $request_id;
      proxy_connect_timeout 1s;
      proxy_read_timeout 5s;
    }
  }
}
`;
    const nginx = await startNginx(join(dir, 'nginx'), conf, port);
    t.after(
      () =>
        new Promise<void>((resolve) => {
          if (nginx.exitCode !== null) return resolve();
          nginx.once('exit', () => resolve());
          nginx.kill('SIGTERM');
        }),
    );

    const clientBodies: string[] = [];
    for (let i = 0; i < N; i++) {
      const chat = i % 2 === 0;
      const body = JSON.stringify(
        chat
          ? {
              model: 'sim',
              messages: [{ role: 'user', content: `client question ${i}: what is a mirror?` }],
              max_tokens: 16,
              temperature: 0.7,
            }
          : { model: 'sim', prompt: `Client prompt ${i}: a mirror is`, max_tokens: 16, temperature: 0.7 },
      );
      clientBodies.push(body);
      const res = await request(`http://127.0.0.1:${port}${chat ? '/v1/chat/completions' : '/v1/completions'}`, {
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json' },
      });
      const got = Buffer.from(await res.body.arrayBuffer());
      assert.equal(res.statusCode, 200);
      // Byte for byte what production answered this request.
      assert.ok(answered.at(-1)!.equals(got), `request ${i}: the client got production's bytes`);
      assert.match(got.toString(), /"choices"/);
    }
    assert.equal(answered.length, N);
    assert.equal(production.seen.length, N, 'production served each client request once');

    // logprobe answered each of nginx's copies 202 and mirrored every one.
    const deadline = Date.now() + 20_000;
    while (lp.logs.lines.filter((l) => l.msg === 'shadow request').length < N && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    const shadowLines = lp.logs.lines.filter((l) => l.msg === 'shadow request');
    assert.equal(shadowLines.length, N, 'every copy reached logprobe');
    assert.ok(
      shadowLines.every((l) => l.status === 202 && l.mode === 'shadow'),
      JSON.stringify(shadowLines[0]),
    );
    await lp.runtime.mirror!.idle();

    const m = await (await request(`${lp.adminUrl}/metrics`)).body.text();
    assert.equal(metricValue(m, 'logprobe_shadow_requests_total', { status_class: '2xx' }), N);
    assert.equal(metricValue(m, 'logprobe_proxy_requests_total'), 0, 'nothing was proxied');
    assert.equal(metricValue(m, 'logprobe_mirror_total', { outcome: 'ok' }), N);
    const shifts =
      (metricValue(m, 'logprobe_verdicts_total', { kind: 'pair', verdict: 'global_shift' }) ?? 0) +
      (metricValue(m, 'logprobe_verdicts_total', { kind: 'pair', verdict: 'early_shift' }) ?? 0);
    assert.equal(shifts, N, 'the shifted candidate shows in every verdict');
    assert.equal(metricValue(m, 'logprobe_alert_firing', { alert: 'LogprobGlobalShift' }), 1);

    // logprobe never called the candidate for a client: only the mirror's rewritten copies (greedy,
    // the mirror's seed), never a client's own request (temperature 0.7).
    const gens = candidate.requests.filter((r) => r.method === 'POST' && /\/v1\/(chat\/)?completions$/.test(r.path));
    assert.ok(gens.length >= N, `${gens.length} candidate calls`);
    for (const r of gens) {
      const b = JSON.parse(r.body) as Record<string, unknown>;
      assert.equal(b.temperature, 0);
      assert.equal(b.seed, 1234);
      assert.ok(!clientBodies.includes(r.body));
    }

    // The pairs are in the capture (flushed on close).
    await lp.close();
    lpClosed = true;
    const records = captureLines(captures).map(
      (l) =>
        JSON.parse(l) as {
          outcome: string;
          analysis: { verdict: string } | null;
          request: { temperature: number };
          clientHeaders?: Record<string, string>;
        },
    );
    assert.equal(records.length, N);
    assert.ok(
      records.every(
        (r) =>
          r.outcome === 'ok' && r.analysis !== null && ['global_shift', 'early_shift'].includes(r.analysis.verdict),
      ),
    );
    assert.ok(records.every((r) => r.request.temperature === 0));
    // nginx's $request_id went to production and to logprobe alike: the capture can be matched to production's logs.
    const ids = new Set(production.seen.map((s) => s.headers['x-request-id']));
    assert.equal(ids.size, N);
    assert.ok(
      records.every((r) => ids.has(r.clientHeaders?.['x-request-id'])),
      'the capture carries the request ids production saw',
    );
  },
);

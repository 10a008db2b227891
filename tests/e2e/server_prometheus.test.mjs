// /metrics against the real tools: `promtool check metrics` lints the exposition (both
// the deltaserve_ and the vllm: sets), and a real Prometheus server, started here on
// loopback with a generated config and a temporary storage dir, scrapes the daemon under
// load; a PromQL query through its HTTP API must see a non-zero aggregate generation rate.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';

import { sleep, startDaemon } from './daemon.mjs';

const model = 'deltaserve-fake';
const have = (tool) => spawnSync(tool, ['--version'], { stdio: 'ignore' }).status === 0;
const skip = !have('prometheus') || !have('promtool') ? 'prometheus / promtool not installed' : false;

let daemon;
before(async () => {
  daemon = await startDaemon({ args: ['--vllm-metrics', '--fake-step-us', '2000', '--metrics-rate-window-s', '2'] });
});
after(async () => assert.deepEqual(await daemon.stop(), { code: 0, signal: null }));

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

// Keeps `concurrency` streams busy until `stop.done` is set.
async function load(stop, concurrency = 8) {
  const client = new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: 'x', maxRetries: 0 });
  const worker = async (w) => {
    for (let i = 0; !stop.done; ++i) {
      const stream = await client.chat.completions.create({
        model, stream: true, max_tokens: 400, ignore_eos: true,
        messages: [{ role: 'user', content: `load ${w}/${i} ` + 'p'.repeat(50) }],
      });
      for await (const chunk of stream) { void chunk; if (stop.done) break; }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
}

test('promtool check metrics passes', { skip }, async () => {
  const stop = { done: false };
  const running = load(stop, 4);
  await sleep(500); // every histogram and gauge has observations
  const text = await (await fetch(`${daemon.url}/metrics`)).text();
  stop.done = true;
  await running;
  assert.match(text, /^deltaserve_generation_tokens_total /m);
  assert.match(text, /^vllm:num_requests_running\{/m);
  // Our own names pass the linter as they are.
  const ours = text.split('\n').filter((l) => !/^(# (HELP|TYPE) )?vllm:/.test(l)).join('\n');
  const lint = spawnSync('promtool', ['check', 'metrics'], { input: ours, encoding: 'utf8' });
  assert.equal(lint.status, 0, `promtool:\n${lint.stdout}${lint.stderr}`);
  // vLLM's names carry a ':' (and one histogram is called *_total): promtool says so for
  // vLLM's own /metrics too. Those two complaints are the only ones allowed.
  const all = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  const complaints = `${all.stdout}${all.stderr}`.split('\n').filter((l) => l.trim());
  assert.ok(complaints.length > 0);
  for (const line of complaints) {
    assert.match(line, /^vllm:\S+ (metric names should not contain ':'|non-counter metrics should not have "_total" suffix)$/,
      line);
  }
});

test('a real Prometheus scrapes the daemon; PromQL sees the generation rate under load', { skip, timeout: 60000 }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'deltaserve-prom-'));
  const promPort = await freePort();
  writeFileSync(path.join(dir, 'prometheus.yml'), [
    'global:',
    '  scrape_interval: 1s',
    '  evaluation_interval: 1s',
    'scrape_configs:',
    '  - job_name: deltaserve',
    '    static_configs:',
    `      - targets: ['127.0.0.1:${daemon.port}']`,
    '',
  ].join('\n'));
  const prom = spawn('prometheus', [
    `--config.file=${path.join(dir, 'prometheus.yml')}`,
    `--storage.tsdb.path=${path.join(dir, 'data')}`,
    `--web.listen-address=127.0.0.1:${promPort}`,
    '--log.level=warn',
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  let promLog = '';
  prom.stderr.on('data', (d) => (promLog += d));
  const promUrl = `http://127.0.0.1:${promPort}`;
  const query = async (q) => {
    const res = await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(q)}`);
    const body = await res.json();
    assert.equal(body.status, 'success', JSON.stringify(body));
    return body.data.result;
  };
  const stop = { done: false };
  const running = load(stop);
  try {
    let rate = 0;
    let gauge = 0;
    let vllmRate = 0;
    for (let i = 0; i < 120 && !(rate > 0 && gauge > 0 && vllmRate > 0); ++i) {
      await sleep(250);
      const ok = await fetch(`${promUrl}/-/ready`).then((r) => r.ok).catch(() => false);
      if (!ok) continue;
      const r = await query('sum(rate(deltaserve_generation_tokens_total[5s]))');
      const g = await query('deltaserve_generation_tokens_per_second');
      const v = await query('sum(rate(vllm:generation_tokens_total[5s]))');
      rate = r.length ? Number(r[0].value[1]) : 0;
      gauge = g.length ? Number(g[0].value[1]) : 0;
      vllmRate = v.length ? Number(v[0].value[1]) : 0;
    }
    assert.ok(rate > 0, `rate(deltaserve_generation_tokens_total) = ${rate}\n${promLog}`);
    assert.ok(gauge > 0, `deltaserve_generation_tokens_per_second = ${gauge}`);
    assert.ok(vllmRate > 0, `rate(vllm:generation_tokens_total) = ${vllmRate}`);
    const targets = await (await fetch(`${promUrl}/api/v1/targets`)).json();
    assert.equal(targets.data.activeTargets[0].health, 'up', JSON.stringify(targets.data.activeTargets[0]));
    const running = await query('deltaserve_requests_running');
    assert.ok(running.length === 1);
  } finally {
    stop.done = true;
    await running;
    prom.kill('SIGTERM');
    await new Promise((resolve) => prom.once('exit', resolve));
    rmSync(dir, { recursive: true, force: true });
  }
});

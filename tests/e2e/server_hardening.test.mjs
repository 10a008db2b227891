// The daemon under hostile and careless use, end to end: nesting bombs stop at the JSON
// depth limit (fast, memory back where it was), descriptor exhaustion makes the accept loop
// back off instead of spinning, a second signal during the drain forces the exit, and the
// protocol details clients, proxies and operators rely on (HEAD, absolute-form targets, the
// auth scheme in any case, process and HTTP metrics, typed ignored fields, fatal errors on
// stderr with documented exit statuses, redacted secrets).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import { daemonBinary, scrape, sleep, startDaemon } from './daemon.mjs';

const MESSAGES = [{ role: 'user', content: 'hi' }];

function rssBytes(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]) * 1024;
}

// User + system CPU seconds of a process.
function cpuSeconds(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;  // USER_HZ is 100 on Linux
}

// One raw HTTP/1.1 exchange on a new connection: resolves to the whole response text.
function rawRequest(port, text, timeoutMs = 5000) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let data = '';
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`no answer to ${JSON.stringify(text)}: ${data}`)); }, timeoutMs);
    socket.on('data', (d) => (data += d));
    socket.on('error', (e) => { clearTimeout(timer); reject(e); });
    socket.on('close', () => { clearTimeout(timer); resolve(data); });
    socket.write(text);
  });
}

const chatBody = (extra) => JSON.stringify({ messages: MESSAGES, max_tokens: 4, ...extra });

// POSTs `body` on a new connection and resolves once the whole answer has arrived (a
// rejected body is answered before the rest of it is read): {ms, text}. The client stops
// sending at that point, as a client does once it has its answer.
const postRequest = (route, body) => Buffer.concat([
  Buffer.from(`POST ${route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`),
  body]);

// `request` is built (postRequest) before the clock starts.
function rawPost(port, request) {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    const socket = net.connect(port, '127.0.0.1');
    let text = '';
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`no answer: ${text}`)); }, 30000);
    socket.on('data', (d) => {
      text += d;
      const split = text.indexOf('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(text);
      if (split < 0 || !length || text.length < split + 4 + Number(length[1])) return;
      const ms = performance.now() - start;  // the whole answer is here
      clearTimeout(timer);
      socket.destroy();
      resolve({ ms, text });
    });
    socket.on('error', (e) => { clearTimeout(timer); if (text) resolve({ ms: performance.now() - start, text }); else reject(e); });
    socket.write(request);
  });
}

test('a 4-million-deep body is a fast 400 naming the limit, and memory returns', async () => {
  const daemon = await startDaemon({ args: ['--http-threads', '2'] });
  try {
    const post = (body) => fetch(`${daemon.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body });
    for (let i = 0; i < 3; ++i) assert.equal((await post(chatBody())).status, 200);
    const before = rssBytes(daemon.proc.pid);

    // The body: 4 million '[' under a field the server ignores, 8 MB with spaces.
    const bomb = Buffer.concat([Buffer.from(`{"messages":${JSON.stringify(MESSAGES)},"metadata":`),
                                Buffer.alloc(4_000_000 * 2, '[ ')]);
    assert.ok(bomb.length < 8 << 20 && bomb.length > 8_000_000);
    const bombRequest = postRequest('/v1/chat/completions', bomb);
    const times = [];
    for (let i = 0; i < 5; ++i) {
      const { ms, text } = await rawPost(daemon.port, bombRequest);
      times.push(ms);
      assert.match(text, /^HTTP\/1\.1 400 /);
      const body = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));
      assert.equal(body.error.code, 'json_too_deep');
      assert.match(body.error.message, /128 levels \(limit --max-json-depth\)/);
    }
    // The bar (50 ms from the first byte sent to the whole answer) on the best of
    // five, so a scheduling hiccup of a loaded CI machine does not decide; none may come
    // near the seconds a full parse took.
    const shown = times.map((t) => t.toFixed(1)).join(', ');
    assert.ok(Math.min(...times) < 50, `answered in ${shown} ms`);
    assert.ok(Math.max(...times) < 1000, `answered in ${shown} ms`);

    // Four at once: /health keeps answering meanwhile.
    const bombs = Array.from({ length: 4 }, () => rawPost(daemon.port, bombRequest));
    const healthStart = performance.now();
    assert.equal((await fetch(`${daemon.url}/health`)).status, 200);
    assert.ok(performance.now() - healthStart < 1000);
    for (const { text } of await Promise.all(bombs)) assert.match(text, /^HTTP\/1\.1 400 /);

    // The same body through the parser itself (fully read first: a chunk of spaces before
    // the brackets hides nothing): still a 400, never built.
    const late = Buffer.concat([Buffer.from(`{"messages":${JSON.stringify(MESSAGES)},"metadata":`),
                                Buffer.from('['.repeat(200)), Buffer.alloc(100_000, ' ')]);
    const lateAnswer = await rawPost(daemon.port, postRequest('/v1/chat/completions', late));
    assert.match(lateAnswer.text, /^HTTP\/1\.1 400 [^]*json_too_deep/);

    assert.equal((await post(chatBody())).status, 200, 'still serving');
    await sleep(300);  // the rejected connections' lingering reads end
    const after = rssBytes(daemon.proc.pid);
    assert.ok(after <= before * 1.1, `RSS ${before} -> ${after} bytes`);
  } finally {
    assert.equal((await daemon.stop()).code, 0);
  }
});

test('too many values is a 400 naming the limit; ignored fields are type-checked', async () => {
  const daemon = await startDaemon({ args: ['--max-json-elements', '1000'] });
  try {
    const post = (body) => fetch(`${daemon.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const res = await post(JSON.stringify({ prompt: Array(5000).fill(1), max_tokens: 1 }));
    assert.equal(res.status, 400);
    const body = await res.json();
    assert.equal(body.error.code, 'json_too_large');
    assert.match(body.error.message, /1000 values \(limit --max-json-elements\)/);
    for (const field of [{ user: 5 }, { metadata: 'x' }, { store: 'yes' }, { metadata: { k: 1 } }]) {
      const r = await fetch(`${daemon.url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody(field) });
      assert.equal(r.status, 400, JSON.stringify(field));
      assert.equal((await r.json()).error.type, 'invalid_request_error');
    }
    const ok = await fetch(`${daemon.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: chatBody({ user: 'u', metadata: { k: 'v' }, store: false }) });
    assert.equal(ok.status, 200);
  } finally {
    assert.equal((await daemon.stop()).code, 0);
  }
});

test('out of descriptors: the accept loop backs off, logs little, and recovers', { timeout: 120000 }, async () => {
  // --log-level info so that a per-failure warning would show (it used to be ~190,000 lines/s).
  const daemon = await startDaemon({ maxFds: 64, args: ['--log-level', 'info', '--keep-alive-timeout-s', '120'] });
  const sockets = [];
  try {
    // A keep-alive connection opened before the flood keeps being served during it.
    const kept = net.connect(daemon.port, '127.0.0.1');
    await new Promise((resolve) => kept.on('connect', resolve));
    let keptData = '';
    kept.on('data', (d) => (keptData += d));
    const askKept = async () => {
      keptData = '';
      kept.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
      for (let i = 0; i < 100 && !keptData.includes('"status":"ok"'); ++i) await sleep(20);
      return keptData.includes('"status":"ok"');
    };
    assert.ok(await askKept());

    for (let i = 0; i < 200; ++i) {
      const s = net.connect(daemon.port, '127.0.0.1');
      s.on('error', () => {});
      sockets.push(s);
    }
    await sleep(1500);  // the daemon has run out of descriptors by now
    const linesBefore = daemon.output().split('\n').length;
    const cpu0 = cpuSeconds(daemon.proc.pid);
    const t0 = performance.now();
    await sleep(3000);
    const cpuShare = (cpuSeconds(daemon.proc.pid) - cpu0) / ((performance.now() - t0) / 1000);
    assert.ok(cpuShare < 0.2, `daemon CPU ${(cpuShare * 100).toFixed(1)}% while out of descriptors`);
    assert.ok(await askKept(), 'an existing connection is still served');
    const lines = daemon.output().split('\n').filter((l) => l.length > 0);
    assert.ok(lines.length < 100, `${lines.length} log lines:\n${lines.slice(0, 20).join('\n')}`);
    assert.ok(lines.some((l) => /accept failed: Too many open files/.test(l)), daemon.output());
    assert.ok(linesBefore < 100);

    // Free descriptors: a new request succeeds.
    for (const s of sockets.splice(0, 150)) s.destroy();
    const res = await fetch(`${daemon.url}/health`, { signal: AbortSignal.timeout(10000) });
    assert.equal(res.status, 200);
    assert.ok(daemon.output().split('\n').length < 100);
    kept.destroy();
  } finally {
    for (const s of sockets) s.destroy();
    assert.equal((await daemon.stop()).code, 0);
  }
});

test('a second SIGTERM during the drain exits at once with 128 + 15', async () => {
  const daemon = await startDaemon({ args: ['--fake-step-us', '50000', '--shutdown-grace-s', '60'] });
  // A long stream keeps the drain waiting.
  const controller = new AbortController();
  const stream = fetch(`${daemon.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
    body: JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(2000) }], max_tokens: 1000, stream: true }),
  }).then((r) => r.text()).catch(() => '');
  await sleep(300);
  assert.equal((await fetch(`${daemon.url}/health`)).status, 200);
  daemon.proc.kill('SIGTERM');
  await sleep(300);
  assert.equal(daemon.proc.exitCode, null, 'still draining');
  const start = performance.now();
  daemon.proc.kill('SIGTERM');
  const status = await daemon.exited;
  assert.ok(performance.now() - start < 3000);
  assert.equal(status.code, 143);
  assert.match(daemon.output(), /signal 15 during the drain: exiting now/);
  controller.abort();
  await stream;
  await daemon.stop();
});

test('HEAD, absolute-form targets, the bearer scheme in any case, metrics', async () => {
  const daemon = await startDaemon({ args: ['--api-key', 'sk-test-1'] });
  try {
    const head = await fetch(`${daemon.url}/health`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(await head.text(), '');
    const absolute = await rawRequest(daemon.port,
      `GET http://127.0.0.1:${daemon.port}/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    assert.match(absolute, /^HTTP\/1\.1 200 /);
    assert.match(absolute, /"status":"ok"/);
    for (const auth of ['Bearer sk-test-1', 'bearer sk-test-1', 'BEARER sk-test-1']) {
      const res = await fetch(`${daemon.url}/v1/models`, { headers: { authorization: auth } });
      assert.equal(res.status, 200, auth);
    }
    assert.equal((await fetch(`${daemon.url}/v1/models`, { headers: { authorization: 'bearer nope' } })).status, 401);

    const m = await scrape(daemon.url);
    for (const name of ['process_resident_memory_bytes', 'process_open_fds', 'process_cpu_seconds_total',
                        'process_max_fds', 'process_start_time_seconds']) {
      assert.ok(m.get(name) !== undefined, name);
    }
    assert.ok(m.get('process_resident_memory_bytes') > 1e6);
    assert.ok(m.get('process_open_fds') >= 3);
    assert.ok(m.get('deltaserve_http_responses_total', { route: '/health', status: '200' }) >= 2);
    assert.ok(m.get('deltaserve_http_responses_total', { route: '/v1/models', status: '200' }) >= 3);
    assert.ok(m.get('deltaserve_http_responses_total', { route: '/v1/models', status: '401' }) >= 1);
  } finally {
    assert.equal((await daemon.stop()).code, 0);
  }
});

test('fatal errors: one line on stderr, documented exit statuses, nothing listening', async () => {
  const bin = daemonBinary();
  const dir = mkdtempSync(path.join(tmpdir(), 'deltaserve-fatal-'));
  try {
    // A model that does not exist: exit 1 before the port opens, the cause on stderr.
    const portFile = path.join(dir, 'port');
    const missing = spawnSync(bin, ['serve', '--model', path.join(dir, 'missing.gguf'), '--port', '0',
                                    '--port-file', portFile], { encoding: 'utf8', timeout: 20000 });
    assert.equal(missing.status, 1, missing.stderr);
    assert.equal(missing.stdout, '');
    assert.equal(existsSync(portFile), false, 'never listened');
    assert.match(missing.stderr, /^deltaserve serve: cannot load the model: .*missing\.gguf: no such file or directory\n$/);

    // A busy port: exit 3, one line without Boost's source location.
    const daemon = await startDaemon();
    try {
      const busy = spawnSync(bin, ['serve', '--fake-engine', '--port', String(daemon.port)],
                             { encoding: 'utf8', timeout: 20000 });
      assert.equal(busy.status, 3, busy.stderr);
      assert.equal(busy.stderr.trim().split('\n').length, 1, busy.stderr);
      assert.match(busy.stderr, /cannot listen on 127\.0\.0\.1:\d+: Address already in use\n$/);
      assert.doesNotMatch(busy.stderr, /\.hpp|\[system:/);
      assert.equal((await fetch(`${daemon.url}/health`)).status, 200);
    } finally {
      assert.equal((await daemon.stop()).code, 0);
    }

    // A bad flag: exit 2. --help documents the statuses.
    assert.equal(spawnSync(bin, ['serve', '--no-such-flag'], { encoding: 'utf8' }).status, 2);
    const help = spawnSync(bin, ['serve', '--help'], { encoding: 'utf8' });
    assert.equal(help.status, 0);
    assert.match(help.stdout.replace(/\s+/g, ' '), /Exit status: 0 .* 1 the model could not be loaded; 2 .* 3 .* 128\+N/);

    // --dump-config never prints a key.
    const dump = spawnSync(bin, ['serve', '--fake-engine', '--api-key', 'sk-very-secret', '--dump-config'],
                           { encoding: 'utf8' });
    assert.equal(dump.status, 0, dump.stderr);
    assert.doesNotMatch(dump.stdout, /sk-very-secret/);
    assert.deepEqual(JSON.parse(dump.stdout).api_key, ['<redacted>']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// The built-in chat page (GET /), end to end in headless Chromium (Debian's /usr/bin/chromium
// driven by playwright-core): the page loads from the binary with its strict CSP, shows the
// model, streams a reply token by token, stops it (and the daemon frees the request), then
// sends the next turn with the history and shows the exact token count and speed.
//
// The daemon runs the deterministic fake engine (it echoes the user's turn byte by byte)
// with a slow step, so the stream is still running when Stop is pressed.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

import { startDaemon, sleep } from '../deploy/daemon_process.mjs';

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
// Flags for a sandboxless CI container with no network: nothing phones home. Playwright adds
// --headless and --no-sandbox (chromiumSandbox: false) and gives every launch a fresh
// temporary --user-data-dir of its own.
const CHROMIUM_ARGS = ['--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
                       '--disable-component-update', '--disable-sync'];

let daemon;
let browser;

before(async () => {
  daemon = await startDaemon(['--fake-engine', '--fake-step-us', '30000']);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, chromiumSandbox: false,
                                    args: CHROMIUM_ARGS, timeout: 30000 });
});

after(async () => {
  await browser?.close();
  if (daemon) {
    const status = await daemon.stop();
    assert.equal(status.code, 0, `daemon exit ${JSON.stringify(status)}\n${daemon.log()}`);
  }
});

async function metric(name, labels = '') {
  const text = await (await fetch(`${daemon.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `) || (labels === '' && l.startsWith(`${name} `)));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

async function waitFor(what, predicate, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

test('the page and its assets are served from the binary', async () => {
  const page = await fetch(`${daemon.url}/`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /^text\/html/);
  assert.match(page.headers.get('content-security-policy'), /script-src 'self'/);
  assert.equal(page.headers.get('x-content-type-options'), 'nosniff');
  const html = await page.text();
  assert.match(html, /<script src="\/static\/chat\.js" defer><\/script>/);
  assert.doesNotMatch(html, /https?:\/\//, 'no third-party assets');

  const js = await fetch(`${daemon.url}/static/chat.js`);
  assert.equal(js.status, 200);
  assert.match(js.headers.get('content-type'), /^text\/javascript/);
  assert.equal((await fetch(`${daemon.url}/static/chat.css`)).headers.get('content-type'), 'text/css; charset=utf-8');
  assert.equal((await fetch(`${daemon.url}/index.html`)).status, 200);

  const missing = await fetch(`${daemon.url}/static/nope.js`);
  assert.equal(missing.status, 404);
  assert.equal((await missing.json()).error.code, 'unknown_url');
  const post = await fetch(`${daemon.url}/`, { method: 'POST', body: '{}' });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get('allow'), 'GET');
});

test('type a message, watch it stream, stop it, then continue the conversation', { timeout: 60000 }, async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });
  const chatBodies = [];
  page.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) chatBodies.push(r.postDataJSON()); });

  await page.goto(`${daemon.url}/`);
  await page.locator('#model', { hasText: 'deltaserve-fake' }).waitFor();
  assert.equal(await page.textContent('#status'), 'ready');

  // First turn: streamed text appears and grows while the reply is running. The fake codec
  // is byte-level, so this ~480-byte turn echoes for several seconds at 30 ms a step.
  const message = 'Hello from the browser. '.repeat(20).trim();
  await page.fill('#prompt', message);
  await page.click('#send');
  const reply = page.locator('.msg.assistant').first();
  const replyText = reply.locator('.text');
  await page.waitForFunction(() => document.querySelector('.msg.assistant .text')?.textContent.length > 0);
  const early = await replyText.textContent();
  await page.waitForFunction((n) => document.querySelector('.msg.assistant .text').textContent.length > n + 10,
                             early.length);
  assert.ok(await reply.evaluate((el) => el.classList.contains('streaming')), 'still streaming');
  assert.ok(await page.isEnabled('#stop'));
  assert.ok(await page.isDisabled('#send'));
  assert.match(await page.textContent('#speed'), /^\d+(\.\d)? tok\/s$/);
  const streamed = await replyText.textContent();
  assert.ok(message.startsWith(streamed), `the fake engine echoes the user's turn, got ${JSON.stringify(streamed)}`);

  // Stop: the stream ends at once, the text stops growing, the daemon frees the request.
  const abortsBefore = (await metric('deltaserve_requests_finished_total', '{finished_reason="abort"}')) ?? 0;
  await page.click('#stop');
  await page.locator('.msg.assistant[data-outcome="stopped"]').waitFor({ timeout: 5000 });
  const stoppedText = await replyText.textContent();
  await sleep(400);
  assert.equal(await replyText.textContent(), stoppedText, 'no text after stop');
  assert.ok(await page.isEnabled('#send'));
  assert.ok(await page.isDisabled('#stop'));
  assert.equal(await page.textContent('#status'), 'stopped');
  assert.match(await reply.locator('.stats').textContent(), /TTFT \d+ ms · \d+ tokens · [\d.]+ tok\/s · stopped/);
  await waitFor('the daemon to cancel the stopped request', async () =>
    ((await metric('deltaserve_requests_finished_total', '{finished_reason="abort"}')) ?? 0) > abortsBefore &&
    (await metric('deltaserve_requests_running')) === 0);

  // Second turn, capped at 8 tokens: the history carries the stopped reply, the usage chunk
  // gives the exact count.
  await page.click('#settings summary');
  await page.fill('#max-tokens', '8');
  await page.fill('#prompt', 'And again');
  await page.press('#prompt', 'Enter');
  const second = page.locator('.msg.assistant').nth(1);
  await second.locator('xpath=self::*[@data-outcome="length"]').waitFor({ timeout: 10000 });
  assert.match(await second.locator('.stats').textContent(), /· 8 tokens · [\d.]+ tok\/s · length$/);
  assert.ok((await second.locator('.text').textContent()).length > 0);
  assert.equal(chatBodies.length, 2);
  assert.deepEqual(chatBodies[1].messages.map((m) => m.role), ['user', 'assistant', 'user']);
  assert.equal(chatBodies[1].messages[1].content, stoppedText);
  assert.equal(chatBodies[1].max_tokens, 8);
  assert.equal(chatBodies[1].stream, true);

  assert.deepEqual(pageErrors, [], 'no script errors or CSP violations');
  await context.close();
});

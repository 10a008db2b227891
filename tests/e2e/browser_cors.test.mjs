// The official `openai` npm package in a browser page of another origin calls the daemon
// with --cors-allow-origin set (headless Chromium, as the chat page's test drives it): the
// SDK's preflight asks for its X-Stainless-* headers, which the daemon must allow, and a
// streamed chat completion must arrive as text. Without the echoed headers the browser
// refuses the call ("Failed to fetch" / "Connection error.").
//
// The page's origin is a small Node server on another port that serves the test page and
// the SDK's ES modules straight from node_modules/openai.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

import { repoRoot, startDaemon } from '../deploy/daemon_process.mjs';

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
                       '--disable-component-update', '--disable-sync'];
const SDK_DIR = path.join(repoRoot, 'node_modules', 'openai');

const PAGE = `<!doctype html><html><head><meta charset="utf-8">
<script type="importmap">{"imports": {"@aws-sdk/credential-provider-node": "/stub.mjs", "@smithy/hash-node": "/stub.mjs",
  "@smithy/signature-v4": "/stub.mjs"}}</script></head><body><pre id="out"></pre></body></html>`;

let daemon;
let pageServer;
let pageOrigin;
let browser;

// Serves the page, an empty stub for the SDK's optional server-only imports, and the SDK.
function servePage(req, res) {
  const url = new URL(req.url, 'http://x');
  if (url.pathname === '/') {
    res.writeHead(200, { 'content-type': 'text/html' });
    return res.end(PAGE);
  }
  if (url.pathname === '/stub.mjs') {
    res.writeHead(200, { 'content-type': 'text/javascript' });
    return res.end('export default {};');
  }
  if (url.pathname.startsWith('/openai/')) {
    const file = path.normalize(path.join(SDK_DIR, url.pathname.slice('/openai/'.length)));
    if (file.startsWith(SDK_DIR + path.sep) && existsSync(file)) {
      res.writeHead(200, { 'content-type': 'text/javascript' });
      return res.end(readFileSync(file));
    }
  }
  res.writeHead(404);
  res.end();
}

before(async () => {
  pageServer = http.createServer(servePage);
  await new Promise((resolve) => pageServer.listen(0, '127.0.0.1', resolve));
  pageOrigin = `http://127.0.0.1:${pageServer.address().port}`;
  daemon = await startDaemon(['--fake-engine', '--cors-allow-origin', pageOrigin, '--api-key', 'sk-browser']);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, chromiumSandbox: false,
                                    args: CHROMIUM_ARGS, timeout: 30000 });
});

after(async () => {
  await browser?.close();
  pageServer?.close();
  if (daemon) {
    const status = await daemon.stop();
    assert.equal(status.code, 0, `daemon exit ${JSON.stringify(status)}\n${daemon.log()}`);
  }
});

test('the openai package streams a chat completion across origins', { timeout: 60000 }, async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${pageOrigin}/`);
  const result = await page.evaluate(async (baseURL) => {
    const { default: OpenAI } = await import('/openai/index.mjs');
    const client = new OpenAI({ baseURL, apiKey: 'sk-browser', dangerouslyAllowBrowser: true, maxRetries: 0 });
    const models = await client.models.list();
    const stream = await client.chat.completions.create({
      model: models.data[0].id, stream: true, max_tokens: 32,
      messages: [{ role: 'user', content: 'Hello from another origin' }],
    });
    let text = '';
    let chunks = 0;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      ++chunks;
    }
    const raw = await client.chat.completions.create({
      model: models.data[0].id, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
    }).withResponse();
    return { text, chunks, model: models.data[0].id, requestId: raw.response.headers.get('x-request-id') };
  }, `${daemon.url}/v1`);
  assert.deepEqual(errors, []);
  assert.equal(result.model, 'deltaserve-fake');
  assert.ok(result.chunks > 2, JSON.stringify(result));
  // The fake engine echoes the user's turn.
  assert.ok(result.text.length > 0 && 'Hello from another origin'.startsWith(result.text), JSON.stringify(result));
  await page.close();
});

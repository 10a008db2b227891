// SSE keep-alive: while a stream has nothing to send (here: slow fake steps before the
// first token) the daemon writes ": keep-alive" comments every --sse-keepalive-s; the
// official OpenAI client skips them, and the stream's content is unchanged.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { startDaemon } from './daemon.mjs';

const model = 'deltaserve-fake';
let daemon;

before(async () => {
  daemon = await startDaemon({ args: ['--sse-keepalive-s', '0.05', '--fake-step-us', '300000'] });
});
after(async () => assert.deepEqual(await daemon.stop(), { code: 0, signal: null }, daemon.output()));

const body = { model, stream: true, max_tokens: 4, messages: [{ role: 'user', content: 'abcd' }] };

test('comments fill the silence before the first token', async () => {
  const res = await fetch(`${daemon.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  assert.equal(res.status, 200);
  const text = await res.text();
  const events = text.split('\n\n').filter((e) => e.length > 0);
  const firstContent = events.findIndex((e) => e.includes('"content":"a'));
  const firstComment = events.indexOf(': keep-alive');
  assert.ok(firstComment > 0, text);  // after the role chunk
  assert.ok(firstComment < firstContent, text);
  for (const e of events) assert.ok(e === ': keep-alive' || e.startsWith('data: '), e);
  assert.equal(events.at(-1), 'data: [DONE]');
});

test('the OpenAI client ignores the comments', async () => {
  const client = new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: 'x', maxRetries: 0 });
  let content = '';
  for await (const chunk of await client.chat.completions.create(body)) {
    content += chunk.choices[0]?.delta?.content ?? '';
  }
  assert.equal(content, 'abcd');
});

// The daemon on the real CPU engine with the embedded model, driven by the official openai
// client: greedy output does not depend on concurrency or speculation, streaming and
// non-streaming agree, usage counts emitted tokens, and capacity returns to idle.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { scrape, startDaemon } from './daemon.mjs';

const model = 'deltaserve-tiny-moe';
const prompts = [
  'def fibonacci(n):\n', 'import os\nimport sys\n', 'class Stack:\n', 'The quick brown fox',
  'It was a dark and stormy night;', 'for i in range(10):\n', '# Copyright (C) 2001\n', 'Debian is',
];

async function streamText(client, prompt, maxTokens) {
  const stream = await client.completions.create({
    model, prompt, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, usage, finish };
}

// Two daemons side by side: speculation off, and adaptive speculation (the default).
const daemons = {};
const clients = {};

before(async () => {
  for (const [name, args] of [['plain', ['--draft-depth', '0']], ['spec', ['--draft-depth', '3']]]) {
    daemons[name] = await startDaemon({ fake: false, args: ['--max-streams', '16', '--context-tokens', '512', ...args] });
    clients[name] = new OpenAI({ baseURL: `${daemons[name].url}/v1`, apiKey: 'none', maxRetries: 0 });
  }
});

after(async () => {
  for (const d of Object.values(daemons)) {
    const status = await d.stop();
    assert.deepEqual(status, { code: 0, signal: null }, d.output());
  }
});

test('16 concurrent greedy streams equal each stream alone, with and without speculation', async () => {
  const alone = [];
  for (let i = 0; i < 16; ++i) alone.push(await streamText(clients.plain, prompts[i % 8], 12 + (i % 5)));
  for (const name of ['plain', 'spec']) {
    const together = await Promise.all(
      Array.from({ length: 16 }, (_, i) => streamText(clients[name], prompts[i % 8], 12 + (i % 5))));
    for (let i = 0; i < 16; ++i) {
      assert.equal(together[i].text, alone[i].text, `${name} stream ${i}`);
      assert.equal(together[i].finish, 'length');
      assert.equal(together[i].usage.completion_tokens, 12 + (i % 5));
    }
  }
});

test('chat and completion, streaming and not, agree on the real model', async () => {
  const messages = [{ role: 'user', content: 'Write a Python function that adds two numbers.' }];
  const whole = await clients.spec.chat.completions.create({ model, messages, max_tokens: 20, temperature: 0 });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.usage.completion_tokens, 20);
  const stream = await clients.spec.chat.completions.create({ model, messages, max_tokens: 20, temperature: 0, stream: true });
  // The embedded model's template (Qwen3.5's) thinks by default: compare both channels.
  let text = '';
  let reasoning = '';
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    reasoning += chunk.choices[0]?.delta?.reasoning_content ?? '';
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(reasoning, whole.choices[0].message.reasoning_content ?? '');
  assert.ok(text.length + reasoning.length > 0);
  const completion = await clients.plain.completions.create({ model, prompt: prompts[0], max_tokens: 16, temperature: 0 });
  const streamed = await streamText(clients.plain, prompts[0], 16);
  assert.equal(streamed.text, completion.choices[0].text);
  // A request may turn speculation off for itself (deltaserve's draft_depth field).
  const noDrafts = await clients.spec.completions.create({ model, prompt: prompts[0], max_tokens: 16, temperature: 0, draft_depth: 0 });
  assert.equal(noDrafts.choices[0].text, completion.choices[0].text);
  await assert.rejects(
    clients.spec.completions.create({ model, prompt: prompts[0], max_tokens: 4, draft_depth: -3 }),
    (e) => e.status === 400 && /draft_depth/.test(e.message));
});

test('capacity returns to idle after the requests', async () => {
  for (const [name, d] of Object.entries(daemons)) {
    let m;
    for (let i = 0; i < 100; ++i) {
      m = await scrape(d.url);
      if (m.get('deltaserve_requests_running') === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(m.get('deltaserve_requests_running'), 0, name);
    assert.equal(m.get('deltaserve_requests_waiting'), 0, name);
    assert.equal(m.get('deltaserve_kv_blocks_used'), 0, name);
    assert.equal(m.get('deltaserve_state_slots_used'), 0, name);
  }
  const spec = await scrape(daemons.spec.url);
  const drafted = spec.all('deltaserve_spec_decode_num_draft_tokens_per_pos_total').reduce((s, [, v]) => s + v, 0);
  assert.ok(drafted > 0, 'the speculative daemon drafted');
});

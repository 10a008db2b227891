// The OpenAI API of the real daemon (fake engine: it echoes the last user message), driven
// by the official `openai` client and by raw fetch where the exact wire format matters.
// One daemon serves every test of this file (many requests per server lifetime).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { readSse, scrape, startDaemon } from './daemon.mjs';

let daemon;
let client;
const model = 'deltaserve-fake';

before(async () => {
  daemon = await startDaemon();
  client = new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: 'none', maxRetries: 0 });
});

after(async () => {
  const status = await daemon.stop();
  assert.deepEqual(status, { code: 0, signal: null }, daemon.output());
});

const user = (content) => [{ role: 'user', content }];
const utf8Length = (s) => Buffer.byteLength(s, 'utf8');

function checkChatCompletion(c) {
  assert.match(c.id, /^chatcmpl-[A-Za-z0-9]{24}$/);
  assert.equal(c.object, 'chat.completion');
  assert.ok(Number.isInteger(c.created) && Math.abs(c.created - Date.now() / 1000) < 60);
  assert.equal(c.model, model);
  assert.equal(c.choices.length, 1);
  assert.equal(c.choices[0].index, 0);
  assert.equal(c.choices[0].message.role, 'assistant');
  assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);
}

// Collects a chat stream and checks its grammar: role-only first chunk, content deltas,
// exactly one finish chunk (empty delta), optionally a usage chunk with empty choices.
async function collectChatStream(stream, { usage }) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  const ids = new Set(chunks.map((c) => c.id));
  assert.equal(ids.size, 1);
  for (const c of chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.model, model);
  }
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  assert.equal(chunks[0].choices[0].finish_reason, null);
  const finishes = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason !== null);
  assert.equal(finishes.length, 1, 'exactly one finish_reason');
  assert.deepEqual(finishes[0].choices[0].delta, {});
  const last = chunks[chunks.length - 1];
  if (usage) {
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
    assert.equal(chunks.at(-2), finishes[0]);
  } else {
    assert.equal(last, finishes[0]);
  }
  let content = '';
  let reasoning = '';
  for (const c of chunks.slice(1)) {
    if (!c.choices.length) continue;
    content += c.choices[0].delta.content ?? '';
    reasoning += c.choices[0].delta.reasoning_content ?? '';
  }
  return { chunks, content, reasoning, finish: finishes[0].choices[0].finish_reason, usage: last.usage };
}

test('GET /v1/models lists the served model', async () => {
  const page = await client.models.list();
  assert.equal(page.data.length, 1);
  assert.equal(page.data[0].id, model);
  assert.equal(page.data[0].object, 'model');
  const one = await client.models.retrieve(model);
  assert.equal(one.id, model);
});

test('chat completion, not streamed', async () => {
  const text = 'Hello, world';
  const c = await client.chat.completions.create({ model, messages: user(text) });
  checkChatCompletion(c);
  assert.equal(c.choices[0].message.content, text);
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.equal(c.usage.completion_tokens, utf8Length(text)); // the echo; the EOS is not counted
});

test('chat completion, streamed with include_usage', async () => {
  const text = 'héllo wörld 日本 🎉';
  const stream = await client.chat.completions.create({
    model, messages: user(text), stream: true, stream_options: { include_usage: true },
  });
  const r = await collectChatStream(stream, { usage: true });
  assert.equal(r.content, text);
  assert.equal(r.finish, 'stop');
  assert.equal(r.usage.completion_tokens, utf8Length(text));
  for (const c of r.chunks.slice(0, -1)) assert.equal(c.usage, null);
});

test('chat stream without include_usage has no usage chunk', async () => {
  const stream = await client.chat.completions.create({ model, messages: user('abc'), stream: true });
  const r = await collectChatStream(stream, { usage: false });
  assert.equal(r.content, 'abc');
});

test('raw SSE framing: data lines, [DONE] last', async () => {
  const res = await fetch(`${daemon.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: user('xyz'), stream: true, stream_options: { include_usage: true } }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const events = await readSse(res);
  assert.equal(events.at(-1), '[DONE]');
  assert.equal(events.filter((e) => e === '[DONE]').length, 1);
  const parsed = events.slice(0, -1).map((e) => JSON.parse(e));
  assert.deepEqual(parsed.at(-1).choices, []);
  assert.equal(parsed.at(-2).choices[0].finish_reason, 'stop');
});

test('completions, streamed and not; max_tokens ends with length', async () => {
  const c = await client.completions.create({ model, prompt: 'The quick brown fox', max_tokens: 64 });
  assert.match(c.id, /^cmpl-/);
  assert.equal(c.object, 'text_completion');
  assert.equal(c.choices[0].index, 0);
  assert.equal(c.choices[0].text, 'The quick brown fox');
  assert.equal(c.choices[0].finish_reason, 'stop');

  const short = await client.completions.create({ model, prompt: 'abcdefgh', max_tokens: 3 });
  assert.equal(short.choices[0].text, 'abc');
  assert.equal(short.choices[0].finish_reason, 'length');
  assert.equal(short.usage.completion_tokens, 3);

  const stream = await client.completions.create({
    model, prompt: 'stream me', stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  const finishes = [];
  let usage;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finishes.push(chunk.choices[0]);
  }
  assert.equal(text, 'stream me');
  assert.equal(finishes.length, 1);
  assert.equal(finishes[0].text, '');
  assert.equal(usage.completion_tokens, 9);
});

// OpenAI's and vLLM's default for completions is 16 tokens; chat has none (up to the context).
// The fake engine echoes the prompt a byte a token, so a 40-byte prompt shows the cut.
test('completions without max_tokens stop at 16 tokens; chat does not', async () => {
  const prompt = 'abcdefghijklmnopqrstuvwxyz0123456789ABCD';
  const c = await client.completions.create({ model, prompt });
  assert.equal(c.choices[0].text, prompt.slice(0, 16));
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 16);
  const nulled = await client.completions.create({ model, prompt, max_tokens: null });
  assert.equal(nulled.usage.completion_tokens, 16);
  let streamed = '';
  for await (const chunk of await client.completions.create({ model, prompt, stream: true })) {
    streamed += chunk.choices[0]?.text ?? '';
  }
  assert.equal(streamed, prompt.slice(0, 16));
  const chat = await client.chat.completions.create({ model, messages: [{ role: 'user', content: prompt }] });
  assert.equal(chat.choices[0].message.content, prompt);
  assert.equal(chat.choices[0].finish_reason, 'stop');
});

test('stop strings: output cut, usage counts only emitted tokens', async () => {
  const c = await client.chat.completions.create({ model, messages: user('one two STOP three'), stop: ['STOP'] });
  assert.equal(c.choices[0].message.content, 'one two ');
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.equal(c.usage.completion_tokens, utf8Length('one two STOP'));
  const s = await client.chat.completions.create({
    model, messages: user('aaa|bbb'), stop: '|', stream: true, stream_options: { include_usage: true },
  });
  const r = await collectChatStream(s, { usage: true });
  assert.equal(r.content, 'aaa');
  assert.equal(r.usage.completion_tokens, 4);
});

test('thinking text goes to reasoning_content; generation can start inside <think>', async () => {
  // enable_thinking: the template opens <think> in the prompt; the output closes it.
  const c = await client.chat.completions.create({
    model, messages: user('let me see\n</think>\n\nThe answer.'), chat_template_kwargs: { enable_thinking: true },
  });
  assert.equal(c.choices[0].message.reasoning_content, 'let me see');
  assert.equal(c.choices[0].message.content, 'The answer.');
  assert.ok(c.usage.completion_tokens_details.reasoning_tokens > 0);
  assert.ok(c.usage.completion_tokens_details.reasoning_tokens <= c.usage.completion_tokens);

  const stream = await client.chat.completions.create({
    model, messages: user('<think>hmm</think>ok'), stream: true,
  });
  const r = await collectChatStream(stream, { usage: false });
  assert.equal(r.reasoning, 'hmm');
  assert.equal(r.content, 'ok');

  // The client's choice of vLLM's field name, and assistant history given as `reasoning`.
  const v = await client.chat.completions.create({
    model, reasoning_field: 'reasoning',
    messages: [{ role: 'assistant', content: 'x', reasoning: 'earlier' }, ...user('<think>r</think>c')],
  });
  assert.equal(v.choices[0].message.reasoning, 'r');
  assert.equal(v.choices[0].message.reasoning_content, undefined);
});

test('logprobs, tools and sampling fields are accepted', async () => {
  const c = await client.chat.completions.create({
    model, messages: user('ab'), logprobs: true, top_logprobs: 2, temperature: 0.7, top_p: 0.9,
    seed: 42, presence_penalty: 0.1, frequency_penalty: 0.1, logit_bias: { 5: 1 }, top_k: 20, min_p: 0.05,
    repetition_penalty: 1.05, max_completion_tokens: 16,
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }],
    tool_choice: 'auto',
  });
  const lp = c.choices[0].logprobs.content;
  assert.equal(lp.length, 2);
  assert.equal(lp[0].token, 'a');
  assert.deepEqual(lp[0].bytes, [97]);
  assert.equal(lp[0].top_logprobs.length, 2);
});

test('a failure mid-stream ends the stream with an error event', async () => {
  const stream = await client.chat.completions.create({ model, messages: user('x[[fail]]'), stream: true });
  const seen = [];
  await assert.rejects(
    (async () => { for await (const chunk of stream) seen.push(chunk); })(),
    (err) => err instanceof OpenAI.APIError && err.type === 'server_error' && /fake engine failure/.test(err.message),
  );
  assert.ok(seen.length >= 2, 'role chunk and content arrived before the error');
  await assert.rejects(client.chat.completions.create({ model, messages: user('[[fail]]') }),
    (err) => err instanceof OpenAI.InternalServerError && err.status === 500 && err.type === 'server_error');
});

test('tokenize and detokenize', async () => {
  const post = (p, body) => fetch(`${daemon.url}${p}`, { method: 'POST', body: JSON.stringify(body) })
    .then(async (r) => ({ status: r.status, body: await r.json() }));
  const t = await post('/tokenize', { prompt: 'hé' });
  assert.equal(t.status, 200);
  assert.deepEqual(t.body.tokens, [104, 0xc3, 0xa9]);
  assert.equal(t.body.count, 3);
  assert.equal(t.body.max_model_len, 4096);
  const d = await post('/detokenize', { tokens: t.body.tokens });
  assert.deepEqual(d.body, { prompt: 'hé' });
  const chat = await post('/tokenize', { messages: user('a') });
  assert.ok(chat.body.count > 1);
});

test('health, readiness, metrics', async () => {
  assert.equal((await fetch(`${daemon.url}/health`)).status, 200);
  assert.equal((await fetch(`${daemon.url}/ready`)).status, 200);
  const m = await scrape(daemon.url);
  assert.ok(m.get('deltaserve_generation_tokens_total') > 0);
  assert.ok(m.get('deltaserve_requests_finished_total', { finished_reason: 'stop' }) > 0);
  assert.equal(m.get('deltaserve_build_info', {}) , 1);
  const info = m.all('deltaserve_build_info')[0][0];
  for (const label of ['version', 'backend', 'commit']) assert.match(info, new RegExp(`${label}="[^"]+"`));
  assert.equal(m.get('deltaserve_ready'), 1);
  // This scrape's own connection at least (fetch may keep earlier ones alive).
  assert.ok(m.get('deltaserve_open_connections') >= 1);
  // The fake engine holds no device memory; the gauges are there and read 0.
  assert.equal(m.get('deltaserve_device_memory_used_bytes'), 0);
  assert.equal(m.get('deltaserve_device_memory_total_bytes'), 0);
});

// Anthropic's Messages API (/v1/messages) through the official @anthropic-ai/sdk, on the fake
// engine (it echoes the last user message, so a user message holding <think> or <tool_call>
// text makes the "model" emit reasoning or a call): text, thinking and tool_use blocks,
// non-streamed and streamed, a tool_use round trip with a tool_result, count_tokens, stop
// sequences, max_tokens, x-api-key auth and Anthropic-style errors. One daemon, many requests.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

import { startDaemon } from './daemon.mjs';

let daemon;
let client;
const model = 'deltaserve-fake';
const key = 'sk-test-agent';

before(async () => {
  daemon = await startDaemon({ args: ['--api-key', key] });
  client = new Anthropic({ baseURL: daemon.url, apiKey: key, maxRetries: 0 });
});

after(async () => {
  const status = await daemon.stop();
  assert.deepEqual(status, { code: 0, signal: null }, daemon.output());
});

const tools = [{
  name: 'get_weather',
  description: 'Weather for a city',
  input_schema: {
    type: 'object',
    properties: { city: { type: 'string' }, days: { type: 'integer' } },
    required: ['city'],
  },
}];
const xmlCall = '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n'
  + '<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>';

test('messages.create: text, usage, stop_reason end_turn', async () => {
  const m = await client.messages.create({
    model, max_tokens: 64, system: 'Be brief.', messages: [{ role: 'user', content: 'Hello there' }],
  });
  assert.match(m.id, /^msg_[A-Za-z0-9]{24}$/);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, model);
  assert.deepEqual(m.content, [{ type: 'text', text: 'Hello there' }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  assert.ok(m.usage.input_tokens > 0);
  assert.equal(m.usage.output_tokens, 'Hello there'.length);  // one token per byte
  assert.equal(m.usage.cache_read_input_tokens, 0);
});

test('messages.create: stop_sequences and max_tokens', async () => {
  const stopped = await client.messages.create({
    model, max_tokens: 64, stop_sequences: ['STOP'], messages: [{ role: 'user', content: 'abc STOP def' }],
  });
  assert.equal(stopped.stop_reason, 'stop_sequence');
  assert.equal(stopped.stop_sequence, 'STOP');
  assert.equal(stopped.content[0].text, 'abc ');
  const cut = await client.messages.create({
    model, max_tokens: 3, messages: [{ role: 'user', content: 'abcdef' }],
  });
  assert.equal(cut.stop_reason, 'max_tokens');
  assert.equal(cut.content[0].text, 'abc');
  assert.equal(cut.usage.output_tokens, 3);
});

test('messages.create: thinking then a tool_use block, stop_reason tool_use', async () => {
  const m = await client.messages.create({
    model, max_tokens: 400, tools,
    messages: [{ role: 'user', content: `<think>\nNeed weather.\n</think>\n\nChecking.\n${xmlCall}` }],
  });
  assert.equal(m.stop_reason, 'tool_use');
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text', 'tool_use']);
  assert.equal(m.content[0].thinking, 'Need weather.');
  assert.equal(m.content[1].text, 'Checking.');
  assert.match(m.content[2].id, /^toolu_[A-Za-z0-9]{24}$/);
  assert.equal(m.content[2].name, 'get_weather');
  assert.deepEqual(m.content[2].input, { city: 'Paris', days: 3 });
});

test('messages.stream: event sequence for thinking, text and tool_use; finalMessage', async () => {
  const stream = client.messages.stream({
    model, max_tokens: 2000, tools, thinking: { type: 'enabled', budget_tokens: 1024 },
    // thinking on: the prompt opens the think block, so the echo starts inside it
    messages: [{ role: 'user', content: `Hmm.\n</think>\n\nSure.\n${xmlCall}\n${xmlCall}` }],
  });
  const types = [];
  for await (const event of stream) types.push(event.type === 'content_block_start'
    ? `start:${event.content_block.type}` : event.type);
  const message = await stream.finalMessage();
  const collapsed = types.filter((t, i) => t !== 'content_block_delta' || types[i - 1] !== t);
  assert.deepEqual(collapsed, [
    'message_start',
    'start:thinking', 'content_block_delta', 'content_block_stop',
    'start:text', 'content_block_delta', 'content_block_stop',
    'start:tool_use', 'content_block_delta', 'content_block_stop',
    'start:tool_use', 'content_block_delta', 'content_block_stop',
    'message_delta', 'message_stop',
  ]);
  assert.equal(message.stop_reason, 'tool_use');
  assert.equal(message.content[0].thinking, 'Hmm.');
  assert.equal(message.content[1].text, 'Sure.');
  assert.deepEqual(message.content[2].input, { city: 'Paris', days: 3 });
  assert.deepEqual(message.content[3].input, { city: 'Paris', days: 3 });
  assert.notEqual(message.content[2].id, message.content[3].id);
  assert.ok(message.usage.output_tokens > 0);
});

test('content keeps the generation order (text, tool_use, text); the stream agrees with the body', async () => {
  const body = { model, max_tokens: 400, tools, messages: [{ role: 'user', content: `Before.\n${xmlCall}\nAfter.` }] };
  const m = await client.messages.create(body);
  assert.deepEqual(m.content.map((b) => b.type), ['text', 'tool_use', 'text']);
  assert.equal(m.content[0].text, 'Before.');
  assert.equal(m.content[2].text, 'After.');
  const streamed = await client.messages.stream(body).finalMessage();
  const withoutIds = (blocks) => blocks.map(({ id, ...rest }) => rest);
  assert.deepEqual(withoutIds(streamed.content), withoutIds(m.content));
  assert.equal(streamed.stop_reason, m.stop_reason);
  assert.equal(streamed.usage.output_tokens, m.usage.output_tokens);
});

test('tool_use round trip: the tool_result goes back and the conversation continues', async () => {
  const first = await client.messages.create({
    model, max_tokens: 400, tools, tool_choice: { type: 'auto' },
    messages: [{ role: 'user', content: xmlCall }],
  });
  const call = first.content.find((b) => b.type === 'tool_use');
  assert.ok(call);
  const second = await client.messages.create({
    model, max_tokens: 64, tools,
    messages: [
      { role: 'user', content: xmlCall },
      { role: 'assistant', content: first.content },
      { role: 'user', content: [
        { type: 'tool_result', tool_use_id: call.id, content: '{"temp": 21}' },
        { type: 'text', text: 'thanks' },
      ] },
    ],
  });
  assert.equal(second.stop_reason, 'end_turn');
  assert.deepEqual(second.content, [{ type: 'text', text: 'thanks' }]);
});

test('tool_choice none: the call text stays text', async () => {
  const m = await client.messages.create({
    model, max_tokens: 400, tools, tool_choice: { type: 'none' }, messages: [{ role: 'user', content: xmlCall }],
  });
  assert.equal(m.stop_reason, 'end_turn');
  assert.deepEqual(m.content, [{ type: 'text', text: xmlCall }]);
});

test('count_tokens: the prompt of the same body', async () => {
  const body = { model, system: 'Be brief.', messages: [{ role: 'user', content: 'Hello there' }] };
  const counted = await client.messages.countTokens(body);
  const m = await client.messages.create({ ...body, max_tokens: 4 });
  assert.equal(counted.input_tokens, m.usage.input_tokens);
  const withTools = await client.messages.countTokens({ ...body, tools });
  assert.ok(withTools.input_tokens >= counted.input_tokens);
});

test('errors: Anthropic format, and the server keeps serving', async () => {
  const post = (body, headers = {}) => fetch(`${daemon.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, ...headers },
    body: JSON.stringify(body),
  });
  const cases = [
    [{ model, max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }, /text-only/],
    [{ model, max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'bogus' }] }] }, /unknown content block type 'bogus'/],
    [{ model, max_tokens: 8, tools: [{ name: 't', input_schema: { type: 'string' } }],
      messages: [{ role: 'user', content: 'x' }] }, /input_schema must have type 'object'/],
    [{ model, max_tokens: 8, tools: [{ name: 't', input_schema: 'nope' }],
      messages: [{ role: 'user', content: 'x' }] }, /expected a JSON Schema object/],
    [{ model, messages: [{ role: 'user', content: 'x' }] }, /max_tokens/],
    [{ model, max_tokens: 8, tool_choice: { type: 'tool', name: 'nope' }, tools,
      messages: [{ role: 'user', content: 'x' }] }, /no tool named 'nope'/],
    [{ model, max_tokens: 8, tool_choice: { type: 'any' }, messages: [{ role: 'user', content: 'x' }] },
      /'any' needs at least one tool/],
    [{ model, max_tokens: 8, messages: [{ role: 'user', content: '' }] }, /non-empty content/],
    [{ model, max_tokens: 8, temperature: 1.5, messages: [{ role: 'user', content: 'x' }] }, /'temperature'/],
    // tool_use and tool_result pair up across consecutive turns, as Anthropic requires
    [{ model, max_tokens: 8, messages: [{ role: 'user', content: [
      { type: 'tool_result', tool_use_id: 'toolu_x', content: 'r' }] }] }, /unexpected tool_use_id 'toolu_x'/],
    [{ model, max_tokens: 8, messages: [{ role: 'user', content: 'x' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_y', name: 'get_weather', input: {} }] },
      { role: 'user', content: 'no result' }] }, /without tool_result blocks immediately after: toolu_y/],
  ];
  for (const [body, pattern] of cases) {
    const res = await post(body);
    assert.equal(res.status, 400, JSON.stringify(body));
    const err = await res.json();
    assert.equal(err.type, 'error');
    assert.equal(err.error.type, 'invalid_request_error');
    assert.match(err.error.message, pattern);
  }
  const unauthorized = await post({ model, max_tokens: 8, messages: [{ role: 'user', content: 'x' }] },
    { 'x-api-key': 'wrong' });
  assert.equal(unauthorized.status, 401);
  assert.equal((await unauthorized.json()).error.type, 'authentication_error');
  await assert.rejects(client.messages.create({ model: 'claude-nope', max_tokens: 8,
    messages: [{ role: 'user', content: 'x' }] }), (e) => e instanceof Anthropic.NotFoundError);
  // x-api-key is accepted as well as Bearer, also beside a bearer token meant for another hop
  // (Claude Code can send both), and the daemon still serves.
  const ok = await post({ model, max_tokens: 64, messages: [{ role: 'user', content: 'still here' }] },
    { authorization: 'Bearer for-a-proxy' });
  assert.equal(ok.status, 200);
  assert.equal((await ok.json()).content[0].text, 'still here');
});

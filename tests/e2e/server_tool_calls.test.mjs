// Tool calls through the official `openai` client (fake engine: it echoes the last user
// message, so a user message holding a <tool_call> block makes the "model" emit one).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { startDaemon } from './daemon.mjs';

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

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'integer' } },
      required: ['city'],
    },
  },
}];

const xmlCall = '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n'
  + '<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>';
const jsonCall = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';

test('non-streaming: message.tool_calls, content null, finish_reason tool_calls', async () => {
  const c = await client.chat.completions.create({
    model, tools, messages: [{ role: 'user', content: xmlCall + '\n' + jsonCall }],
  });
  const choice = c.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, null);
  assert.equal(choice.message.tool_calls.length, 2);
  const [a, b] = choice.message.tool_calls;
  assert.match(a.id, /^call_[A-Za-z0-9]{24}$/);
  assert.notEqual(a.id, b.id);
  assert.equal(a.type, 'function');
  assert.equal(a.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(a.function.arguments), { city: 'Paris', days: 3 });
  assert.deepEqual(JSON.parse(b.function.arguments), { city: 'Oslo' });
  assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);
});

test('streaming: tool_calls deltas and finish_reason tool_calls', async () => {
  const stream = await client.chat.completions.create({
    model, tools, stream: true, messages: [{ role: 'user', content: 'On it.\n' + xmlCall }],
  });
  let content = '';
  const calls = [];
  const finishes = [];
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta.content ?? '';
    for (const d of choice.delta.tool_calls ?? []) {
      if (d.id) calls[d.index] = { id: d.id, name: d.function.name, arguments: '' };
      calls[d.index].arguments += d.function.arguments ?? '';
    }
    if (choice.finish_reason) finishes.push(choice.finish_reason);
  }
  assert.equal(content, 'On it.');
  assert.deepEqual(finishes, ['tool_calls']);
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_weather');
  assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris', days: 3 });
});

test('tool_choice none or no tools: the call text stays content', async () => {
  for (const extra of [{ tools, tool_choice: 'none' }, {}]) {
    const c = await client.chat.completions.create({
      model, ...extra, messages: [{ role: 'user', content: xmlCall }],
    });
    assert.equal(c.choices[0].finish_reason, 'stop');
    assert.equal(c.choices[0].message.content, xmlCall);
    assert.equal(c.choices[0].message.tool_calls, undefined);
  }
});

test('multi-turn: assistant tool_calls and tool results are accepted', async () => {
  const first = await client.chat.completions.create({
    model, tools, messages: [{ role: 'user', content: xmlCall }],
  });
  const message = first.choices[0].message;
  const c = await client.chat.completions.create({
    model,
    tools,
    messages: [
      { role: 'user', content: xmlCall },
      message,
      { role: 'tool', tool_call_id: message.tool_calls[0].id, content: '{"temp": 21}' },
      { role: 'user', content: 'thanks' },
    ],
  });
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.equal(c.choices[0].message.content, 'thanks');
});

// The agent APIs on the real CPU engine with the embedded model, which now carries Qwen3.5's
// chat template: official SDKs (@anthropic-ai/sdk, openai), greedy output identical streamed
// and not, count_tokens equal to the usage of the same body, tools reaching the prompt, and
// tool results (Anthropic tool_result, Responses function_call_output, chat role "tool")
// rendered by the template. The tiny model's text is nonsense: only shapes and counts are checked.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { startDaemon } from './daemon.mjs';

const model = 'deltaserve-tiny-moe';
let daemon;
let anthropic;
let openai;

before(async () => {
  daemon = await startDaemon({ fake: false, args: ['--max-streams', '4', '--context-tokens', '1024', '--draft-depth', '0'] });
  anthropic = new Anthropic({ baseURL: daemon.url, apiKey: 'none', maxRetries: 0 });
  openai = new OpenAI({ baseURL: `${daemon.url}/v1`, apiKey: 'none', maxRetries: 0 });
});

after(async () => {
  const status = await daemon.stop();
  assert.deepEqual(status, { code: 0, signal: null }, daemon.output());
});

const weather = {
  name: 'get_weather',
  description: 'Weather for a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

const textOf = (content) => content.filter((b) => b.type === 'text').map((b) => b.text).join('');

test('messages: create and stream agree (greedy), count_tokens matches usage', async () => {
  const body = { model, max_tokens: 12, temperature: 0, system: 'You are terse.',
    messages: [{ role: 'user', content: 'Tell me a fortune about computers.' }] };
  const m = await anthropic.messages.create(body);
  assert.equal(m.stop_reason === 'max_tokens' || m.stop_reason === 'end_turn', true);
  assert.ok(m.usage.output_tokens > 0 && m.usage.output_tokens <= 12);
  const stream = anthropic.messages.stream(body);
  const streamed = await stream.finalMessage();
  assert.equal(textOf(streamed.content), textOf(m.content));
  assert.equal(streamed.usage.output_tokens, m.usage.output_tokens);
  const { max_tokens, temperature, ...countBody } = body;
  const counted = await anthropic.messages.countTokens(countBody);
  assert.equal(counted.input_tokens, m.usage.input_tokens);
});

test('messages: tools reach the prompt; a tool_use / tool_result round trip renders', async () => {
  const base = { model, messages: [{ role: 'user', content: 'Weather in Paris?' }] };
  const plain = await anthropic.messages.countTokens(base);
  const withTools = await anthropic.messages.countTokens({ ...base, tools: [weather] });
  assert.ok(withTools.input_tokens > plain.input_tokens + 50, `${withTools.input_tokens} vs ${plain.input_tokens}`);
  const m = await anthropic.messages.create({
    model, max_tokens: 8, temperature: 0, tools: [weather],
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny, 21 C' }] },
    ],
  });
  assert.equal(m.type, 'message');
  assert.ok(m.usage.input_tokens > withTools.input_tokens);
});

test('messages: a final assistant message is a prefill that the answer continues', async () => {
  const messages = [{ role: 'user', content: 'Say hello.' }, { role: 'assistant', content: 'Hello, my name is' }];
  const m = await anthropic.messages.create({ model, max_tokens: 8, temperature: 0, messages });
  // The same prompt through chat completions' continue_final_message: no new assistant turn.
  const c = await openai.chat.completions.create({ model, max_tokens: 8, temperature: 0, messages,
    continue_final_message: true, add_generation_prompt: false, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, c.usage.prompt_tokens);
  assert.equal(textOf(m.content), c.choices[0].message.content);
  const counted = await anthropic.messages.countTokens({ model, messages });
  assert.equal(counted.input_tokens, c.usage.prompt_tokens);
});

test('continue_final_message: a prefill with outer whitespace, which the template trims, is continued', async () => {
  // Qwen3.5's template trims message content, so 'Hello, my name is ' renders without its
  // space; the prompt is cut after the trimmed text (as Hugging Face's continue_final_message).
  const body = (content) => ({ model, max_tokens: 4, temperature: 0, continue_final_message: true,
    add_generation_prompt: false, chat_template_kwargs: { enable_thinking: false },
    messages: [{ role: 'user', content: 'Say hello.' }, { role: 'assistant', content }] });
  const plain = await openai.chat.completions.create(body('Hello, my name is'));
  for (const content of ['Hello, my name is ', '\n Hello, my name is\n']) {
    const c = await openai.chat.completions.create(body(content));
    assert.equal(c.usage.prompt_tokens, plain.usage.prompt_tokens, JSON.stringify(content));
    assert.equal(c.choices[0].message.content, plain.choices[0].message.content);
  }
});

test('responses: create and stream agree (greedy); function_call_output renders', async () => {
  const body = { model, input: 'Write a Python function is_even(n).', max_output_tokens: 10, temperature: 0,
    reasoning: { effort: 'none' } };
  const r = await openai.responses.create(body);
  assert.ok(['completed', 'incomplete'].includes(r.status));
  const stream = await openai.responses.create({ ...body, stream: true });
  let text = '';
  let done = null;
  for await (const event of stream) {
    if (event.type === 'response.output_text.delta') text += event.delta;
    if (event.type === 'response.completed' || event.type === 'response.incomplete') done = event.response;
  }
  assert.equal(text, r.output_text);
  assert.equal(done.usage.output_tokens, r.usage.output_tokens);
  const round = await openai.responses.create({
    model, max_output_tokens: 6, temperature: 0,
    tools: [{ type: 'function', name: weather.name, parameters: weather.input_schema }],
    input: [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
    ],
  });
  assert.ok(round.usage.input_tokens > r.usage.input_tokens);
});

test('responses: instructions with developer messages in input render (one system message)', async () => {
  const r = await openai.responses.create({ model, max_output_tokens: 4, temperature: 0, instructions: 'You are an agent.',
    input: [{ role: 'developer', content: 'Use the tools.' }, { role: 'user', content: 'Hello' }] });
  const joined = await openai.responses.create({ model, max_output_tokens: 4, temperature: 0,
    input: [{ role: 'system', content: 'You are an agent.\n\nUse the tools.' }, { role: 'user', content: 'Hello' }] });
  assert.equal(r.usage.input_tokens, joined.usage.input_tokens);
  assert.equal(r.output_text, joined.output_text);
});

test('chat completions: a role "tool" message renders with the embedded template', async () => {
  const c = await openai.chat.completions.create({
    model, max_tokens: 6, temperature: 0,
    tools: [{ type: 'function', function: { name: weather.name, parameters: weather.input_schema } }],
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
    ],
  });
  assert.ok(c.usage.prompt_tokens > 100);
  assert.ok(['stop', 'length', 'tool_calls'].includes(c.choices[0].finish_reason));
});

// Constrained output through the agent APIs: only the grammar can make the tiny model's text
// valid. Closed sets (enums) keep the outputs short: a free string or array ends only when the
// model chooses to, and the tiny model may not within max_tokens.
const forcedWeather = { ...weather,
  input_schema: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } }, required: ['city'] } };

test('responses text.format json_schema: output parses and validates', async () => {
  const schema = { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] }, days: { type: 'integer' } },
    required: ['city', 'days'], additionalProperties: false };
  for (let i = 0; i < 10; ++i) {
    const r = await openai.responses.create({ model, input: 'Weather?', temperature: 1.0, max_output_tokens: 200,
      reasoning: { effort: 'none' }, text: { format: { type: 'json_schema', name: 'w', schema, strict: true } } });
    const value = JSON.parse(r.output_text);
    assert.equal(typeof value.city, 'string');
    assert.ok(Number.isInteger(value.days));
    assert.deepEqual(Object.keys(value).sort(), ['city', 'days']);
  }
});

test('messages output_config.format json_schema: output parses and validates; schema errors name the field', async () => {
  const schema = { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] }, days: { type: 'integer' } },
    required: ['city', 'days'], additionalProperties: false };
  for (let i = 0; i < 6; ++i) {
    const m = await anthropic.messages.create({ model, max_tokens: 200, temperature: 1.0, cache_control: { type: 'ephemeral' },
      messages: [{ role: 'user', content: 'Weather?' }], output_config: { format: { type: 'json_schema', schema } } });
    const value = JSON.parse(textOf(m.content));
    assert.ok(['Paris', 'Rome'].includes(value.city));
    assert.ok(Number.isInteger(value.days));
    assert.deepEqual(Object.keys(value).sort(), ['city', 'days']);
  }
  const beyond = { type: 'object', properties: { a: { type: 'string', pattern: '(x)\\1' } } };
  await assert.rejects(anthropic.messages.create({ model, max_tokens: 8, messages: [{ role: 'user', content: 'x' }],
    output_config: { format: { type: 'json_schema', schema: beyond } } }),
  (e) => e.status === 400 && /output_config\.format\.schema/.test(e.message));
  await assert.rejects(openai.responses.create({ model, input: 'x', max_output_tokens: 8,
    text: { format: { type: 'json_schema', name: 'n', schema: beyond } } }),
  (e) => e.status === 400 && e.param === 'text.format.schema');
});

test('messages tool_choice any / tool: tool_use blocks always come back (one with disable_parallel_tool_use)', async () => {
  for (const base of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }]) {
    for (let i = 0; i < 6; ++i) {
      const single = i % 2 === 0;
      const tool_choice = single ? { ...base, disable_parallel_tool_use: true } : base;
      const m = await anthropic.messages.create({ model, max_tokens: 200, temperature: 1.0, tools: [forcedWeather], tool_choice,
        messages: [{ role: 'user', content: 'Weather in Paris?' }] });
      const calls = m.content.filter((b) => b.type === 'tool_use');
      if (single) {
        assert.equal(m.stop_reason, 'tool_use');
        assert.equal(calls.length, 1);
      } else {
        // Several calls may run into max_tokens (the last one then cut, its input closed).
        assert.ok(['tool_use', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
        assert.ok(calls.length >= 1);
      }
      for (const call of calls) assert.equal(call.name, 'get_weather');
      assert.equal(typeof calls[0].input.city, 'string');
      // Calls only: even a call cut before its name leaves no markup in a text block.
      assert.deepEqual(m.content.filter((b) => b.type !== 'tool_use'), [], JSON.stringify(m.content));
    }
  }
});

test('streamed tool calls arrive as argument fragments: input_json_delta and function_call_arguments.delta', async () => {
  const stream = anthropic.messages.stream({ model, max_tokens: 200, temperature: 1.0, tools: [forcedWeather],
    tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
    messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  const partial = [];
  stream.on('streamEvent', (e) => {
    if (e.type === 'content_block_delta' && e.delta.type === 'input_json_delta') partial.push(e.delta.partial_json);
  });
  const message = await stream.finalMessage();
  const call = message.content.find((b) => b.type === 'tool_use');
  assert.ok(partial.length >= 3, JSON.stringify(partial));  // "{", the parameter's pieces, "}"
  assert.deepEqual(JSON.parse(partial.join('')), call.input);
  assert.ok(['Paris', 'Rome'].includes(call.input.city));

  const events = await openai.responses.create({ model, input: 'Weather?', temperature: 1.0, max_output_tokens: 200,
    reasoning: { effort: 'none' }, parallel_tool_calls: false, stream: true,
    tools: [{ type: 'function', name: 'get_weather', parameters: forcedWeather.input_schema }],
    tool_choice: { type: 'function', name: 'get_weather' } });
  const deltas = [];
  let done = null;
  let completed = null;
  for await (const e of events) {
    if (e.type === 'response.function_call_arguments.delta') deltas.push(e.delta);
    if (e.type === 'response.function_call_arguments.done') done = e.arguments;
    if (e.type === 'response.completed') completed = e.response;
  }
  assert.ok(deltas.length >= 3, JSON.stringify(deltas));
  assert.equal(deltas.join(''), done);
  const item = completed.output.find((o) => o.type === 'function_call');
  assert.equal(item.arguments, done);
  assert.ok(['Paris', 'Rome'].includes(JSON.parse(done).city));
});

// Qwen's template takes one system message, first, and raises on a later one. Each API says
// so in its own error format, naming the client's message, and the daemon keeps serving.
test('a system message after a user message is a clear 400 on chat, responses and messages', async () => {
  const late = [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'yo' }, { role: 'system', content: 'Be brief.' }];
  await assert.rejects(openai.chat.completions.create({ model, max_tokens: 4, messages: late }), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, String(err));
    assert.equal(err.type, 'invalid_request_error');
    assert.equal(err.param, 'messages[2]');
    assert.match(err.message, /messages\[2\].*system .*messages must come first/);
    assert.match(err.message, /System message must be at the beginning/);  // the template's own words
    return true;
  });
  // Leading system and developer messages are merged: no error.
  const merged = await openai.chat.completions.create({ model, max_tokens: 2, temperature: 0, messages: [
    { role: 'system', content: 'a' }, { role: 'developer', content: 'b' }, { role: 'user', content: 'hi' }] });
  assert.ok(merged.usage.completion_tokens > 0);

  await assert.rejects(openai.responses.create({ model, max_output_tokens: 16, instructions: 'x', input: [
    { role: 'user', content: 'hi' }, { role: 'developer', content: 'Be brief.' }] }), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, String(err));
    assert.equal(err.param, 'input[1]');
    assert.match(err.message, /system .*messages must come first/);
    return true;
  });

  // Anthropic's messages carry only user and assistant turns: a system one is refused as such.
  await assert.rejects(anthropic.messages.create({ model, max_tokens: 4, messages: [
    { role: 'user', content: 'hi' }, { role: 'system', content: 'Be brief.' }] }), (err) => {
    assert.ok(err instanceof Anthropic.BadRequestError, String(err));
    assert.equal(err.error.type, 'error');
    assert.equal(err.error.error.type, 'invalid_request_error');
    assert.match(err.error.error.message, /messages\[1\]\.role.*system prompt goes in 'system'/);
    return true;
  });
  const ok = await openai.chat.completions.create({ model, max_tokens: 2, messages: [{ role: 'user', content: 'still there?' }] });
  assert.ok(ok.choices[0].message.content !== undefined);
});

// A thinking budget forces "\n</think>\n\n" after its last token; a max_tokens that cuts that
// close short must not leave a piece of the tag in the reasoning, streamed or not, on chat or
// responses. (A lone trailing newline stays: reasoning cut by max_tokens keeps its newlines.)
test('a thinking budget close cut by max_tokens leaves no markup in the reasoning', async () => {
  for (let max = 3; max <= 9; ++max) {
    const body = { model, input: 'hi', max_output_tokens: max, temperature: 0, thinking_token_budget: 2 };
    const r = await openai.responses.create(body);
    const reasoning = r.output.filter((i) => i.type === 'reasoning').map((i) => i.content[0].text).join('');
    assert.doesNotMatch(reasoning, /<\//, `max_output_tokens ${max}: ${JSON.stringify(reasoning)}`);
    const stream = await openai.responses.create({ ...body, stream: true });
    let deltas = '';
    for await (const event of stream) if (event.type === 'response.reasoning_text.delta') deltas += event.delta;
    assert.equal(deltas, reasoning, `max_output_tokens ${max}`);
    const chat = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }],
      max_tokens: max, temperature: 0, thinking_token_budget: 2 });
    assert.doesNotMatch(chat.choices[0].message.reasoning_content ?? '', /<\//, `max_tokens ${max}`);
  }
});

// A forced call cut by max_output_tokens is closed by the last step: the streamed
// output_item.done carries the same status as the item in response.incomplete.
test('responses stream: a call cut by max_output_tokens is incomplete in output_item.done too', async () => {
  const tools = [{ type: 'function', name: 'f', parameters: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] } }];
  for (let max = 14; max <= 24; max += 2) {
    const stream = await openai.responses.create({ model, input: 'hi', max_output_tokens: max, temperature: 0,
      reasoning: { effort: 'none' }, tool_choice: 'required', tools, stream: true });
    const done = new Map();
    let final = null;
    for await (const event of stream) {
      if (event.type === 'response.output_item.done') done.set(event.item.id, event.item.status);
      if (event.type === 'response.completed' || event.type === 'response.incomplete') final = event.response;
    }
    for (const item of final.output) assert.equal(done.get(item.id), item.status, `max_output_tokens ${max}: ${item.id}`);
  }
});

// A tool whose schema is no JSON Schema (an unknown type) is a 400 in each API's own format
// with tool_choice auto too, as OpenAI and Anthropic answer, and the server keeps serving.
test('a malformed tool schema is a 400 with tool_choice auto on messages, responses and chat', async () => {
  const bad = { type: 'object', properties: { a: { type: 'strung' } } };
  await assert.rejects(anthropic.messages.create({ model, max_tokens: 2, tools: [{ name: 'f', input_schema: bad }],
    messages: [{ role: 'user', content: 'hi' }] }), (e) => e instanceof Anthropic.BadRequestError
    && e.error.error.type === 'invalid_request_error' && /properties\.a\.type.*strung/.test(e.error.error.message));
  await assert.rejects(openai.responses.create({ model, max_output_tokens: 2, input: 'hi',
    tools: [{ type: 'function', name: 'f', strict: false, parameters: bad }] }),
  (e) => e instanceof OpenAI.BadRequestError && /properties\.a\.type$/.test(e.param));
  await assert.rejects(openai.chat.completions.create({ model, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }],
    tools: [{ type: 'function', function: { name: 'f', parameters: bad } }] }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0].function.parameters.properties.a.type');
  const ok = await anthropic.messages.create({ model, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }],
    tools: [{ name: 'f', input_schema: { type: 'object', properties: { a: { type: ['string', 'null'] },
      b: { oneOf: [{ type: 'integer' }, { type: 'string' }] }, c: { type: 'array', items: [{ type: 'string' }] } } } }] });
  assert.equal(ok.type, 'message');
});
